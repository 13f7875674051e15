"""Records as a kcat user sees them: one per record produced or fetched, with its topic,
partition, offset, key, value, headers and timestamp, and a kcat-style format string.

Where offsets come from: a Fetch response carries the log's offsets; a Produce request's
records are numbered by the broker, so their offsets are the partition's `base_offset` in the
Produce response plus the record's position in the request. A produce the broker refused
wrote nothing (its records are shown only with `--all`); a produce without a response (acks=0,
capture ended) has records with an unknown offset (-1), never deduplicated.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass

from kanalyze.analysis.wire import batches, fetch_responses, produce_partitions, produce_results
from kanalyze.correlation import Exchange

PRODUCE, FETCH = 0, 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record on the wire. Key, value and header values are bytes (None when null)."""

    topic: str
    partition: int
    offset: int  # -1 when the broker's answer was not captured
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    direction: str  # "produce" or "fetch"
    client_id: str | None
    frame: int
    error: str | None = None  # the partition's error name when the broker refused a produce


def _raw(v: object) -> bytes | None:
    """A decoded key/value back to bytes: text as UTF-8, {"b64": ...} decoded."""
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")
    if isinstance(v, dict) and isinstance(v.get("b64"), str):
        try:
            return base64.b64decode(v["b64"])
        except ValueError:
            return None
    return str(v).encode()


def _headers(rec: dict) -> tuple[tuple[str, bytes | None], ...]:
    out = []
    for h in rec.get("headers") or []:
        if isinstance(h, dict):
            k = h.get("key")
            out.append(
                (
                    k if isinstance(k, str) else (_raw(k) or b"").decode("utf-8", "replace"),
                    _raw(h.get("value")),
                )
            )
    return tuple(out)


def _records(batch: dict, include_control: bool) -> Iterator[dict]:
    if batch.get("is_control") and not include_control:
        return
    for r in batch.get("records") or []:
        if isinstance(r, dict):
            yield r


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def produced(
    ex: Exchange, req: dict | None, rsp: dict | None, include_refused: bool = False
) -> Iterator[Record]:
    """The records of a Produce request, with the offsets its response assigned."""
    frame = ex.request.pdu.last_pkt if ex.request else 0
    results = {(t, p): r for t, p, r in produce_results(rsp)}
    for topic, partition, bs in produce_partitions(req):
        res = results.get((topic, partition))
        base = _int(res.get("base_offset")) if res else None
        code = _int(res.get("error_code")) if res else None
        err = res.get("error_code_name") if res and code else None
        if code and not include_refused:
            continue
        i = 0
        for b in bs:
            for r in _records(b, False):
                off = base + i if base is not None and base >= 0 and not code else -1
                i += 1
                yield Record(
                    topic,
                    partition,
                    off,
                    _int(r.get("timestamp_ms")),
                    _raw(r.get("key")),
                    _raw(r.get("value")),
                    _headers(r),
                    "produce",
                    ex.client_id,
                    frame,
                    err if isinstance(err, str) else None,
                )


def fetched(ex: Exchange, rsp: dict | None, include_control: bool = False) -> Iterator[Record]:
    """The records of a Fetch response, with the log's offsets."""
    frame = ex.response.pdu.last_pkt if ex.response else 0
    for topic, partition, p in fetch_responses(rsp):
        for b in batches(p.get("records")):
            for r in _records(b, include_control):
                off = _int(r.get("offset"))
                yield Record(
                    topic,
                    partition,
                    -1 if off is None else off,
                    _int(r.get("timestamp_ms")),
                    _raw(r.get("key")),
                    _raw(r.get("value")),
                    _headers(r),
                    "fetch",
                    ex.client_id,
                    frame,
                )


class Dedup:
    """Passes each (topic, partition, offset) once; unknown offsets always pass."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, int, int]] = set()

    def first(self, r: Record) -> bool:
        if r.offset < 0:
            return True
        k = (r.topic, r.partition, r.offset)
        if k in self.seen:
            return False
        self.seen.add(k)
        return True


# -- kcat format strings -----------------------------------------------------------------------

TOKENS = "tpoksTKShdc"
DEFAULT_FORMAT = "%t %p %o %k %s\\n"


class FormatError(ValueError):
    """A format string kcat would not accept either."""


def compile_format(fmt: str) -> list[str | tuple[str]]:
    """The format as literal text pieces and (token,) tuples. Escapes: \\n \\t \\r \\\\ and %%.
    A format without a newline gets one at the end (one line per record)."""
    parts: list[str | tuple[str]] = []
    lit: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "\\" and i + 1 < len(fmt):
            lit.append(
                {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}.get(
                    fmt[i + 1], "\\" + fmt[i + 1]
                )
            )
            i += 2
            continue
        if ch == "%":
            if i + 1 >= len(fmt):
                raise FormatError("format ends with a lone '%'")
            tok = fmt[i + 1]
            if tok == "%":
                lit.append("%")
            elif tok in TOKENS:
                if lit:
                    parts.append("".join(lit))
                    lit = []
                parts.append((tok,))
            else:
                raise FormatError(
                    f"unknown format token %{tok} (known: "
                    + " ".join("%" + t for t in TOKENS)
                    + ")"
                )
            i += 2
            continue
        lit.append(ch)
        i += 1
    if lit:
        parts.append("".join(lit))
    if not any(isinstance(p, str) and "\n" in p for p in parts):
        parts.append("\n")
    return parts


def _hdrs(h: tuple[tuple[str, bytes | None], ...]) -> bytes:
    return b",".join(k.encode() + b"=" + (v if v is not None else b"") for k, v in h)


def format_record(parts: list[str | tuple[str]], r: Record) -> bytes:
    """One record as bytes (keys and values are written as they are, like kcat)."""
    out: list[bytes] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p.encode())
            continue
        t = p[0]
        if t == "t":
            out.append(r.topic.encode())
        elif t == "p":
            out.append(str(r.partition).encode())
        elif t == "o":
            out.append(str(r.offset).encode())
        elif t == "k":
            out.append(r.key or b"")
        elif t == "s":
            out.append(r.value or b"")
        elif t == "K":
            out.append(str(-1 if r.key is None else len(r.key)).encode())
        elif t == "S":
            out.append(str(-1 if r.value is None else len(r.value)).encode())
        elif t == "T":
            out.append(str(-1 if r.timestamp_ms is None else r.timestamp_ms).encode())
        elif t == "h":
            out.append(_hdrs(r.headers))
        elif t == "d":
            out.append(r.direction.encode())
        elif t == "c":
            out.append((r.client_id or "").encode())
    return b"".join(out)


def _text_or_b64(v: bytes | None) -> object:
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(v).decode("ascii")}


def record_json(r: Record) -> dict[str, object]:
    """One record as a JSON object (docs/stats.md)."""
    out: dict[str, object] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp_ms": r.timestamp_ms,
        "key": _text_or_b64(r.key),
        "value": _text_or_b64(r.value),
        "headers": [[k, _text_or_b64(v)] for k, v in r.headers],
        "direction": r.direction,
        "client_id": r.client_id,
        "frame": r.frame,
    }
    if r.error:
        out["error"] = r.error
    return out
