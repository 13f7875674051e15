"""Entry point for every field of type "records" (Produce, Fetch, FetchSnapshot, ...).

`decode_records` walks the records bytes batch by batch, dispatching on the
magic byte (offset 16 in both layouts) to `record_batch` (magic 2) or
`message_set` (magic 0/1), and returns one RECORDS node:

    value = {"batches": [batch, ...]}
    children = one STRUCT node per batch (offset/length in the frame), whose
               children are the record nodes; records of a compressed batch
               live in a decompressed buffer (`Node.source` = ctx.add_buffer()).

Each batch JSON object carries at least base_offset, magic, codec, crc_ok,
producer_id, producer_epoch, base_sequence, is_transactional, is_control,
partial, records and diagnostics ([{code, offset, message}], the same
Diagnostic objects as on the batch node). Each record carries offset
(absolute), timestamp (ISO-8601 UTC, ms, "Z"), timestamp_ms, timestamp_type
("create"/"log_append", None for magic 0), key, value and headers
([{key, value}]); byte values are rendered by `record_values.render_bytes`
(text, {"b64": ...}, or a truncation marker with `limits.max_value_bytes`).

A batch cut by the end of the records bytes (a Fetch response trimmed at
max_bytes: normal) is `partial: true` with no diagnostic; its complete
uncompressed records are still listed. With `ctx.decode_records` False only
`{"size": length}` is reported. Nothing here raises on bad input: a bug
becomes an INTERNAL_ERROR diagnostic (re-raised when `ctx.strict`).
"""

from __future__ import annotations

from dissectors.context import DecodeContext
from dissectors.diagnostics import Code, Diagnostic
from dissectors.message_set import decode_message_set_entry
from dissectors.node import RECORDS, STRUCT, Node
from dissectors.record_batch import decode_batch_v2
from dissectors.registry import register_records_decoder

MAGIC_OFFSET = 16
_NAMES = tuple(str(i) for i in range(256))  # batch node names, shared


def decode_records(
    buf: bytes | memoryview, offset: int, length: int, ctx: DecodeContext, source: int = 0
) -> Node:
    """Decode the records bytes buf[offset:offset+length] (see the module docstring)."""
    batches: list[Node] = []
    node = Node("records", RECORDS, offset, length, None, batches, source)
    if not ctx.decode_records:
        node.value = {"size": length}
        return node
    try:
        view = memoryview(buf)
        end = min(offset + max(length, 0), len(view))
        if end < offset + length:
            node.diagnostics.append(
                Diagnostic(
                    Code.TRUNCATED,
                    end,
                    f"records field of {length} bytes, only {end - offset} present",
                )
            )
        pos: int | None = offset
        while pos is not None and pos < end:
            magic = view[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < end else None
            if magic is None:  # cut before the magic byte: a partial entry of unknown format
                child, pos = unknown_partial(view, pos, end, source), None
            elif magic == 2:
                child, pos = decode_batch_v2(view, pos, end, source, ctx)
            elif magic in (0, 1):
                child, pos = decode_message_set_entry(view, pos, end, source, ctx)
            else:
                child, pos = _bad_magic(view, pos, end, magic, source)
            n = len(batches)
            child.name = _NAMES[n] if n < 256 else str(n)
            batches.append(child)
        node.value = {"batches": [b.value for b in batches]}
    except Exception as exc:  # the one exception boundary of the records decoder
        if ctx.strict:
            raise
        node.children = []
        node.value = {"size": length, "batches": []}
        node.diagnostics.append(
            Diagnostic(Code.INTERNAL_ERROR, offset, f"records decoder failed: {exc!r}")
        )
    if node.diagnostics and isinstance(node.value, dict):
        node.value["diagnostics"] = [d.to_json() for d in node.diagnostics]
    return node


def unknown_partial(view: memoryview, pos: int, end: int, source: int) -> Node:
    """Fewer than 17 bytes left (a Fetch cut at max_bytes): partial, format unknown."""
    avail = end - pos
    batch = dict.fromkeys(_BATCH_KEYS)
    batch.update(partial=True, records=[], diagnostics=[])
    if avail >= 8:
        batch["base_offset"] = int.from_bytes(view[pos : pos + 8], "big", signed=True)
    if avail >= 12:
        batch["length"] = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
    return Node("batch", STRUCT, pos, avail, batch, [], source)


_BATCH_KEYS = (
    "base_offset",
    "magic",
    "codec",
    "crc_ok",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "is_transactional",
    "is_control",
)


def _bad_magic(
    view: memoryview, pos: int, end: int, magic: int, source: int
) -> tuple[Node, int | None]:
    """An entry with an unknown magic: reported, skipped by its length when that fits."""
    length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
    size = 12 + length
    ok = length > 0 and pos + size <= end
    nxt = pos + size if ok else None
    diag = Diagnostic(Code.BAD_MAGIC, pos + MAGIC_OFFSET, f"unknown magic {magic}")
    batch = {
        "base_offset": int.from_bytes(view[pos : pos + 8], "big", signed=True),
        "magic": magic,
        "codec": None,
        "crc_ok": None,
        "producer_id": None,
        "producer_epoch": None,
        "base_sequence": None,
        "is_transactional": None,
        "is_control": None,
        "partial": False,
        "records": [],
        "diagnostics": [diag.to_json()],
    }
    return Node("batch", STRUCT, pos, (nxt or end) - pos, batch, [], source, [diag]), nxt


register_records_decoder(decode_records)
