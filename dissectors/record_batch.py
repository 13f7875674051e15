"""Record batches, magic 2 (Kafka >= 0.11): header, CRC32C, codec, varint records.

The 61-byte header is read by `batch_header`, the records (compressed as a
whole when the codec bits are set) by `record_reader`. This module puts them
together into one batch node: the header fields as its JSON value, the record
nodes as its children (built on demand), every problem as a diagnostic. Records
carry ISO-8601 timestamps; the header keeps the raw millisecond ints.
"""

from __future__ import annotations

from dissectors.batch_header import (
    ATTRIBUTES_AT,
    CRC_AT,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    RECORD_COUNT_AT,
    BatchHeader,
    bad_length,
    crc_matches,
    read_header,
    short_batch,
)
from dissectors.compression import CODEC_NAMES, decompress, output_cap
from dissectors.context import DecodeContext
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import STRUCT, LazyNode, Node
from dissectors.record_reader import RecordArgs, RecordNodes, read_records
from dissectors.record_values import render_raw


def decode_batch_v2(
    buf: memoryview, pos: int, end: int, source: int, ctx: DecodeContext
) -> tuple[Node, int | None]:
    """Decode the magic-2 batch at `pos` (records bytes end at `end`).

    Returns the batch Node and the position of the next batch, or None when
    the framing cannot be trusted any further (bad length).
    """
    diags: list[Diagnostic] = []
    avail = end - pos
    if avail < HEADER_SIZE:
        return short_batch(buf, pos, end, source, diags)
    header = read_header(buf, pos)
    batch = header.to_json(None, False, [])
    node = LazyNode("batch", STRUCT, pos, 0, batch, [], source, diags)
    if header.batch_length < MIN_BATCH_LENGTH:
        diags.append(bad_length(pos, header.batch_length))
        node.length = avail
        batch["diagnostics"] = [d.to_json() for d in diags]
        return node, None
    batch_end, partial = header.span(pos, end)
    node.length = batch_end - pos
    batch["partial"] = partial
    if not partial:
        ok = crc_matches(buf, pos, batch_end, header.crc)
        batch["crc_ok"] = ok
        if not ok:
            diags.append(
                Diagnostic(
                    Code.CRC_MISMATCH, pos + CRC_AT, f"CRC32C mismatch (stored {header.crc:#010x})"
                )
            )
    if pos + HEADER_SIZE <= batch_end:
        _add_records(node, batch, header, buf, pos, batch_end, partial, ctx)
    if diags:
        batch["diagnostics"] = [d.to_json() for d in diags]
    return node, batch_end


def record_args(header: BatchHeader, ctx: DecodeContext) -> RecordArgs:
    """What the record loop needs from the header (see `record_reader.read_records`)."""
    return (
        header.base_offset,
        header.base_timestamp,
        header.log_append_time(),
        header.timestamp_type,
        header.is_control,
        ctx,
        header.record_limit(ctx.limits),
    )


def _add_records(
    node: LazyNode,
    batch: dict[str, object],
    header: BatchHeader,
    buf: memoryview,
    pos: int,
    batch_end: int,
    partial: bool,
    ctx: DecodeContext,
) -> None:
    """The batch's records into its JSON value, their nodes (on demand) into `node`."""
    diags = node.diagnostics
    rec_start = pos + HEADER_SIZE
    codec = header.codec
    args = record_args(header, ctx)
    nodes: RecordNodes | None = None
    if codec == 0:
        records, spans, extra = read_records(buf, rec_start, batch_end, args, diags, cut=partial)
        nodes = RecordNodes(spans, records[:], extra, node.source)
        if not partial:
            _check_count(header.record_count, len(nodes), pos, diags)
    elif codec not in CODEC_NAMES:
        diags.append(
            Diagnostic(
                Code.UNKNOWN_CODEC, pos + ATTRIBUTES_AT, f"unknown codec id {codec} in attributes"
            )
        )
        batch["raw_records"] = render_raw(buf[rec_start:batch_end], ctx.limits.max_value_bytes)
        records = []
    elif partial:  # a cut compressed batch: nothing to inflate reliably
        records = []
    else:
        records, nodes = _compressed(buf, rec_start, batch_end, codec, args, diags, ctx)
        if not any(
            d.code is Code.DECOMPRESSION_LIMIT or d.code is Code.DECOMPRESSION_FAILED for d in diags
        ):
            _check_count(header.record_count, 0 if nodes is None else len(nodes), pos, diags)
    batch["records"] = records
    if nodes is not None and len(nodes.spans) > 1:
        node.pending = nodes  # the record nodes are built when someone asks for them
    else:
        node.children = []


def _check_count(declared: int, found: int, pos: int, diags: list[Diagnostic]) -> None:
    if declared != found:
        diags.append(
            Diagnostic(
                Code.BAD_RECORD,
                pos + RECORD_COUNT_AT,
                f"record_count says {declared}, found {found} records",
            )
        )


def _compressed(
    buf: memoryview,
    start: int,
    end: int,
    codec: int,
    args: RecordArgs,
    diags: list[Diagnostic],
    ctx: DecodeContext,
) -> tuple[list[dict], RecordNodes | None]:
    """The records of a compressed batch, decoded from its decompressed buffer."""
    limits = ctx.limits
    cap = output_cap(end - start, limits.max_decompressed_bytes, limits.max_decompression_ratio)
    res = decompress(codec, buf[start:end], cap)
    if res.error is not None:
        diags.append(Diagnostic(res.error, start, res.message))
    if not res.data:
        return [], None
    source = ctx.add_buffer(res.data)
    cut = res.error is not None
    records, spans, extra = read_records(
        memoryview(res.data), 0, len(res.data), args, diags, cut=cut, where=" (decompressed)"
    )
    return records, RecordNodes(spans, records[:], extra, source)
