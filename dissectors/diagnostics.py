"""The closed set of diagnostic codes every stage reports with.

One enum so outputs, tests and docs agree on the names; a diagnostic always
carries the byte offset where the problem was seen and a human reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    # byte-level decoding
    TRUNCATED = "truncated"
    TRAILING_BYTES = "trailing_bytes"
    BAD_LENGTH = "bad_length"
    BAD_VARINT = "bad_varint"
    ARRAY_TOO_LARGE = "array_too_large"
    NESTING_TOO_DEEP = "nesting_too_deep"
    INVALID_UTF8 = "invalid_utf8"
    UNKNOWN_TAG = "unknown_tag"
    DUPLICATE_TAG = "duplicate_tag"
    # api level
    UNKNOWN_API = "unknown_api"
    UNSUPPORTED_VERSION = "unsupported_version"
    BAD_HEADER = "bad_header"
    # records and codecs
    BAD_MAGIC = "bad_magic"
    CRC_MISMATCH = "crc_mismatch"
    UNKNOWN_CODEC = "unknown_codec"
    DECOMPRESSION_FAILED = "decompression_failed"
    DECOMPRESSION_LIMIT = "decompression_limit"
    DECODE_BUDGET = "decode_budget"  # a frame's decoded output passed its budget: the rest is raw
    PARTIAL_BATCH = "partial_batch"
    BAD_RECORD = "bad_record"
    # capture, reassembly and framing
    BAD_CAPTURE = "bad_capture"
    UNSUPPORTED_LINKTYPE = "unsupported_linktype"
    MALFORMED_PACKET = "malformed_packet"
    GAP = "gap"
    SNAPLEN = "snaplen"  # bytes the capture's snaplen cut off (counted, not listed per packet)
    OVERLAP_CONFLICT = "overlap_conflict"
    SKIPPED_BYTES = "skipped_bytes"
    FRAME_TOO_LARGE = "frame_too_large"
    INCOMPLETE_FRAME = "incomplete_frame"
    BUFFER_LIMIT = "buffer_limit"
    CONNECTION_LIMIT = "connection_limit"
    # correlation
    TIMESTAMP_ORDER = "timestamp_order"  # a response timestamped before its request
    NOT_INFERRED = "not_inferred"  # a response without its request whose api could not be inferred
    DUPLICATE_CORRELATION_ID = "duplicate_correlation_id"
    PENDING_LIMIT = "pending_limit"
    # last resort: a bug became data instead of a traceback
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A problem found at `offset` (bytes from the start of its source buffer)."""

    code: Code
    offset: int
    message: str

    def to_json(self) -> dict[str, object]:
        return {"code": str(self.code), "offset": self.offset, "message": self.message}
