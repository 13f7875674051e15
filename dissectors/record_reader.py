"""The records of a magic-2 batch: the varint record loop, and their nodes on demand.

Record: length varint | attributes int8 | timestamp_delta varlong |
offset_delta varint | key_len varint | key | value_len varint | value |
header_count varint | headers (key_len varint, key, value_len varint, value).
A bad record is reported and skipped to its declared end.

Both record decoders run this loop: the reference one (`record_batch`) and the
export's fast path (`records_json`).
"""

from __future__ import annotations

from typing import Any

from dissectors.context import RECORD_COST, DecodeContext
from dissectors.control_records import decode_control
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import RAW, STRUCT, Node
from dissectors.primitives import DecodeError, read_varint
from dissectors.record_values import iso_timestamp, render_bytes

# base_offset, base_timestamp, log-append time (None: each record its own), timestamp type,
# is_control, ctx, the most records to materialize (`record_batch.record_args`)
RecordArgs = tuple[int, int, int | None, str, bool, DecodeContext, int]


class RecordError(ValueError):
    """A record field is inconsistent; `offset` locates it."""

    def __init__(self, offset: int, message: str, code: Code = Code.BAD_RECORD) -> None:
        super().__init__(message)
        self.offset = offset
        self.code = code


def _varint_problem(err: DecodeError) -> str:
    """A bad varint in a record, in the words the record diagnostics use."""
    return "varint runs past the end of the record" if err.code is Code.TRUNCATED else err.message


def read_records(
    buf: bytes | memoryview,
    pos: int,
    end: int,
    args: RecordArgs,
    diags: list[Diagnostic],
    *,
    cut: bool,
    where: str = "",
) -> tuple[list[dict], list[int], dict[int, tuple[dict | None, list[Diagnostic]]]]:
    """Decode varint records in buf[pos:end] (bytes or a memoryview); `cut` = the bytes stop
    early (partial or capped).

    Returns the records (JSON-ready dicts), where the first record starts then where each
    ends, and {index: (record or None, diagnostics)} for the records with diagnostics (see
    `RecordNodes`).

    Hot path: the record loop is written out in one function, one- and two-byte varints (the
    common cases) are decoded inline and the common value renderings (UTF-8 text, no limit)
    are done in place; `read_varint`/`render_bytes` handle everything else, with the same
    results and errors.
    """
    base_offset, base_ts, log_append, ts_type, is_control, ctx, limit = args
    max_value = ctx.limits.max_value_bytes
    afford = ctx.affordable(RECORD_COST, limit)  # the frame's decode budget (docs/limits.md)
    by_budget = afford < limit
    limit = afford
    records: list[dict] = []
    spans: list[int] = [pos]  # where the first record starts, then where each record ends
    extra: dict[int, tuple[dict | None, list[Diagnostic]]] = {}  # bad / diagnosed records
    append_record = records.append
    append_span = spans.append
    iso_get = _ISO.get
    zz = _ZIGZAG
    idx = 0
    # The loop reads a bytes object: the bytes object itself when the view covers all of it
    # (the frame, a decompressed buffer; about twice as fast as going through the memoryview),
    # else a copy of what it reads (a partial view, a bytearray). The compiled build
    # (tools/compile.py) turns the typed reads below into C.
    data: bytes
    if isinstance(buf, memoryview):
        obj = buf.obj
        if type(obj) is bytes and buf.format == "B" and buf.nbytes == len(obj):
            data = obj
        else:
            data = bytes(buf[:end])
    elif type(buf) is bytes:
        data = buf
    else:
        data = bytes(buf[:end])
    # ints for the compiler (the zigzag table holds None for a byte that continues a varint)
    b: int
    b2: int
    u: int
    length: int
    value_len: int
    count: int
    while pos < end:
        if idx >= limit:
            diags.append(
                Diagnostic(
                    Code.DECODE_BUDGET if by_budget else Code.ARRAY_TOO_LARGE,
                    pos,
                    (f"decode budget of this frame spent after {limit} records" if by_budget
                     else f"more than {limit} records")
                    + f"{where}; the remaining {end - pos} bytes are not decoded",
                )
            )
            break
        start = pos
        b = data[pos]
        if b < 0x80:
            length = zz[b]
            pos += 1
        else:
            b2 = data[pos + 1] if pos + 1 < end else 0x80
            if b2 < 0x80:
                u = (b & 0x7F) | (b2 << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                try:
                    length, pos = read_varint(data, pos, end)
                except DecodeError as exc:
                    if not cut:
                        diags.append(
                            Diagnostic(
                                Code.BAD_VARINT,
                                exc.offset,
                                f"record length{where}: {_varint_problem(exc)}",
                            )
                        )
                    break
        rec_end = pos + length
        if length <= 0 or rec_end > end:
            if not (cut and rec_end > end):
                diags.append(
                    Diagnostic(
                        Code.BAD_RECORD,
                        start,
                        f"record length {length}{where} does not fit in the batch",
                    )
                )
            break
        rdiags: list[Diagnostic] | None = None
        rec: dict | None
        try:
            # -- one record: attributes, timestamp delta, offset delta, key, value, headers
            attributes = data[pos]
            # the common case: the three varints after the attributes are one byte each (a
            # record has at least 6 bytes, so they are inside it); else one by one
            if length >= 6:
                ts_delta, offset_delta, key_len = (
                    zz[data[pos + 1]],
                    zz[data[pos + 2]],
                    zz[data[pos + 3]],
                )
            else:
                ts_delta = None
            if ts_delta is not None and offset_delta is not None and key_len is not None:
                pos += 4
            else:
                pos += 1
                b = data[pos] if pos < rec_end else 0x80
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    ts_delta, pos = read_varint(data, pos, rec_end, 10)
                b = data[pos] if pos < rec_end else 0x80
                if b < 0x80:
                    offset_delta = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    offset_delta, pos = read_varint(data, pos, rec_end)
                b = data[pos] if pos < rec_end else 0x80
                if b < 0x80:
                    key_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    key_len, pos = read_varint(data, pos, rec_end)
            key_off = pos
            if key_len > 0:
                pos += key_len
                if pos > rec_end:
                    raise RecordError(key_off, f"key length {key_len} does not fit in the record")
            elif key_len < -1:
                raise RecordError(key_off, f"key length {key_len} is invalid")
            b = data[pos] if pos < rec_end else 0x80
            if b < 0x80:
                value_len = zz[b]
                pos += 1
            else:
                b2 = data[pos + 1] if pos + 1 < rec_end else 0x80
                if b2 < 0x80:
                    u = (b & 0x7F) | (b2 << 7)
                    value_len = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    value_len, pos = read_varint(data, pos, rec_end)
            value_off = pos
            if value_len > 0:
                pos += value_len
                if pos > rec_end:
                    raise RecordError(
                        value_off, f"value length {value_len} does not fit in the record"
                    )
            elif value_len < -1:
                raise RecordError(value_off, f"value length {value_len} is invalid")
            b = data[pos] if pos < rec_end else 0x80
            if b < 0x80:
                count = zz[b]
                pos += 1
            else:
                count, pos = read_varint(data, pos, rec_end)
            headers: list[dict[str, object]] = []
            if count:
                pos = _headers(data, pos, rec_end, count, max_value, headers)
            ts = log_append if log_append is not None else base_ts + ts_delta
            iso = iso_get(ts)
            if iso is None:
                iso = iso_timestamp(ts)
                if len(_ISO) >= 65536:
                    _ISO.clear()
                _ISO[ts] = iso
            key: object  # text, None, or a {"b64"...} / truncation object (render_bytes)
            value: object
            if key_len < 0:
                key = None
            elif max_value is None:
                try:
                    key = data[key_off : key_off + key_len].decode()
                except UnicodeDecodeError:
                    key = render_bytes(data[key_off : key_off + key_len])
            else:
                key = render_bytes(data[key_off : key_off + key_len], max_value)
            if value_len < 0:
                value = None
            elif max_value is None:
                try:
                    value = data[value_off : value_off + value_len].decode()
                except UnicodeDecodeError:
                    value = render_bytes(data[value_off : value_off + value_len])
            else:
                value = render_bytes(data[value_off : value_off + value_len], max_value)
            rec = {
                "offset": base_offset + offset_delta,
                "offset_delta": offset_delta,
                "timestamp": iso,
                "timestamp_ms": ts,
                "timestamp_type": ts_type,
                "attributes": attributes,
                "key": key,
                "value": value,
                "headers": headers,
            }
        except DecodeError as exc:
            rdiags = [
                Diagnostic(Code.BAD_VARINT, exc.offset, f"record{where}: {_varint_problem(exc)}")
            ]
            rec = None
        except RecordError as exc:
            rdiags = [Diagnostic(exc.code, exc.offset, f"record{where}: {exc}")]
            rec = None
        if rec is not None:
            if pos != rec_end:
                rdiags = [
                    Diagnostic(
                        Code.BAD_RECORD,
                        pos,
                        f"{rec_end - pos} bytes left over in the record{where}",
                    )
                ]
            if is_control:
                if rdiags is None:
                    rdiags = []
                rec["control"] = decode_control(
                    buf, key_off, key_len, value_off, value_len, ctx, rdiags
                )
            append_record(rec)
        # a record skipped as bad keeps a RAW node: the hex view shows it with its diagnostics
        append_span(rec_end)
        if rdiags is not None:
            extra[idx] = (rec, rdiags)
            diags.extend(rdiags)
        idx += 1
        pos = rec_end
    ctx.spend(idx * RECORD_COST)
    return records, spans, extra


class RecordNodes:
    """The record nodes of one batch, built on demand (see `LazyNode`): one STRUCT node per
    record (RAW for a record skipped as bad), named by index, located in `source`.

    `spans` is where the first record starts, then where each record ends: a record starts
    where the one before it ends."""

    __slots__ = ("spans", "records", "extra", "source")

    def __init__(self, spans: list[int], records: list[dict], extra: dict, source: int) -> None:
        self.spans = spans
        self.records = records
        self.extra = extra
        self.source = source

    def __reduce__(self) -> tuple:
        # explicit: a compiled class is pickled only this way (dissectors/native.py)
        return RecordNodes, (self.spans, self.records, self.extra, self.source)

    def __len__(self) -> int:
        return len(self.spans) - 1

    def __call__(self) -> list[Node]:
        spans, extra, source = self.spans, self.extra, self.source
        good = iter(self.records)
        out: list[Node] = []
        for i in range(len(spans) - 1):
            start = spans[i]
            length = spans[i + 1] - start
            e = extra.get(i)
            if e is None:
                out.append(Node(_name(i), STRUCT, start, length, next(good), None, source, []))
            else:
                rec, rdiags = e
                if rec is not None:
                    next(good)
                kind = STRUCT if rec is not None else RAW
                out.append(Node(_name(i), kind, start, length, rec, None, source, rdiags))
        return out

    def child_diagnostics(self) -> list[tuple[int, list[Diagnostic]]]:
        """(source, diagnostics) of the records that have some, in order, without building."""
        extra = self.extra
        if not extra:
            return _NONE
        return [(self.source, rdiags) for _, rdiags in extra.values() if rdiags]


_NONE: list = []  # shared, never modified


# one-byte zigzag varints by byte value (None: the varint goes on)
# (Any: an int, or None for a byte that continues the varint -- checked where it is read)
_ZIGZAG: tuple[Any, ...] = tuple((b >> 1) ^ -(b & 1) if b < 0x80 else None for b in range(256))

# record timestamp (ms) -> ISO text, bounded; a produced record is usually fetched too
_ISO: dict[int, str | None] = {}

_NAMES = tuple(str(i) for i in range(4096))  # record node names, shared


def _name(i: int) -> str:
    return _NAMES[i] if i < 4096 else str(i)


def _headers(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    max_value: int | None,
    headers: list[dict[str, object]],
) -> int:
    """The record headers (`count` of them) at pos, appended to `headers`; returns the end."""
    if count < 0 or count > (end - pos) // 2:
        raise RecordError(pos, f"header count {count} does not fit in the record")
    for _ in range(count):
        b = buf[pos] if pos < end else 0x80
        if b < 0x80:
            hk_len = _ZIGZAG[b]
            pos += 1
        else:
            hk_len, pos = read_varint(buf, pos, end)
        if hk_len < 0:
            raise RecordError(pos, f"header key length {hk_len}")
        hk = pos
        pos += hk_len
        if pos > end:
            raise RecordError(hk, f"header key length {hk_len} does not fit in the record")
        b = buf[pos] if pos < end else 0x80
        if b < 0x80:
            hv_len = _ZIGZAG[b]
            pos += 1
        else:
            hv_len, pos = read_varint(buf, pos, end)
        hv = pos
        if hv_len > 0:  # inline, not a call: this runs for every header
            pos += hv_len
            if pos > end:
                raise RecordError(hv, f"header value length {hv_len} does not fit in the record")
        elif hv_len < -1:
            raise RecordError(hv, f"header value length {hv_len} does not fit in the record")
        key: object
        value: object
        try:
            key = buf[hk : hk + hk_len].decode()
        except UnicodeDecodeError:
            key = render_bytes(buf[hk : hk + hk_len])
        if hv_len < 0:
            value = None
        elif max_value is None:
            try:
                value = buf[hv : hv + hv_len].decode()
            except UnicodeDecodeError:
                value = render_bytes(buf[hv : hv + hv_len])
        else:
            value = render_bytes(buf[hv : hv + hv_len], max_value)
        headers.append({"key": key, "value": value})
    return pos
