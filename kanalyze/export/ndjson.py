"""One exchange as one JSON object: the NDJSON contract (docs/ndjson.md, docs/exchange.schema.json).

Bodies are decoded here, on demand, through the versioned schemas; one
`DecodeContext` template carries the user's settings and the topic-id names
learned from earlier Metadata responses.
"""

from __future__ import annotations

import gc
import json
from dataclasses import fields, replace

from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.fastjson import FALLBACK, decode_body_json
from dissectors.jsonify import JsonWalk, node_to_json, node_to_json_collect
from dissectors.node import Node
from kanalyze.correlation import SASL_RAW_API, Exchange, Message

try:  # optional: the same bytes, several times faster (see `_fast_dumps`)
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

SCHEMA_VERSION = "kanalyze.exchange/1"

dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

if orjson is not None:
    _orjson_dumps = orjson.dumps
    # types json cannot encode must not be encoded by orjson either (the fallback then raises
    # as `dumps` would)
    _ORJSON_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _fast_dumps(obj: object) -> str:
    """`dumps(obj)`, through orjson when it is installed and spells obj the same way."""
    out = _fast_encode(obj)
    return out if type(out) is str else out.decode()


def _fast_encode(obj: object) -> bytes | str:
    """`dumps(obj)` as orjson's UTF-8 bytes when orjson is installed and spells obj the same
    way, else as json's text.

    With ensure_ascii off and compact separators, the two agree byte for byte on dicts with
    str keys, lists, str, None, bools, ints within 64 bits and floats that are 0 or
    1e-4 <= |x| < 1e16 (repr's exponent form differs below and above; NaN/inf are never
    output, `node_to_json` spells them as strings). The caller vouches for the floats; any
    other difference (a big int, a non-str key, a lone surrogate, ...) makes orjson raise,
    and json takes over.
    """
    if orjson is not None:
        try:
            return _orjson_dumps(obj, None, _ORJSON_OPTS)
        except TypeError:
            pass
    return dumps(obj)


def _plain_float(x: float | None) -> bool:
    return x is None or not x or 1e-4 <= abs(x) < 1e16


def _plain_times(d: dict) -> bool:
    """The exchange's own floats (latency, message times) are spelled alike by orjson and json."""
    if not _plain_float(d["latency_ms"]):
        return False
    req, resp = d["request"], d["response"]
    return (req is None or _plain_float(req["ts"])) and (resp is None or _plain_float(resp["ts"]))

_HEADER_KEYS = ("request_api_key", "request_api_version", "correlation_id", "client_id")


def ts_seconds(ts_ns: int) -> float:
    """Epoch seconds with microsecond precision."""
    return round(ts_ns / 1e9, 6)


_CTX_FIELDS = ("limits", "show_secrets", "decode_records", "strict", "buffers", "topic_names")


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
        # a DecodeContext of the known shape is copied field by field (dataclasses.replace
        # is general and slow); anything else goes through replace
        self._plain_ctx = type(self.template) is DecodeContext and (
            tuple(f.name for f in fields(DecodeContext)) == _CTX_FIELDS
        )

    def _ctx(self) -> DecodeContext:
        t = self.template
        if self._plain_ctx:
            return DecodeContext(t.limits, t.show_secrets, t.decode_records, t.strict, [], t.topic_names)
        return replace(t, buffers=[])

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
        return self._message(ex, msg, is_request, None)

    def _message(
        self, ex: Exchange, msg: Message | None, is_request: bool, walk: JsonWalk | None
    ) -> dict[str, object] | None:
        if msg is None:
            return None
        diags = [d.to_json() for d in msg.diagnostics]
        body: object = None
        if self.decode:
            if walk is not None:  # NDJSON lines: straight to JSON when the body is well formed
                mark = len(walk.diagnostics)
                body = self._fast_body(ex, msg, is_request, walk)
                if body is not FALLBACK:
                    diags.extend(walk.diagnostics[mark:])
                    return self._message_dict(msg, body, diags)
                body = None
            node, ctx = self.body(ex, msg, is_request)
            if node is not None:
                if walk is None:
                    body = node_to_json(node, ctx)
                    diags.extend(_node_diagnostics(node))
                else:  # one pass: the value and the diagnostics
                    mark = len(walk.diagnostics)
                    body = node_to_json_collect(node, ctx, walk)
                    diags.extend(walk.diagnostics[mark:])
        return self._message_dict(msg, body, diags)

    def _fast_body(self, ex: Exchange, msg: Message, is_request: bool, walk: JsonWalk) -> object:
        """The body's JSON value through `dissectors.fastjson`, or FALLBACK."""
        if ex.api_key is None or ex.api_version is None or ex.api_key == SASL_RAW_API:
            return FALLBACK
        data = msg.pdu.data
        return decode_body_json(
            ex.api_key, ex.api_version, is_request, data, msg.body_offset, len(data), self._ctx(), walk
        )

    @staticmethod
    def _message_dict(msg: Message, body: object, diags: list) -> dict[str, object]:
        pdu = msg.pdu
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
        return self._encode(ex, None)

    def _encode(self, ex: Exchange, walk: JsonWalk | None) -> dict[str, object]:
        """`encode`; with `walk`, diagnostics are gathered while building the bodies."""
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
            "request": self._message(ex, ex.request, True, walk),
            "response": self._message(ex, ex.response, False, walk),
        }
        if ex.acks is not None:
            out["acks"] = ex.acks
        if ex.inferred is not None:
            out["inferred"] = ex.inferred
        return out

    # -- one NDJSON line --------------------------------------------------------------------
    def line(self, ex: Exchange) -> str:
        """The exchange as one JSON text; equal to `dumps(self.encode(ex))`, built directly
        (about 5x faster) when bodies are not decoded, the header-only indexing path."""
        if self.decode:
            if orjson is None:
                return dumps(self.encode(ex))
            out = self._decoded_line(ex)
            return out if type(out) is str else out.decode()
        return self._header_line(ex)

    def line_bytes(self, ex: Exchange) -> bytes:
        """`line(ex)` encoded as UTF-8, for a binary output: orjson's bytes as they come, without
        the round trip through str (a decoded line is often megabytes of record values)."""
        if self.decode and orjson is not None:
            out = self._decoded_line(ex)
            return out if type(out) is bytes else out.encode()
        return self.line(ex).encode()

    def _decoded_line(self, ex: Exchange) -> bytes | str:
        """orjson's bytes, or json's text when orjson would spell something differently."""
        walk = JsonWalk()
        # decoding builds thousands of acyclic containers per big exchange: the cyclic
        # collector would only traverse them again and again, so it pauses until they are
        # freed again (resumed while they live, it would sweep them all at the next tuple)
        paused = gc.isenabled()
        if paused:
            gc.disable()
        d: dict[str, object] | None = None
        try:
            d = self._encode(ex, walk)
            if walk.odd_float or not _plain_times(d):
                return dumps(d)
            return _fast_encode(d)
        finally:
            d = None  # the tree goes before the collector resumes
            if paused:
                gc.enable()

    def _header_line(self, ex: Exchange) -> str:
        """The header-only line, built as text directly (about 5x faster than dumps)."""
        conn = self._conn_json.get(ex.conn.id)
        if conn is None:
            c = ex.conn
            if len(self._conn_json) >= 10_000:  # bounded: live runs see endless connections
                self._conn_json.clear()
            conn = self._conn_json[c.id] = dumps({"id": c.id, "client": c.client, "broker": c.broker})
        lat = ex.latency_ns
        acks = "" if ex.acks is None else f',"acks":{ex.acks}'
        if ex.inferred is not None:
            acks += f',"inferred":{dumps(ex.inferred)}'
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
