"""The io table of `kanalyze stats` (Wireshark's I/O graph, for Kafka): requests, bytes, records
and errors per interval, optionally split by topic or client, with the interval grown
automatically to keep the table readable. Apart from `stats` for its size: its bucket arithmetic
(interval coarsening, merging) is a job of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kanalyze.views.expected import expected_error
from kanalyze.views.stats_common import (
    FETCH,
    MAX_IO_BUCKETS,
    MAX_IO_SAMPLES,
    PRODUCE,
    Exch,
    lat_ms,
    waits,
)

_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*$")


def parse_interval(text: str) -> float:
    """'1s', '500ms', '2', '1m' -> seconds (> 0); ValueError otherwise."""
    m = _INTERVAL.match(text)
    if not m:
        raise ValueError(f"io interval {text!r} is not a duration such as 1s, 500ms or 1m")
    v = float(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60}[m.group(2)]
    if v <= 0:
        raise ValueError(f"io interval {text!r} must be more than zero")
    return v


@dataclass(slots=True)
class _Bucket:
    requests: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    produced_records: int = 0
    fetched_records: int = 0
    produced_bytes: int = 0  # record batch bytes
    fetched_bytes: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)  # real responses only, ms


class IoCollector:
    """Requests, bytes, records and errors per interval, by the time each exchange started.

    Without an interval the table stays readable: it starts at 1 s and, whenever the capture
    outgrows AUTO_ROWS intervals, moves to the next coarser one (each a multiple of the one
    before, so buckets merge exactly). An explicit interval is kept; past MAX_IO_BUCKETS
    intervals later exchanges are counted in `dropped`.

    `by` ("topic" or "client") also splits each interval: per client id everything the
    exchanges carry; per topic the Produce and Fetch traffic (records and batch bytes, the
    partitions' error codes). Only non-empty (interval, key) pairs are kept."""

    AUTO_STEPS = (1, 2, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400)
    AUTO_ROWS = 100

    BY = ("topic", "client")

    def __init__(self, interval_s: float | None = None, by: str | None = None) -> None:
        self.by = by
        self.split: dict[tuple[int, str], _Bucket] = {}
        self.auto = interval_s is None
        self.interval_s: float = 1.0 if interval_s is None else interval_s
        self.interval_ns = max(1, int(self.interval_s * 1e9))
        self.start_ns: int | None = None
        self.buckets: dict[int, _Bucket] = {}
        self.dropped = 0

    def _coarser(self, index: int) -> int:
        """Grow the interval until `index` (at the current one) fits in AUTO_ROWS."""
        while index >= self.AUTO_ROWS:
            steps = self.AUTO_STEPS
            nxt = next((x for x in steps if x > self.interval_s), self.interval_s * 2)
            factor = round(nxt / self.interval_s)
            merged: dict[int, _Bucket] = {}
            for i, b in self.buckets.items():
                _add(merged.setdefault(i // factor, _Bucket()), b)
            self.buckets = merged
            split: dict[tuple[int, str], _Bucket] = {}
            for (i, key), b in self.split.items():
                _add(split.setdefault((i // factor, key), _Bucket()), b)
            self.split = split
            self.interval_s = float(nxt)
            self.interval_ns = int(nxt * 1e9)
            index //= factor
        return index

    def feed(self, x: Exch) -> None:
        ex = x.ex
        t = ex.start_ts
        if self.start_ns is None:
            self.start_ns = t
        i = max(0, (t - self.start_ns) // self.interval_ns)
        if self.auto and i >= self.AUTO_ROWS:
            i = self._coarser(i)
        b = self.buckets.get(i)
        if b is None:
            if i >= MAX_IO_BUCKETS:
                self.dropped += 1
                return
            b = self.buckets[i] = _Bucket()
        self._count(b, x)
        if self.by == "client":
            key = (i, ex.client_id or "-")
            sb = self.split.get(key)
            if sb is None and len(self.split) < MAX_IO_BUCKETS:
                sb = self.split[key] = _Bucket()
            if sb is not None:
                self._count(sb, x)
        elif self.by == "topic" and ex.api_key in (PRODUCE, FETCH):
            self._topics(i, x)

    @staticmethod
    def _count(b: _Bucket, x: Exch) -> None:
        ex = x.ex
        b.requests += 1
        if ex.request is not None:
            b.request_bytes += ex.request.pdu.size + 4
        if ex.response is not None:
            b.response_bytes += ex.response.pdu.size + 4
        if ex.api_key in (PRODUCE, FETCH):
            n = sum(p.record_count or 0 for p in x.facts.partitions)
            size = sum(p.records_bytes or 0 for p in x.facts.partitions)
            if ex.api_key == PRODUCE:
                b.produced_records += n
                b.produced_bytes += size
            else:
                b.fetched_records += n
                b.fetched_bytes += size
        if ex.latency_ns is not None and len(b.latencies) < MAX_IO_SAMPLES and not waits(x):
            b.latencies.append(ex.latency_ns / 1e6)
        if ex.response is not None:
            b.errors += sum(
                1
                for c in x.facts.error_codes
                if not expected_error(ex.api_key, c, x.bodies.request, ex.api_version)
            )

    def _topics(self, i: int, x: Exch) -> None:
        produce = x.ex.api_key == PRODUCE
        touched: set[str] = set()
        for pf in x.facts.partitions:
            topic = pf.topic or (pf.topic_id[:8] if pf.topic_id else "?")
            b = self.split.get((i, topic))
            if b is None:
                if len(self.split) >= MAX_IO_BUCKETS:
                    continue
                b = self.split[(i, topic)] = _Bucket()
            if topic not in touched:
                touched.add(topic)
                b.requests += 1
            if produce:
                b.produced_records += pf.record_count or 0
                b.produced_bytes += pf.records_bytes or 0
            else:
                b.fetched_records += pf.record_count or 0
                b.fetched_bytes += pf.records_bytes or 0
            if pf.error_code:
                b.errors += 1

    def rows(self) -> list[dict[str, object]]:
        if not self.buckets:
            return []
        out = []
        step = self.interval_s
        for i in range(max(self.buckets) + 1):
            b = self.buckets.get(i) or _Bucket()
            out.append(
                {
                    "start_s": round(i * step, 6),
                    "end_s": round((i + 1) * step, 6),
                    "requests": b.requests,
                    "request_bytes": b.request_bytes,
                    "response_bytes": b.response_bytes,
                    "produced_records": b.produced_records,
                    "produced_bytes": b.produced_bytes,
                    "fetched_records": b.fetched_records,
                    "fetched_bytes": b.fetched_bytes,
                    "errors": b.errors,
                    **{k: v for k, v in lat_ms(b.latencies).items() if k in ("p50_ms", "max_ms")},
                }
            )
        return out

    def split_rows(self) -> list[dict[str, object]]:
        """The `io_by` table: one row per non-empty (interval, topic or client id)."""
        step = self.interval_s
        return [
            {
                "start_s": round(i * step, 6),
                "end_s": round((i + 1) * step, 6),
                "by": self.by,
                "key": key,
                "requests": b.requests,
                "produced_records": b.produced_records,
                "produced_bytes": b.produced_bytes,
                "fetched_records": b.fetched_records,
                "fetched_bytes": b.fetched_bytes,
                "errors": b.errors,
            }
            for (i, key), b in sorted(self.split.items())
        ]


def _add(into: _Bucket, b: _Bucket) -> None:
    """Merge bucket `b` into `into` (interval coarsening)."""
    for f in _Bucket.__slots__:
        setattr(into, f, getattr(into, f) + getattr(b, f))
    del into.latencies[MAX_IO_SAMPLES:]
