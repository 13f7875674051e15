"""Counts and offsets of one decoded record batch, whatever its magic.

A magic 2 batch says how many records it holds (`record_count`, `last_offset_delta`); a magic
0/1 message does not: it is one record, or a compressed wrapper of several whose own offset is
its LAST inner message's. Every reader (facts, analyses, metrics, charts) asks these three
functions so that legacy producers count like modern ones everywhere.
"""

from __future__ import annotations


def is_legacy(b: dict) -> bool:
    """A magic 0/1 message (a "batch" of one record, or a compressed wrapper of several)."""
    magic = b.get("magic")
    return isinstance(magic, int) and magic < 2


def batch_end(b: dict) -> int | None:
    """The offset after a batch (base offset + last offset delta + 1); for a magic 0/1 message,
    after its offset (a compressed wrapper carries its last inner message's offset)."""
    base, delta = b.get("base_offset"), b.get("last_offset_delta")
    if isinstance(base, int) and isinstance(delta, int):
        return base + delta + 1
    if is_legacy(b):
        offsets = [r.get("offset") for r in b.get("records") or () if isinstance(r, dict)]
        offsets.append(b.get("offset"))
        ints = [o for o in offsets if isinstance(o, int) and o >= 0]
        return max(ints) + 1 if ints else None
    return None


def batch_count(b: dict) -> int:
    """Records in a batch: its record count, else last offset delta + 1; for a magic 0/1
    message, its inner messages (a wrapper) or 1."""
    n = b.get("record_count")
    if isinstance(n, int) and n >= 0:
        return n
    d = b.get("last_offset_delta")
    if isinstance(d, int):
        return d + 1
    if is_legacy(b):  # its records: the message itself, or a wrapper's inner messages
        records = b.get("records")
        return len(records) if isinstance(records, list) else 1
    return 0


def batch_bytes(b: dict) -> int:
    """Bytes of a batch on the wire, its 12-byte offset and length prefix included."""
    size = b.get("batch_length")
    if not isinstance(size, int) and is_legacy(b):
        size = b.get("message_size")
    return (size if isinstance(size, int) else 0) + 12
