"""Legacy message sets, magic 0 and 1 (Kafka < 0.11).

    MessageSet => [Offset int64, MessageSize int32, Message]
    Message    => Crc uint32, Magic int8, Attributes int8,
                  [Timestamp int64 (magic 1)], Key bytes, Value bytes

CRC32 (zlib) covers magic..end of message. Attributes: bits 0-2 codec,
bit 3 timestamp type (magic 1). A compressed "wrapper" message holds, in its
value, a whole compressed message set of inner messages. Inner offsets are
absolute for magic 0; for magic 1 they are relative and the wrapper carries
the absolute offset of the LAST inner message, so
``absolute = wrapper_offset - last_relative + relative`` (kept relative when
that base is negative, as Kafka does for a producer's wrapper at offset 0). A magic-1 wrapper
with the log-append timestamp type stamps every inner message with its own
timestamp.

Each top-level message is one entry of ``batches``: its own fields plus the
batch-level names shared with magic 2 (producer fields are -1, never
transactional or control), and ``records`` = the message itself, or the
inner messages of a wrapper (each with its own crc/crc_ok/magic/attributes).
"""

from __future__ import annotations

import struct
import zlib

from dissectors.compression import CODEC_NAMES, decompress, output_cap
from dissectors.context import RECORD_COST, DecodeContext
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import STRUCT, Node
from dissectors.record_values import iso_timestamp, render_bytes

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I64 = struct.Struct(">q")
_OFFSET_SIZE = struct.Struct(">qi")
_I32 = struct.Struct(">i")
LOG_OVERHEAD = 12
MIN_SIZE: dict[int | None, int] = {0: 14, 1: 22}  # crc+magic+attrs(+timestamp)+key len+value len
MAX_NESTING = (
    2  # default of Limits.max_nesting_depth: Kafka allows one level, one more is tolerated
)


class _Msg:
    """One parsed message (not yet JSON)."""

    __slots__ = (
        "offset", "size", "crc", "crc_ok", "magic", "attributes", "timestamp",
        "key", "value", "pos", "end", "partial", "problem",
    )  # fmt: skip
    # None when the message is cut before the field
    offset: int | None
    size: int | None
    crc: int | None
    crc_ok: bool | None
    magic: int | None
    attributes: int | None
    timestamp: int | None
    key: tuple[int, int] | None  # (where the key bytes start, how many); None = null
    value: tuple[int, int] | None
    pos: int
    end: int
    partial: bool
    problem: tuple[Code, int, str] | None  # (code, offset, reason) when malformed


def _parse(buf: memoryview, pos: int, end: int) -> _Msg:
    """Parse the message at `pos`; `problem` is (code, offset, reason) when it is malformed."""
    m = _Msg()
    m.pos, m.partial, m.problem, m.crc_ok = pos, False, None, None
    m.key = m.value = None
    m.timestamp = None
    m.offset = m.size = m.crc = m.magic = m.attributes = None
    avail = end - pos
    if avail < LOG_OVERHEAD:
        m.partial, m.end = True, end
        if avail >= 8:
            (m.offset,) = _I64.unpack_from(buf, pos)
        return m
    if avail >= _HEAD.size:
        m.offset, m.size, m.crc, m.magic, m.attributes = _HEAD.unpack_from(buf, pos)
    else:
        m.offset, m.size = _OFFSET_SIZE.unpack_from(buf, pos)
    min_size = MIN_SIZE.get(m.magic, 14)
    if m.size < min_size:
        m.end = end
        m.problem = (
            Code.BAD_LENGTH,
            pos + 8,
            f"message size {m.size} is below the {min_size}-byte minimum",
        )
        return m
    m.end = pos + LOG_OVERHEAD + m.size
    if m.end > end:
        m.partial, m.end = True, end
        return m
    if m.magic not in (0, 1):
        m.problem = (Code.BAD_MAGIC, pos + 16, f"magic {m.magic} in a legacy message set")
        return m
    m.crc_ok = (zlib.crc32(buf[pos + 16 : m.end]) & 0xFFFFFFFF) == m.crc
    p = pos + 18
    if m.magic == 1:
        (m.timestamp,) = _I64.unpack_from(buf, p)
        p += 8
    for field in ("key", "value"):
        (n,) = _I32.unpack_from(buf, p) if p + 4 <= m.end else (-2,)
        p += 4
        if n < -1 or p + max(n, 0) > m.end:
            m.problem = (Code.BAD_LENGTH, p - 4, f"{field} length {n} does not fit in the message")
            return m
        if n >= 0:
            setattr(m, field, (p, n))
            p += n
    if p != m.end:
        m.problem = (
            Code.TRAILING_BYTES,
            p,
            f"{m.end - p} bytes after the value inside the message",
        )
    return m


def decode_message_set_entry(
    buf: memoryview, pos: int, end: int, source: int, ctx: DecodeContext
) -> tuple[Node, int | None]:
    """Decode one top-level legacy message at `pos` as a batch entry.

    Returns the batch Node and the next position (None: framing lost).
    """
    diags: list[Diagnostic] = []
    m = _parse(buf, pos, end)
    batch = _fields(m)
    batch.update(
        base_offset=m.offset,
        message_size=m.size,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        is_transactional=False,
        is_control=False,
        partial=m.partial,
        records=[],
    )
    node = Node("batch", STRUCT, pos, m.end - pos, batch, [], source, diags)
    nxt: int | None = m.end
    if m.problem is not None:
        code, off, reason = m.problem
        diags.append(Diagnostic(code, off, reason))
        if code is Code.BAD_LENGTH and m.size is not None and m.size < MIN_SIZE.get(m.magic, 14):
            nxt = None  # the length itself is wrong: no way to find the next message
    if m.crc_ok is False:
        diags.append(
            Diagnostic(Code.CRC_MISMATCH, pos + 12, f"CRC32 mismatch (stored {m.crc:#010x})")
        )
    if not m.partial and (m.problem is None or m.problem[0] is Code.TRAILING_BYTES):
        assert m.attributes is not None and m.offset is not None  # a complete message
        codec = m.attributes & 0x07
        if codec == 0:
            ctx.spend(RECORD_COST)
            rec = _record(buf, m, m.offset, None, ctx)
            batch["records"] = [rec]
            node.children = [Node("0", STRUCT, pos, m.end - pos, rec, None, source)]
        else:
            records, nodes = _inner(buf, m, codec, ctx, diags, 1)
            batch["records"] = records
            node.children = nodes
            if records:
                batch["base_offset"] = records[0]["offset"]
    batch["diagnostics"] = [d.to_json() for d in diags]
    return node, nxt


def _fields(m: _Msg) -> dict[str, object]:
    attrs = m.attributes
    known = m.magic is not None
    return {
        "offset": m.offset,
        "magic": m.magic if known else None,
        "crc": m.crc if known else None,
        "crc_ok": m.crc_ok,
        "attributes": attrs if known else None,
        "codec": None if attrs is None else CODEC_NAMES.get(attrs & 7, f"unknown({attrs & 7})"),
        "timestamp_type": _ts_type(m) if known else None,
        "timestamp": iso_timestamp(m.timestamp),
        "timestamp_ms": m.timestamp,
    }


def _ts_type(m: _Msg) -> str | None:
    if m.magic != 1:
        return None
    return "log_append" if (m.attributes or 0) & 0x08 else "create"


def _record(buf: memoryview, m: _Msg, offset: int, stamp: int | None, ctx: DecodeContext) -> dict:
    """A message as a record; `stamp` overrides the timestamp (log-append wrapper)."""
    limit = ctx.limits.max_value_bytes
    ts = stamp if stamp is not None else m.timestamp
    key = None if m.key is None else buf[m.key[0] : m.key[0] + m.key[1]]
    value = None if m.value is None else buf[m.value[0] : m.value[0] + m.value[1]]
    return {
        "offset": offset,
        "timestamp": iso_timestamp(ts),
        "timestamp_ms": ts,
        "timestamp_type": "log_append" if stamp is not None else _ts_type(m),
        "key": render_bytes(key, limit),
        "value": render_bytes(value, limit),
        "headers": [],
    }


def _inner(
    buf: memoryview,
    wrapper: _Msg,
    codec: int,
    ctx: DecodeContext,
    diags: list[Diagnostic],
    depth: int,
    share: list[int] | None = None,
) -> tuple[list[dict], list[Node]]:
    """Decompress a wrapper's value and decode its inner messages (flattened).

    `share` = [decompressed bytes left, inner messages left], one budget for a top-level wrapper
    and every wrapper nested in it: nesting multiplies nothing (a wrapper of wrappers used to
    get a fresh decompression cap for each, and no cap on the messages)."""
    if codec not in CODEC_NAMES:
        diags.append(
            Diagnostic(
                Code.UNKNOWN_CODEC, wrapper.pos + 17, f"unknown codec id {codec} in attributes"
            )
        )
        return [], []
    if wrapper.value is None:
        diags.append(
            Diagnostic(Code.BAD_RECORD, wrapper.pos, "compressed wrapper message with a null value")
        )
        return [], []
    limits = ctx.limits
    if depth > limits.max_nesting_depth:
        diags.append(
            Diagnostic(
                Code.NESTING_TOO_DEEP,
                wrapper.pos,
                f"compressed messages nested deeper than {limits.max_nesting_depth}"
                " (max_nesting_depth)",
            )
        )
        return [], []
    start, n = wrapper.value
    cap = output_cap(n, limits.max_decompressed_bytes, limits.max_decompression_ratio)
    if share is None:
        share = [cap, min(limits.max_records_per_batch, limits.max_array_count)]
    res = decompress(codec, buf[start : start + n], min(cap, share[0]))
    share[0] -= len(res.data)
    if res.error is not None:
        diags.append(Diagnostic(res.error, start, res.message))
    if not res.data:
        return [], []
    data = memoryview(res.data)
    source = ctx.add_buffer(res.data)
    where = f" (decompressed buffer {source})"
    cut = res.error is not None
    inner: list[_Msg] = []
    pos, end = 0, len(data)
    limit = ctx.affordable(RECORD_COST, share[1])
    while pos < end:
        if len(inner) >= limit:
            by_budget = limit < share[1]
            diags.append(Diagnostic(
                Code.DECODE_BUDGET if by_budget else Code.ARRAY_TOO_LARGE, pos,
                ("decode budget of this frame spent" if by_budget else
                 f"more than {limits.max_records_per_batch} inner messages in one wrapper")
                + f"{where}; the remaining {end - pos} bytes are not decoded"))
            break
        m = _parse(data, pos, end)
        if m.partial:
            if not cut:
                diags.append(Diagnostic(Code.TRUNCATED, pos, f"inner message cut short{where}"))
            break
        if m.problem is not None:
            code, off, reason = m.problem
            diags.append(Diagnostic(code, off, reason + where))
            if m.end == end and code is not Code.TRAILING_BYTES:
                break
            if code is not Code.TRAILING_BYTES:
                pos = m.end
                continue
        if m.crc_ok is False:
            diags.append(Diagnostic(Code.CRC_MISMATCH, pos + 12, f"inner CRC32 mismatch{where}"))
        inner.append(m)
        pos = m.end
    share[1] -= len(inner)
    ctx.spend(len(inner) * RECORD_COST)
    if not inner:
        return [], []
    assert wrapper.offset is not None and wrapper.magic is not None  # complete messages only
    assert wrapper.attributes is not None
    last = inner[-1].offset
    base = wrapper.offset - last if wrapper.magic >= 1 and last is not None else 0
    if (
        base < 0
    ):  # as Kafka: a producer's wrapper (offset 0) leaves the relative offsets as they are
        base = 0
    stamp = wrapper.timestamp if wrapper.magic == 1 and wrapper.attributes & 0x08 else None
    records: list[dict] = []
    nodes: list[Node] = []
    for m in inner:
        assert m.offset is not None and m.attributes is not None  # complete messages only
        absolute = base + m.offset
        inner_codec = m.attributes & 0x07
        if inner_codec:  # nested wrapper: tolerated, flattened
            nested = _Msg()
            for slot in _Msg.__slots__:
                setattr(nested, slot, getattr(m, slot))
            nested.offset = absolute
            sub_records, sub_nodes = _inner(data, nested, inner_codec, ctx, diags, depth + 1, share)
            records.extend(sub_records)
            nodes.extend(sub_nodes)
            continue
        rec = _record(data, m, absolute, stamp, ctx)
        rec.update(crc=m.crc, crc_ok=m.crc_ok, magic=m.magic, attributes=m.attributes)
        records.append(rec)
        nodes.append(Node(str(len(nodes)), STRUCT, m.pos, m.end - m.pos, rec, None, source))
    return records, nodes
