"""Capture health of `live --workers N` on the one `/metrics` endpoint.

The families a single process serves (`kanalyze_capture_*`, `kanalyze_exchanges_total`, ...)
carry the sum over the workers, so dashboards work unchanged; `kanalyze_worker_*{worker="i"}`
give each worker's share. Both come from the same set of reports (each worker's latest, sent
once per tick), so at every scrape a total equals the sum of its per-worker series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kanalyze.live.report import LiveReport, merged

if TYPE_CHECKING:
    from kanalyze.live.pool import WorkerPool

# per-worker family name -> help
_PER_WORKER = {
    "kanalyze_worker_capture_packets": "packets captured and fed to this worker's engine",
    "kanalyze_worker_capture_kernel_packets": "packets that passed the filter on this socket",
    "kanalyze_worker_capture_kernel_drops": "packets the kernel dropped on this socket",
    "kanalyze_worker_exchanges": "exchanges this worker emitted",
}


def _value(name: str, r: LiveReport) -> int:
    c = r.counters
    if name == "kanalyze_worker_capture_packets":
        return c.packets
    if name == "kanalyze_worker_capture_kernel_packets":
        return c.kernel_packets or 0
    if name == "kanalyze_worker_capture_kernel_drops":
        return c.kernel_drops or 0
    return r.exchanges


def pool_families(reports: list[LiveReport]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """Totals under the one-process names, then the per-worker families."""
    from kanalyze.metrics import capture_families

    t = merged(reports)
    if t.counters.kernel_packets is None:  # no tick yet: the sockets' counters are still 0
        t.counters.kernel_packets, t.counters.kernel_drops = 0, 0
    yield from capture_families(
        t.counters, t.exchanges, t.open_connections, t.pending, (t.stream_client, t.stream_broker)
    )
    for name, doc in _PER_WORKER.items():
        fam = CounterMetricFamily(name, doc, labels=("worker",))
        for i, r in enumerate(reports):
            fam.add_metric((str(i),), _value(name, r))
        yield fam


class PoolCollector(Collector):
    """Reads the pool's latest reports at scrape time (one consistent copy of the list)."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from pool_families(list(self.pool.reports))
