"""One exchange as one JSON object: the NDJSON contract (docs/ndjson.md, docs/exchange.schema.json).

Bodies are decoded here, on demand, through the versioned schemas; one
`DecodeContext` template carries the user's settings and the topic-id names
learned from earlier Metadata responses.
"""

from __future__ import annotations

import json
from dataclasses import replace

from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.node import Node
from kanalyze.correlation import SASL_RAW_API, Exchange, Message

SCHEMA_VERSION = "kanalyze.exchange/1"

dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_HEADER_KEYS = ("request_api_key", "request_api_version", "correlation_id", "client_id")


def ts_seconds(ts_ns: int) -> float:
    """Epoch seconds with microsecond precision."""
    return round(ts_ns / 1e9, 6)


def _node_diagnostics(node: Node) -> list[dict[str, object]]:
    out = []
    for n in node.walk():
        for d in n.diagnostics:
            item = d.to_json()
            if n.source:
                item["source"] = n.source
            out.append(item)
    return out


class ExchangeEncoder:
    """Turns exchanges into JSON-ready dicts; `decode` False keeps bodies out (header-only mode)."""

    def __init__(self, ctx: DecodeContext | None = None, decode: bool = True) -> None:
        self.template = ctx or DecodeContext()
        self.decode = decode
        self._conn_json: dict[int, str] = {}
        self._str_json: dict[str | None, str] = {}

    def _ctx(self) -> DecodeContext:
        return replace(self.template, buffers=[])

    def body(self, ex: Exchange, msg: Message, is_request: bool) -> tuple[Node | None, DecodeContext]:
        """The decoded body tree of one side (None when its api is unknown)."""
        ctx = self._ctx()
        data = msg.pdu.data
        if ex.api_key == SASL_RAW_API:
            from dissectors.embedded import decode_raw_sasl

            return decode_raw_sasl(data, 0, len(data), ctx), ctx
        if ex.api_key is None or ex.api_version is None:
            return None, ctx
        return decode_body(ex.api_key, ex.api_version, is_request, data, msg.body_offset, len(data), ctx), ctx

    def message(self, ex: Exchange, msg: Message | None, is_request: bool) -> dict[str, object] | None:
        if msg is None:
            return None
        pdu = msg.pdu
        diags = [d.to_json() for d in msg.diagnostics]
        body: object = None
        if self.decode:
            node, ctx = self.body(ex, msg, is_request)
            if node is not None:
                from dissectors.jsonify import node_to_json

                body = node_to_json(node, ctx)
                diags.extend(_node_diagnostics(node))
        return {
            "frame": pdu.last_pkt,
            "first_frame": pdu.first_pkt,
            "ts": ts_seconds(pdu.last_ts),
            "size": pdu.size + 4,
            "header": msg.header,
            "body": body,
            "diagnostics": diags,
        }

    def encode(self, ex: Exchange) -> dict[str, object]:
        lat = ex.latency_ns
        out: dict[str, object] = {
            "schema": SCHEMA_VERSION,
            "connection": {"id": ex.conn.id, "client": ex.conn.client, "broker": ex.conn.broker},
            "api_key": ex.api_key,
            "api": ex.api,
            "api_version": ex.api_version,
            "correlation_id": ex.correlation_id,
            "client_id": ex.client_id,
            "status": ex.status,
            "latency_ms": None if lat is None else round(lat / 1e6, 3),
            "request": self.message(ex, ex.request, True),
            "response": self.message(ex, ex.response, False),
        }
        if ex.acks is not None:
            out["acks"] = ex.acks
        return out

    # -- one NDJSON line --------------------------------------------------------------------
    def line(self, ex: Exchange) -> str:
        """The exchange as one JSON text; equal to `dumps(self.encode(ex))`, built directly
        (about 5x faster) when bodies are not decoded, the header-only indexing path."""
        if self.decode:
            return dumps(self.encode(ex))
        conn = self._conn_json.get(ex.conn.id)
        if conn is None:
            c = ex.conn
            conn = self._conn_json[c.id] = dumps({"id": c.id, "client": c.client, "broker": c.broker})
        lat = ex.latency_ns
        acks = "" if ex.acks is None else f',"acks":{ex.acks}'
        return (
            f'{{"schema":"{SCHEMA_VERSION}","connection":{conn},"api_key":{_num(ex.api_key)},'
            f'"api":{self._str(ex.api)},"api_version":{_num(ex.api_version)},'
            f'"correlation_id":{_num(ex.correlation_id)},"client_id":{self._str(ex.client_id)},'
            f'"status":"{ex.status}","latency_ms":{"null" if lat is None else repr(round(lat / 1e6, 3))},'
            f'"request":{self._msg_line(ex.request)},"response":{self._msg_line(ex.response)}{acks}}}'
        )

    def _str(self, value: str | None) -> str:
        out = self._str_json.get(value)
        if out is None:
            out = dumps(value)
            if len(self._str_json) < 10_000:
                self._str_json[value] = out
        return out

    def _msg_line(self, msg: Message | None) -> str:
        if msg is None:
            return "null"
        pdu = msg.pdu
        h = msg.header
        if len(h) == 4 and tuple(h) == _HEADER_KEYS:
            header = (
                f'{{"request_api_key":{h["request_api_key"]},"request_api_version":{h["request_api_version"]},'
                f'"correlation_id":{h["correlation_id"]},"client_id":{self._str(h["client_id"])}}}'  # type: ignore[arg-type]
            )
        elif len(h) == 1 and "correlation_id" in h:
            header = f'{{"correlation_id":{h["correlation_id"]}}}'
        else:
            header = dumps(h)
        diags = dumps([d.to_json() for d in msg.diagnostics]) if msg.diagnostics else "[]"
        return (
            f'{{"frame":{pdu.last_pkt},"first_frame":{pdu.first_pkt},"ts":{ts_seconds(pdu.last_ts)!r},'
            f'"size":{pdu.size + 4},"header":{header},"body":null,"diagnostics":{diags}}}'
        )


def _num(value: int | None) -> str:
    return "null" if value is None else str(value)
