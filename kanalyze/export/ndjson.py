"""One exchange as one JSON object: the NDJSON contract (docs/ndjson.md, docs/exchange.schema.json).

This module only encodes: bodies are decoded by the body service (`kanalyze.bodies`), on
demand, with the user's decode context and the run's topic-name registry.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dissectors import DecodeContext
from kanalyze.correlation import Exchange, Message
from kanalyze.export.header_text import SCHEMA_VERSION, HeaderText
from kanalyze.jsontext import dumps, ts_seconds

if TYPE_CHECKING:
    from dissectors import JsonWalk
    from kanalyze.bodies import BodyDecoder

# orjson is imported by the first decoded line: the header-only path never needs it, and its
# import (json, uuid, platform, zoneinfo, datetime) is a tenth of that path's start-up
_orjson_dumps: Callable[..., bytes] | None = None
_ORJSON_OPTS = 0
# orjson's `default` and json's spelling for record batches given as JSON text
# (`dissectors.record_fragments`), loaded with orjson
_as_json: Any = None
_dumps_text: Callable[[object], str] = dumps


def _load_orjson() -> Callable[..., bytes]:
    global _orjson_dumps, _ORJSON_OPTS, _as_json, _dumps_text
    import json

    import orjson

    from dissectors.record_fragments import as_json, as_value

    # types json cannot encode must not be encoded by orjson either (the fallback then raises
    # as `dumps` would)
    _ORJSON_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
    _as_json = as_json
    # json with the project's spelling (`kanalyze.jsontext`), reading batches given as text
    _dumps_text = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), default=as_value
    ).encode
    _orjson_dumps = orjson.dumps
    return _orjson_dumps


def _fast_encode(obj: object) -> bytes | str:
    """`dumps(obj)` as orjson's UTF-8 bytes when orjson spells obj the same way, else as
    json's text. Records given as their JSON text (`dissectors.record_fragments`) are spliced
    in as they are (orjson) or read back first (json): the same bytes as their dicts give.

    With ensure_ascii off and compact separators, the two agree byte for byte on dicts with
    str keys, lists, str, None, bools, ints within 64 bits and floats that are 0 or
    1e-4 <= |x| < 1e16 (repr's exponent form differs below and above; NaN/inf are never
    output, `node_to_json` spells them as strings). The caller vouches for the floats; any
    other difference (a big int, a non-str key, a lone surrogate, ...) makes orjson raise,
    and json takes over.
    """
    encode: Any = _orjson_dumps or _load_orjson()
    try:
        return encode(obj, _as_json, _ORJSON_OPTS)
    except TypeError:
        return _dumps_text(obj)


def _plain_float(x: float | None) -> bool:
    return x is None or not x or 1e-4 <= abs(x) < 1e16


def _plain_times(d: dict) -> bool:
    """The exchange's own floats (latency, message times) are spelled alike by orjson and json."""
    if not _plain_float(d["latency_ms"]):
        return False
    req, resp = d["request"], d["response"]
    return (req is None or _plain_float(req["ts"])) and (resp is None or _plain_float(resp["ts"]))


class ExchangeEncoder:
    """Turns exchanges into JSON-ready dicts; `decode` False keeps bodies out (header-only mode).

    Bodies come from `bodies` (a `BodyDecoder`, made from `ctx` when not given)."""

    def __init__(
        self,
        ctx: DecodeContext | None = None,
        decode: bool = True,
        bodies: BodyDecoder | None = None,
    ) -> None:
        self._bodies = bodies
        self._ctx = ctx
        self.decode = decode
        # the header-only line, written as text (kanalyze/export/header_text.py)
        self._header_line = HeaderText().line

    @property
    def bodies(self) -> BodyDecoder:
        """The body service, made on first use (a header-only run never imports the
        decoders)."""
        if self._bodies is None:
            from kanalyze.bodies import BodyDecoder

            self._bodies = BodyDecoder(self._ctx)
        return self._bodies

    @bodies.setter
    def bodies(self, value: BodyDecoder) -> None:
        self._bodies = value

    def message(
        self, ex: Exchange, msg: Message | None, is_request: bool
    ) -> dict[str, object] | None:
        return self._message(ex, msg, is_request, None)

    def _message(
        self, ex: Exchange, msg: Message | None, is_request: bool, walk: JsonWalk | None,
        text: bool = False,
    ) -> dict[str, object] | None:
        if msg is None:
            return None
        diags = [d.to_json() for d in msg.diagnostics]
        body: object = None
        if self.decode:  # the value and the body's diagnostics in one pass
            w = _walk() if walk is None else walk
            mark = len(w.diagnostics)
            body = self.bodies.json(ex, msg, is_request, w, text)
            diags.extend(w.diagnostics[mark:])
        return self._message_dict(msg, body, diags)

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

    def _encode(
        self, ex: Exchange, walk: JsonWalk | None, text: bool = False
    ) -> dict[str, object]:
        """`encode`; with `walk`, diagnostics are gathered while building the bodies; `text`:
        records may be given as their JSON text (for the line only: `_decoded_line`)."""
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
            "request": self._message(ex, ex.request, True, walk, text),
            "response": self._message(ex, ex.response, False, walk, text),
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
            out = self._decoded_line(ex)
            return out if isinstance(out, str) else out.decode()
        return self._header_line(ex)

    def line_bytes(self, ex: Exchange) -> bytes:
        """`line(ex)` encoded as UTF-8, for a binary output: orjson's bytes as they come, without
        the round trip through str (a decoded line is often megabytes of record values)."""
        if self.decode:
            out = self._decoded_line(ex)
            return out if isinstance(out, bytes) else out.encode()
        return self._header_line(ex).encode()

    def _decoded_line(self, ex: Exchange) -> bytes | str:
        """orjson's bytes, or json's text when orjson would spell something differently."""
        walk = _walk()
        # decoding builds thousands of acyclic containers per big exchange: the cyclic
        # collector would only traverse them again and again, so it pauses until they are
        # freed again (resumed while they live, it would sweep them all at the next tuple)
        paused = gc.isenabled()
        if paused:
            gc.disable()
        d: dict[str, object] | None = None
        try:
            d = self._encode(ex, walk, True)
            if walk.odd_float or not _plain_times(d):
                if _orjson_dumps is None:
                    _load_orjson()  # json's spelling of batches given as text comes with it
                return _dumps_text(d)
            return _fast_encode(d)
        finally:
            d = None  # the tree goes before the collector resumes
            if paused:
                gc.enable()


def _walk() -> JsonWalk:
    from dissectors import JsonWalk

    return JsonWalk()


def _num(value: int | None) -> str:
    return "null" if value is None else str(value)
