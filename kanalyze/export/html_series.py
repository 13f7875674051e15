"""Time series for the HTML report's charts, gathered in the report's one pass over the events.

The report document holds the replication timelines (HW, LEO, followers) with their times;
what it keeps only as totals is collected here: latency of every exchange per API, records
produced and fetched per topic, and consumer lag per group over time. Memory stays bounded
on any capture: latency points are thinned (every 2nd, then every 4th, ... point) past a cap
per API, and record counts are summed into time buckets whose width doubles when there are too
many of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kanalyze.analysis.events import Event
from kanalyze.analysis.wire import (
    batch_count,
    batches,
    fetch_replica,
    fetch_responses,
    produce_partitions,
)

MAX_POINTS = 5_000  # per latency or lag series (SVG: no WebGL needed to draw)
MAX_BUCKETS = 50_000  # per binned family, all keys together
API_PRODUCE, API_FETCH = 0, 1


@dataclass(slots=True)
class Thinned:
    """(x, y) points; past `cap`, every other one is dropped and only every `stride`-th kept."""

    cap: int = MAX_POINTS
    stride: int = 1
    seen: int = 0
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)

    def add(self, x: float, y: float) -> None:
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        self.xs.append(x)
        self.ys.append(y)
        if len(self.xs) > self.cap:
            del self.xs[1::2], self.ys[1::2]
            self.stride *= 2


@dataclass(slots=True)
class Binned:
    """Sums per (key, time bucket); the bucket width doubles whenever there are too many."""

    width_ns: int = 1_000_000  # 1 ms to start with
    cap: int = MAX_BUCKETS
    sums: dict[str, dict[int, int]] = field(default_factory=dict)
    count: int = 0

    def add(self, key: str, ts_ns: int, value: int) -> None:
        d = self.sums.setdefault(key, {})
        b = ts_ns // self.width_ns
        if b not in d:
            self.count += 1
        d[b] = d.get(b, 0) + value
        if self.count > self.cap:
            self.coarsen()

    def coarsen(self) -> None:
        self.width_ns *= 2
        self.count = 0
        for key, d in self.sums.items():
            merged: dict[int, int] = {}
            for b, v in d.items():
                merged[b // 2] = merged.get(b // 2, 0) + v
            self.sums[key] = merged
            self.count += len(merged)

    def rates(self, span_ns: int, bins: int = 300) -> dict[str, tuple[list[float], list[float]]]:
        """Per key: bucket start times (s) and the value per second, about `bins` buckets over
        the span (never finer than what was kept)."""
        while span_ns // self.width_ns > bins:
            self.coarsen()
        w = self.width_ns / 1e9
        return {
            k: ([b * w for b in sorted(d)], [d[b] / w for b in sorted(d)])
            for k, d in self.sums.items()
        }


class ChartSeries:
    """An observer for `analyze(..., observers=[...])`: sees every wire-ordered event."""

    def __init__(self) -> None:
        self.latency: dict[str, Thinned] = {}
        self.produced = Binned()
        self.fetched = Binned()
        self.lag: dict[str, Thinned] = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._now = 0.0
        self._replay = self._lag_replay()

    def _lag_replay(self) -> object | None:
        """Consumer lag over time from the very series a live run serves (needs
        prometheus-client, which the `html` extra brings)."""
        try:
            from kanalyze.export.metric_replay import MetricReplay
            from kanalyze.metrics import Metrics
        except ImportError:  # pragma: no cover - depends on the environment
            return None
        m = Metrics()
        m.on_lag = self._on_lag
        return MetricReplay(m, 3600.0, None)

    def _on_lag(self, group: str, topic: str, partition: int, lag: int) -> None:
        key = f"{group} / {topic}-{partition}"
        s = self.lag.get(key)
        if s is None:
            s = self.lag[key] = Thinned()
        elif s.ys and s.ys[-1] == lag and s.xs[-1] == self._now:
            return
        s.add(self._now, lag)

    def feed(self, ev: Event) -> None:
        ts = ev.ts
        if self.first_ns is None:
            self.first_ns = ts
        self.last_ns = ts
        ex = ev.ex
        api = ex.api or "unknown"
        if not ev.is_request and ex.latency_ns is not None:
            s = self.latency.get(api)
            if s is None:
                s = self.latency[api] = Thinned()
            s.add(ts / 1e9, ex.latency_ns / 1e6)
        if ev.is_request and ex.api_key == API_PRODUCE and ev.body is not None:
            for topic, _part, bs in produce_partitions(ev.body):
                n = sum(batch_count(b) for b in bs)
                if n:
                    self.produced.add(topic, ts, n)
        elif (
            not ev.is_request
            and ex.api_key == API_FETCH
            and ev.body is not None
            and fetch_replica(ev.bodies.request) < 0
        ):  # consumers only: followers' fetches replicate
            for topic, _part, p in fetch_responses(ev.body):
                n = sum(batch_count(b) for b in batches(p.get("records")))
                if n:
                    self.fetched.add(topic, ts, n)
        if self._replay is not None:
            self._now = ts / 1e9
            self._replay.feed(ev)  # type: ignore[attr-defined]

    @property
    def span_ns(self) -> int:
        if self.first_ns is None or self.last_ns is None:
            return 0
        return self.last_ns - self.first_ns
