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
    # decoded output per frame, in estimated bytes of Python objects (records, unknown tagged
    # fields, schema nodes: what a few wire bytes can multiply): ratio x the frame's bytes + base,
    # at most max (docs/limits.md). The ratio is above what legit bodies cost (a Metadata
    # response of a big cluster: ~68 x, DescribeConfigs ~41 x, a Fetch of small batches ~31 x),
    # below what hostile ones do (unknown tags ~512 x, compressed records up to 250 x 1 KiB per
    # ~26 bytes); the max bounds a frame's decoding whatever its size (--max-frame is 256 MiB)
    decode_budget_ratio: int = 128
    decode_budget_base: int = 64 * 1024 * 1024
    decode_budget_max: int = 512 * 1024 * 1024


# estimated Python cost (bytes) of one decoded item, measured with RSS (docs/limits.md):
# a record (its dict, strings, ints, its node and its share of the output line) and an
# unknown tagged field (node, diagnostic, bytes, base64 in the output)
RECORD_COST = 1024
TAG_COST = 1024
# a schema node of the decoded tree (kanalyze's Node walker: the TUI, report, export's fallback):
# the Node, its value and its share of the output; measured ~160 bytes for the Node alone. A
# struct costs one per field plus itself, a fixed-size array one per element; the fast JSON path
# (dissectors.fastjson) charges its array elements the same and hands over to the walker when
# the budget runs out, so every path cuts a frame at the same place (issue 20)
NODE_COST = 200


@dataclass(slots=True)
class DecodeContext:
    limits: Limits = field(default_factory=Limits)
    show_secrets: bool = False
    decode_records: bool = True  # False: records fields report only their size and location
    # True: record batches give their header fields and no record (the fast JSON path only:
    # records_json.headers_json); for consumers of facts (counts, offsets), never for output
    record_headers: bool = False
    strict: bool = False  # tests: re-raise internal errors instead of turning them into diagnostics
    # decompressed buffers, addressable by Node.source (index + 1); 0 is the frame itself
    buffers: list[bytes] = field(default_factory=list)
    # topic id (uuid string) -> topic name, learned from Metadata responses seen earlier
    topic_names: dict[str, str] = field(default_factory=dict)
    # estimated bytes the frame being decoded may still produce; None: no frame budget
    budget: int | None = None
    # the export's fast path may give a batch's records as their JSON text (NDJSON lines only:
    # dissectors.record_fragments); set per body by BodyDecoder.fast_json
    record_fragments: bool = False
    # a trial decode whose node is only judged (clean or not) and then dropped: the layout
    # searches of orphan inference and role judging. No secret marking then (`decoder._guard`):
    # nothing of it is output, and a range that starts mid-stream (--jobs, Spark) tries dozens
    # of layouts per orphan, each damaged one scanned for swallowed SASL frames otherwise
    judging: bool = False

    def start_budget(self, frame_bytes: int) -> bool:
        """Give the frame about to be decoded its budget (unless one is running: an embedded
        request shares its Envelope's); True when this call set it (and must `end_budget`)."""
        if self.budget is not None:
            return False
        lim = self.limits
        self.budget = min(
            lim.decode_budget_ratio * max(frame_bytes, 0) + lim.decode_budget_base,
            lim.decode_budget_max,
        )
        return True

    def end_budget(self) -> None:
        self.budget = None

    def affordable(self, cost: int, wanted: int) -> int:
        """How many of `wanted` items costing `cost` each the budget still allows."""
        b = self.budget
        if b is None:
            return wanted
        return max(0, min(wanted, b // cost))

    def spend(self, cost: int) -> None:
        if self.budget is not None:
            self.budget -= cost

    def add_buffer(self, data: bytes) -> int:
        """Register a decompressed buffer and return its source id for Node.source."""
        self.buffers.append(data)
        return len(self.buffers)
