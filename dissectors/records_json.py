"""A records field straight to its JSON value, for the export's fast path (`fastjson`).

`records.decode_records` returns a RECORDS node whose value is the JSON and whose
children are batch nodes (record nodes built lazily) for the TUI hex view. The
export needs only the value, so for records that decode without a single
diagnostic this builds just that: no batch, record or records nodes. The
record loop is the same (`record_batch.read_records`); only the per-batch and
per-field wrapping is left out. Anything that would carry a diagnostic -- a
bad CRC, length, varint, codec or count, a control batch, a legacy message
set, a decompression problem -- raises `NotClean` and the caller takes the
reference path. A batch cut by the end of the field (a Fetch trimmed at
max_bytes) is normal and has no diagnostic: it is decoded here too.
"""

from __future__ import annotations

import crc32c

from dissectors.compression import CODEC_NAMES, decompress, output_cap
from dissectors.context import DecodeContext
from dissectors.record_batch import (
    HEADER,
    HEADER_SIZE,
    LENGTH_BEFORE,
    MIN_BATCH_LENGTH,
    RECORD_COUNT_SLACK,
    read_records,
    short_batch,
)
from dissectors.records import MAGIC_OFFSET, unknown_partial

_CRC_START = 21


class NotClean(Exception):  # noqa: N818 -- control flow
    """These records carry a diagnostic somewhere: the reference decoder must report it."""


def records_json(data: bytes, view: memoryview, offset: int, length: int, ctx: DecodeContext) -> dict:
    """The JSON value `decode_records(view, offset, length, ctx)` has, when it has no
    diagnostic (see the module docstring); `data` is the bytes object `view` covers.
    buf[offset:offset+length] must be present."""
    if not ctx.decode_records:
        return {"size": length}
    batches: list[dict] = []
    pos = offset
    end = offset + length
    while pos < end:
        if pos + MAGIC_OFFSET >= end:  # cut before the magic byte: a partial entry, no diagnostic
            batches.append(unknown_partial(view, pos, end, 0).value)
            break
        if data[pos + MAGIC_OFFSET] != 2:
            raise NotClean("legacy message set or bad magic")
        batch, pos = _batch(data, view, pos, end, ctx)
        batches.append(batch)
    return {"batches": batches}


def _batch(data: bytes, view: memoryview, pos: int, end: int, ctx: DecodeContext) -> tuple[dict, int]:
    """One magic-2 batch as `record_batch.decode_batch_v2` renders it (when it is clean)."""
    avail = end - pos
    if avail < HEADER_SIZE:
        diags: list = []
        node, nxt = short_batch(view, pos, end, 0, diags)
        if diags or nxt is None:
            raise NotClean("short batch")
        return node.value, end
    (
        base_offset,
        batch_length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = HEADER.unpack_from(data, pos)
    codec = attributes & 0x07
    if batch_length < MIN_BATCH_LENGTH or attributes & 0x20 or codec not in CODEC_NAMES:
        raise NotClean("bad length, control batch or unknown codec")
    ts_type = "log_append" if attributes & 0x08 else "create"
    size = LENGTH_BEFORE + batch_length
    partial = size > avail
    if partial:
        batch_end = end
        crc_ok = None
    else:
        batch_end = pos + size
        crc_ok = crc32c.crc32c(view[pos + _CRC_START : batch_end]) == crc
        if not crc_ok:
            raise NotClean("CRC mismatch")
    lim = ctx.limits
    limit = max(record_count, 0) + RECORD_COUNT_SLACK
    if limit > lim.max_records_per_batch or limit > lim.max_array_count:
        limit = min(lim.max_array_count, lim.max_records_per_batch, limit)
    args = (base_offset, base_ts, max_ts if ts_type == "log_append" else None, ts_type, False, ctx, limit)
    diags = []
    if codec == 0:
        records, spans, _ = read_records(data, pos + HEADER_SIZE, batch_end, args, diags, cut=partial)
        if diags or not partial and len(spans) - 1 != record_count:
            raise NotClean("bad record")
    elif partial:  # a cut compressed batch: nothing to inflate, no diagnostic
        records = []
    else:
        start = pos + HEADER_SIZE
        cap = output_cap(batch_end - start, lim.max_decompressed_bytes, lim.max_decompression_ratio)
        res = decompress(codec, view[start:batch_end], cap)
        if res.error is not None:
            raise NotClean("decompression")
        if res.data:
            records, spans, _ = read_records(res.data, 0, len(res.data), args, diags, cut=False)
            found = len(spans) - 1
        else:
            records, found = [], 0
        if diags or found != record_count:
            raise NotClean("bad record (decompressed)")
    return {
        "base_offset": base_offset,
        "batch_length": batch_length,
        "partition_leader_epoch": leader_epoch,
        "magic": magic,
        "crc": crc,
        "crc_ok": crc_ok,
        "attributes": attributes,
        "codec": CODEC_NAMES[codec],
        "timestamp_type": ts_type,
        "is_transactional": (attributes & 0x10) != 0,
        "is_control": False,
        "has_delete_horizon": (attributes & 0x40) != 0,
        "last_offset_delta": last_offset_delta,
        "base_timestamp": base_ts,
        "max_timestamp": max_ts,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
        "record_count": record_count,
        "partial": partial,
        "records": records,
        "diagnostics": [],
    }, batch_end
