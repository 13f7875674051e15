"""One exchange as one JSON object: the NDJSON contract (docs/ndjson.md, docs/exchange.schema.json).

Bodies are decoded here, on demand, through the versioned schemas; one
`DecodeContext` template carries the user's settings and the topic-id names
learned from earlier Metadata responses.
"""

from __future__ import annotations

from dataclasses import replace

from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.node import Node
from kanalyze.correlation import SASL_RAW_API, Exchange, Message

SCHEMA_VERSION = "kanalyze.exchange/1"


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
