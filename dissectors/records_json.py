"""A records field straight to its JSON value, for the export's fast path (`fastjson`).

`records.decode_records` returns a RECORDS node whose value is the JSON and whose
children are batch nodes (record nodes built lazily) for the TUI hex view. The
export needs only the value, so for records that decode without a single
diagnostic this builds just that: no batch, record or records nodes. The
header reader (`batch_header`) and the record loop (`record_reader`) are the
reference path's; only the per-batch and per-field wrapping is left out.
Anything that would carry a diagnostic -- a bad CRC, length, varint, codec or
count, a control batch, a legacy message set, a decompression problem --
raises `NotClean` and the caller takes the reference path. A batch cut by the
end of the field (a Fetch trimmed at max_bytes) is normal and has no
diagnostic: it is decoded here too.

With `ctx.record_fragments` (the NDJSON lines) and the compiled encoder built, a clean batch
is its JSON text (`record_fragments.JsonText`) instead of a dict holding a list of record
dicts; the encoder gives up on anything unusual and the record loop then decides, as without
it.
"""

from __future__ import annotations

from collections.abc import Callable

from dissectors.batch_header import (
    HEADER_SIZE,
    LENGTH_BEFORE,
    MIN_BATCH_LENGTH,
    RECORD_COUNT_SLACK,
    BatchHeader,
    crc_matches,
    read_header,
    short_batch,
)
from dissectors.compression import CODEC_NAMES, decompress, output_cap
from dissectors.context import RECORD_COST, DecodeContext
from dissectors.record_batch import record_args
from dissectors.record_fragments import ENCODE, JsonText
from dissectors.record_reader import read_records
from dissectors.records import MAGIC_OFFSET, unknown_partial


class NotClean(Exception):  # noqa: N818 -- control flow
    """These records carry a diagnostic somewhere: the reference decoder must report it."""


def records_json(
    data: bytes, view: memoryview, offset: int, length: int, ctx: DecodeContext
) -> dict:
    """The JSON value `decode_records(view, offset, length, ctx)` has, when it has no
    diagnostic (see the module docstring); `data` is the bytes object `view` covers.
    buf[offset:offset+length] must be present."""
    if not ctx.decode_records:
        return {"size": length}
    if ctx.record_headers:
        return headers_json(data, view, offset, length, ctx)
    return _walk(data, view, offset, length, ctx, _batch)


def _walk(
    data: bytes, view: memoryview, offset: int, length: int, ctx: DecodeContext,
    one: Callable[[bytes, memoryview, int, int, DecodeContext], tuple[object, int]],
) -> dict:
    """The record set's batches, each rendered by `one` (which returns it and where the next
    starts); a cut before a magic byte ends it as a partial entry, a magic other than 2 raises
    `NotClean`."""
    batches: list[object] = []  # dicts, or JSON text (record_fragments.JsonText)
    pos = offset
    end = offset + length
    while pos < end:
        if pos + MAGIC_OFFSET >= end:  # cut before the magic byte: a partial entry, no diagnostic
            batches.append(unknown_partial(view, pos, end, 0).value)
            break
        if data[pos + MAGIC_OFFSET] != 2:
            raise NotClean("legacy message set or bad magic")
        batch, pos = one(data, view, pos, end, ctx)
        batches.append(batch)
    return {"batches": batches}


def _short(view: memoryview, pos: int, end: int) -> tuple[object, int]:
    """A batch cut inside its header, as the full path renders it (the rest of the set)."""
    diags: list = []
    node, nxt = short_batch(view, pos, end, 0, diags)
    if diags or nxt is None:
        raise NotClean("short batch")
    return node.value, end


def _batch(
    data: bytes, view: memoryview, pos: int, end: int, ctx: DecodeContext
) -> tuple[object, int]:
    """One magic-2 batch as `record_batch.decode_batch_v2` renders it (when it is clean): a
    dict, or its JSON text (`record_fragments.JsonText`) when the encoder wrote it."""
    if end - pos < HEADER_SIZE:
        return _short(view, pos, end)
    header = read_header(data, pos)
    # the fields this reads, unpacked once (a NamedTuple's attributes and properties are
    # Python lookups from compiled code; this runs once per batch)
    _, batch_length, _, _, crc, attributes, _, _, _, _, _, _, record_count = header
    codec = attributes & 0x07
    if batch_length < MIN_BATCH_LENGTH or attributes & 0x20 or codec not in CODEC_NAMES:
        raise NotClean("bad length, control batch or unknown codec")
    size = LENGTH_BEFORE + batch_length  # header.span
    partial = size > end - pos
    batch_end = end if partial else pos + size
    crc_ok = None if partial else crc_matches(view, pos, batch_end, crc)
    if crc_ok is False:
        raise NotClean("CRC mismatch")
    text = ctx.record_fragments and ENCODE is not None and ctx.limits.max_value_bytes is None
    diags: list = []
    start = pos + HEADER_SIZE
    records: list[dict]
    if codec == 0:
        if text:
            got = batch_text(data, pos, crc_ok, partial, data, start, batch_end, header, ctx)
            if got is not None:
                if not partial and got[1] != record_count:
                    raise NotClean("bad record")
                return got[0], batch_end
        args = record_args(header, ctx)
        records, spans, _ = read_records(data, start, batch_end, args, diags, cut=partial)
        if diags or not partial and len(spans) - 1 != record_count:
            raise NotClean("bad record")
    elif partial:  # a cut compressed batch: nothing to inflate, no diagnostic
        records = []
    else:
        lim = ctx.limits
        cap = output_cap(batch_end - start, lim.max_decompressed_bytes, lim.max_decompression_ratio)
        res = decompress(codec, view[start:batch_end], cap)
        if res.error is not None:
            raise NotClean("decompression")
        inflated = res.data
        if inflated and text:
            got = batch_text(data, pos, crc_ok, False, inflated, 0, len(inflated), header, ctx)
            if got is not None:
                if got[1] != record_count:
                    raise NotClean("bad record (decompressed)")
                return got[0], batch_end
        if inflated:
            args = record_args(header, ctx)
            records, spans, _ = read_records(inflated, 0, len(inflated), args, diags, cut=False)
            found = len(spans) - 1
        else:
            records, found = [], 0
        if diags or found != record_count:
            raise NotClean("bad record (decompressed)")
    return header.to_json(crc_ok, partial, records), batch_end


# what `headers_json` keeps of a magic-2 batch header: what the facts read of a batch
FACT_FIELDS = ("base_offset", "batch_length", "magic", "last_offset_delta", "record_count")


def headers_json(
    data: bytes, view: memoryview, offset: int, length: int, ctx: DecodeContext
) -> dict:
    """`records_json` for a consumer of facts only (`ctx.record_headers`: counts, offsets,
    sizes, all in the batch headers): each batch's JSON object holds only `FACT_FIELDS` (the
    header fields `kanalyze.bodies.batches` reads) and `partial`; no record is read, nothing
    is inflated, and the facts' walks over the body have little to walk.

    The full path's decode budget is charged for the records it would decode (at most the
    batch's record limit each), so a frame the full path would cut raises `NotClean` here
    instead: then the reference path decodes it in full, and whatever the facts read from
    these objects equals what they read from the full ones. A legacy message set, a control
    batch, a bad length, codec or CRC raise `NotClean` as in `records_json`."""
    return _walk(data, view, offset, length, ctx, _header_batch)


def _header_batch(
    data: bytes, view: memoryview, pos: int, end: int, ctx: DecodeContext
) -> tuple[object, int]:
    """One magic-2 batch's `FACT_FIELDS` and `partial` (see `headers_json`)."""
    if end - pos < HEADER_SIZE:
        return _short(view, pos, end)
    header = read_header(data, pos)
    codec = header.codec
    if header.batch_length < MIN_BATCH_LENGTH or header.is_control or codec not in CODEC_NAMES:
        raise NotClean("bad length, control batch or unknown codec")
    batch_end, partial = header.span(pos, end)
    crc_ok = None if partial else crc_matches(view, pos, batch_end, header.crc)
    if crc_ok is False:
        raise NotClean("CRC mismatch")
    if not (partial and codec):  # the full path reads these records (a cut compressed
        limit = header.record_limit(ctx.limits)  # batch it does not inflate)
        if ctx.affordable(RECORD_COST, limit) < limit:
            raise NotClean("decode budget")
        ctx.spend(limit * RECORD_COST)
    return {
        "base_offset": header.base_offset, "batch_length": header.batch_length, "magic": 2,
        "last_offset_delta": header.last_offset_delta, "record_count": header.record_count,
        "partial": partial,
    }, batch_end  # fmt: skip


_CODECS_JSON: dict[int, bytes] = {
    code: b'"' + name.encode() + b'"' for code, name in CODEC_NAMES.items()
}  # the codec names as JSON text


def batch_text(
    head: bytes,
    at: int,
    crc_ok: bool | None,
    partial: bool,
    data: object,  # bytes (anything else: None), not checked by the compiled build
    pos: int,
    end: int,
    header: BatchHeader,
    ctx: DecodeContext,
) -> tuple[JsonText, int] | None:
    """The batch whose header `header` is at head[at:] as its JSON text
    (`record_fragments.JsonText`: what `header.to_json` gives with the records `read_records`
    decodes from data[pos:end]) and its record count, when they have no diagnostic; None:
    run `read_records` (also without the compiled encoder, for a control batch or with
    values to truncate)."""
    encode = ENCODE
    attributes = header[5]
    if encode is None or attributes & 0x20 or type(data) is not bytes or type(head) is not bytes:
        return None  # (not encoded either: a control batch)
    lim = ctx.limits
    if lim.max_value_bytes is not None:  # truncation markers: the dict path writes them
        return None
    codec = _CODECS_JSON.get(attributes & 0x07)
    if codec is None:
        return None
    # ctx.affordable(RECORD_COST, header.record_limit(lim)) and ctx.spend, without the calls
    limit = min(lim.max_array_count, lim.max_records_per_batch,
                max(header[12], 0) + RECORD_COUNT_SLACK)
    budget = ctx.budget
    if budget is not None:
        limit = max(0, min(limit, budget // RECORD_COST))
    got = encode(head, at, crc_ok, partial, codec, data, pos, end, limit, partial)
    if got is None:
        return None
    text, count = got
    if budget is not None:
        ctx.budget = budget - count * RECORD_COST
    return JsonText(text), count
