"""The engine's options and the statistics it reports: plain records, importable without the
engine itself (`kanalyze.engine` re-exports them)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kanalyze.flows import FlowStats
from kanalyze.framing import Framer, StreamEvent
from kanalyze.reassembly import HalfStream, ReassemblyLimits


@dataclass(slots=True)
class EngineOptions:
    ports: frozenset[int] = frozenset()  # --port: these are broker ports, always Kafka
    max_frame: int = 256 * 1024 * 1024
    max_pending: int = 10_000
    order_window_ns: int = 60 * 1_000_000_000
    pending_timeout_ns: int | None = None  # live mode: give up on requests older than this
    reassembly: ReassemblyLimits = field(default_factory=ReassemblyLimits)
    # bytes held across all connections (partial frames, unsynced search bytes, out-of-order
    # data); over it the connections holding the most are evicted down to 3/4 of it
    max_buffered: int = 1024 * 1024 * 1024
    # connections open at once; over it the least recently active 1/8 are closed
    max_connections: int = 100_000
    # the engine's fused path for in-order segments of an established Kafka connection
    # (`Engine._fast`); False runs every packet through the general stages, with the same
    # output: the tests compare both, KANALYZE_GENERAL_PATH=1 turns it off from outside
    fast_path: bool = field(default_factory=lambda: not os.environ.get("KANALYZE_GENERAL_PATH"))
    # connection ids: first, first + step, ... (`live --workers N`: worker i starts at i + 1
    # with step N, so the merged output's ids stay unique)
    id_first: int = 1
    id_step: int = 1


@dataclass(slots=True)
class DirectionTotals:
    """Byte accounting for one side of the Kafka connections: stream = frames + skipped + gaps."""

    stream: int = 0
    frames: int = 0
    skipped: int = 0
    gaps: int = 0
    gap_count: int = 0
    retransmitted: int = 0
    overlap_conflicts: int = 0
    pdus: int = 0
    limit_gaps: int = 0  # holes given up at a reassembly bound (also counted in gaps)
    uncaptured: int = 0  # bytes cut by the capture's snaplen (also counted in gaps)

    def add(self, half: HalfStream, framer: Framer) -> None:
        self.stream += half.next
        self.frames += framer.pdu_bytes
        self.skipped += framer.skipped
        self.gaps += half.gap_bytes
        self.gap_count += half.gaps
        self.retransmitted += half.retransmitted
        self.overlap_conflicts += half.overlap_conflicts
        self.pdus += framer.frames
        self.limit_gaps += half.limit_gaps
        self.uncaptured += half.uncaptured


@dataclass(slots=True)
class EngineStats:
    flows: FlowStats = field(default_factory=FlowStats)
    connections: int = 0
    kafka_connections: int = 0
    non_kafka_connections: int = 0
    non_kafka_bytes: int = 0
    empty_connections: int = 0  # no payload at all (refused, probes, idle)
    stray_packets: int = 0  # payload-less segments of connections not open (e.g. the last ACK)
    client: DirectionTotals = field(default_factory=DirectionTotals)
    broker: DirectionTotals = field(default_factory=DirectionTotals)
    events: list[StreamEvent] = field(default_factory=list)  # stream events worth showing
    max_events: int = 10_000
    events_dropped: int = 0
    # every stream event by Code (a str: plain-string lookups work), kept or dropped
    event_counts: dict[str, int] = field(default_factory=dict)
    # engine-wide bounds hit: option name -> times
    limit_hits: dict[str, int] = field(default_factory=dict)
    buffered: int = 0  # bytes buffered right now across connections
    buffered_peak: int = 0
    # what the engine holds right now, estimated in bytes of Python objects: the buffered bytes
    # and their chunks, waiting requests and held responses, exchanges waiting for their turn,
    # packets of connections whose roles are not decided (bounded by --max-buffered)
    held: int = 0
    held_peak: int = 0  # the most held at once, at most --max-buffered (checked per packet)
    open_peak: int = 0  # most connections open at once
    # connections judged not Kafka, for the "nothing analyzed" explanation: (client, broker, tls)
    non_kafka_flows: list[tuple[str, str, bool]] = field(default_factory=list)
    tls_connections: int = 0  # TLS records seen where Kafka was expected (a TLS listener)

    def not_kafka(self, client: str, broker: str, tls: bool) -> None:
        """Count a connection judged not Kafka (its flow named in the first 20)."""
        self.non_kafka_connections += 1
        self.tls_connections += tls
        if len(self.non_kafka_flows) < 20:
            self.non_kafka_flows.append((client, broker, tls))
