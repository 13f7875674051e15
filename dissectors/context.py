"""Settings and shared state for decoding one Kafka frame.

One `DecodeContext` is passed through the schema walker and the records
decoder so that limits, secret handling and decompressed buffers are decided
in one place instead of per call site.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Limits:
    """Resource bounds; every hit becomes a diagnostic, never an exception."""

    # the frame size bound is the engine's (EngineOptions.max_frame, --max-frame): frames are
    # cut before anything is decoded
    max_decompressed_bytes: int = 64 * 1024 * 1024
    max_decompression_ratio: int = 250
    max_array_count: int = 10_000_000
    max_records_per_batch: int = 250_000  # a 1 MiB batch of the smallest records holds ~150k
    # compressed legacy message sets inside compressed ones (the only recursion driven by the
    # input: schema nesting is fixed by the specs); Kafka itself writes one level
    max_nesting_depth: int = 2
    max_value_bytes: int | None = None  # truncate keys/values/header values in output


@dataclass(slots=True)
class DecodeContext:
    limits: Limits = field(default_factory=Limits)
    show_secrets: bool = False
    decode_records: bool = True  # False: records fields report only their size and location
    strict: bool = False  # tests: re-raise internal errors instead of turning them into diagnostics
    # decompressed buffers, addressable by Node.source (index + 1); 0 is the frame itself
    buffers: list[bytes] = field(default_factory=list)
    # topic id (uuid string) -> topic name, learned from Metadata responses seen earlier
    topic_names: dict[str, str] = field(default_factory=dict)

    def add_buffer(self, data: bytes) -> int:
        """Register a decompressed buffer and return its source id for Node.source."""
        self.buffers.append(data)
        return len(self.buffers)
