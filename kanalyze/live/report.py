"""`LiveReport`: what a live capture reports (summary, capture-health metrics), as plain numbers.

One is taken from a `LiveSession` (`of_session`); with `--workers N` every worker sends its
own to the parent once per tick and at the end, and the parent adds them up (`merged`), so
the summary and `/metrics` show per-worker and total counters the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from dissectors import Code
from kanalyze.live.afpacket import CaptureCounters

if TYPE_CHECKING:
    from kanalyze.live.session import LiveSession


@dataclass(slots=True)
class LiveReport:
    counters: CaptureCounters = field(default_factory=CaptureCounters)
    started: float = 0.0
    stopped: float = 0.0
    stop_reason: str = ""
    failed: bool = False
    exchanges: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    idle_closed: int = 0
    # engine state now (gauges) and bytes of Kafka streams so far
    open_connections: int = 0
    pending: int = 0
    stream_client: int = 0
    stream_broker: int = 0
    # the engine's counts (connections closed so far)
    connections: int = 0
    kafka_connections: int = 0
    non_kafka_connections: int = 0
    empty_connections: int = 0
    skipped: int = 0
    gaps: int = 0
    limit_hits: dict[str, int] = field(default_factory=dict)  # max_frame, max_ooo, engine bounds


def of_session(session: LiveSession, streams: bool = True) -> LiveReport:
    """A report of `session` now (from the capture thread, or after the run). `streams=False`
    leaves the stream bytes out (they walk the open connections)."""
    from kanalyze.metrics import stream_bytes

    st, es = session.stats, session.engine.stats
    c = session.source.counters
    hits = {
        "max_frame": es.event_counts.get(Code.FRAME_TOO_LARGE, 0),
        "max_ooo": es.client.limit_gaps + es.broker.limit_gaps,
        **es.limit_hits,
    }
    client, broker = stream_bytes(session.engine) if streams else (0, 0)
    return LiveReport(
        counters=CaptureCounters(**{f.name: getattr(c, f.name) for f in fields(c)}),
        started=st.started,
        stopped=st.stopped,
        stop_reason=st.stop_reason,
        failed=session.failed,
        exchanges=st.exchanges,
        by_status=dict(st.by_status),
        idle_closed=st.idle_closed,
        open_connections=session.open_connections,
        pending=session.pending,
        stream_client=client,
        stream_broker=broker,
        connections=es.connections,
        kafka_connections=es.kafka_connections,
        non_kafka_connections=es.non_kafka_connections,
        empty_connections=es.empty_connections,
        skipped=es.client.skipped + es.broker.skipped,
        gaps=es.client.gaps + es.broker.gaps,
        limit_hits=hits,
    )


def _add_counts(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _add_counters(a: CaptureCounters, b: CaptureCounters) -> CaptureCounters:
    """Sums; a kernel counter is known when any worker's socket gave one."""
    out = CaptureCounters()
    for f in fields(CaptureCounters):
        x, y = getattr(a, f.name), getattr(b, f.name)
        setattr(out, f.name, y if x is None else x if y is None else x + y)
    return out


def merged(reports: list[LiveReport]) -> LiveReport:
    """The workers' reports added up: counters summed, the run from the first start to the
    last stop, failed when any worker failed."""
    total = LiveReport(counters=CaptureCounters(kernel_packets=None, kernel_drops=None))
    if not reports:
        return total
    total.started = min((r.started for r in reports if r.started), default=0.0)
    total.stopped = max(r.stopped for r in reports)
    for r in reports:
        total.counters = _add_counters(total.counters, r.counters)
        total.failed = total.failed or r.failed
        _add_counts(total.by_status, r.by_status)
        _add_counts(total.limit_hits, r.limit_hits)
        for name in (
            "exchanges",
            "idle_closed",
            "open_connections",
            "pending",
            "stream_client",
            "stream_broker",
            "connections",
            "kafka_connections",
            "non_kafka_connections",
            "empty_connections",
            "skipped",
            "gaps",
        ):
            setattr(total, name, getattr(total, name) + getattr(r, name))
    return total
