"""The 61-byte header of a magic-2 record batch, read in one place.

Layout (big-endian):

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 |
    magic int8 | crc uint32 | attributes int16 | last_offset_delta int32 |
    base_timestamp int64 | max_timestamp int64 | producer_id int64 |
    producer_epoch int16 | base_sequence int32 | record_count int32

CRC32C covers attributes..end of batch. Attributes: bits 0-2 codec, bit 3
timestamp type (log append), bit 4 transactional, bit 5 control, bit 6 delete
horizon (base_timestamp is then the delete horizon). Header timestamps are kept
as the raw millisecond ints.

Both record decoders read it here: the reference one (`record_batch`, nodes and
diagnostics) and the export's fast path (`records_json`, JSON only), so the
batch's JSON object has one shape.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from dissectors.compression import CODEC_NAMES
from dissectors.context import Limits
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import STRUCT, Node

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_BEFORE = 12  # base_offset + batch_length precede the counted bytes
MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_BEFORE  # 49
CRC_START = 21  # attributes: where the CRC32C starts
CRC_AT = 17
RECORD_COUNT_AT = 57
ATTRIBUTES_AT = 21
RECORD_COUNT_SLACK = 16  # records decoded past a batch's declared count before giving up


class BatchHeader(NamedTuple):
    """The header fields, as stored."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> str:
        return "log_append" if self.attributes & 0x08 else "create"

    @property
    def is_control(self) -> bool:
        return (self.attributes & 0x20) != 0

    def span(self, pos: int, end: int) -> tuple[int, bool]:
        """(where the batch ends, whether the bytes stop before that: a partial batch)."""
        size = LENGTH_BEFORE + self.batch_length
        if size > end - pos:
            return end, True
        return pos + size, False

    def record_limit(self, limits: Limits) -> int:
        """Records materialized at most: beyond the declared count (plus slack) or the limits
        they are not (a tiny compressed batch must not become millions of records)."""
        return min(
            limits.max_array_count,
            limits.max_records_per_batch,
            max(self.record_count, 0) + RECORD_COUNT_SLACK,
        )

    def log_append_time(self) -> int | None:
        """The timestamp every record takes (log-append time), or None (each its own)."""
        return self.max_timestamp if self.attributes & 0x08 else None

    def to_json(self, crc_ok: bool | None, partial: bool, records: list) -> dict[str, object]:
        """The batch's JSON object (its "diagnostics" empty: the caller fills them)."""
        attributes = self.attributes
        codec = attributes & 0x07
        return {
            "base_offset": self.base_offset,
            "batch_length": self.batch_length,
            "partition_leader_epoch": self.partition_leader_epoch,
            "magic": self.magic,
            "crc": self.crc,
            "crc_ok": crc_ok,
            "attributes": attributes,
            "codec": CODEC_NAMES.get(codec) or f"unknown({codec})",
            "timestamp_type": self.timestamp_type,
            "is_transactional": (attributes & 0x10) != 0,
            "is_control": (attributes & 0x20) != 0,
            "has_delete_horizon": (attributes & 0x40) != 0,
            "last_offset_delta": self.last_offset_delta,
            "base_timestamp": self.base_timestamp,
            "max_timestamp": self.max_timestamp,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "record_count": self.record_count,
            "partial": partial,
            "records": records,
            "diagnostics": [],
        }


def read_header(buf: bytes | memoryview, pos: int) -> BatchHeader:
    """The header at `pos` (HEADER_SIZE bytes must be there)."""
    # tuple.__new__: the NamedTuple's `_make` is a Python classmethod, 1.6 x slower per batch
    return _new(BatchHeader, HEADER.unpack_from(buf, pos))


_new = tuple.__new__


def crc_matches(buf: bytes | memoryview, pos: int, batch_end: int, crc: int) -> bool:
    """Whether the CRC32C of the complete batch at `pos` is the stored `crc`."""
    return _crc32c()(buf[pos + CRC_START : batch_end]) == crc


def _crc32c() -> Callable[[bytes | memoryview], int]:
    """The CRC32C function, its library imported on first use (its import costs more than a
    header-only run of a small capture)."""
    global _CRC
    if _CRC is None:
        import crc32c

        _CRC = crc32c.crc32c
    return _CRC


_CRC: Callable[[bytes | memoryview], int] | None = None


def bad_length(pos: int, batch_length: int) -> Diagnostic:
    return Diagnostic(
        Code.BAD_LENGTH,
        pos + 8,
        f"batch_length {batch_length} is below the {MIN_BATCH_LENGTH}-byte header",
    )


_FIELD_ENDS = (8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57, 61)


def short_batch(
    buf: memoryview, pos: int, end: int, source: int, diags: list[Diagnostic]
) -> tuple[Node, int | None]:
    """A batch cut inside its 61-byte header: the fields present, None for the rest.
    Returns the batch node and where the next batch starts (None: the framing is lost)."""
    values = HEADER.unpack_from(bytes(buf[pos:end]).ljust(HEADER_SIZE, b"\0"))
    batch: dict[str, object] = {
        name: (v if pos + e <= end else None)
        for name, v, e in zip(BatchHeader._fields, values, _FIELD_ENDS, strict=True)
    }
    node = Node("batch", STRUCT, pos, end - pos, batch, [], source, diags)
    length = batch["batch_length"]
    if isinstance(length, int) and length < MIN_BATCH_LENGTH:
        diags.append(bad_length(pos, length))
        partial = False
    else:
        partial = True
    attributes = batch["attributes"]
    batch.update(
        crc_ok=None,
        codec=None
        if not isinstance(attributes, int)
        else CODEC_NAMES.get(attributes & 7, f"unknown({attributes & 7})"),
        is_transactional=None if not isinstance(attributes, int) else bool(attributes & 0x10),
        is_control=None if not isinstance(attributes, int) else bool(attributes & 0x20),
        partial=partial,
        records=[],
        diagnostics=[d.to_json() for d in diags],
    )
    return node, (end if partial else None)
