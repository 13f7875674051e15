"""`live --workers` without a network: forked workers replaying a capture split by connection
(as the fanout group splits it), merged by the parent; the metrics split; the report sums."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.live import CaptureCounters, LiveOptions
from kanalyze.live.pool import WorkerPool
from kanalyze.live.pool_metrics import pool_families
from kanalyze.live.report import LiveReport, merged
from kanalyze.live.session import LiveSession
from kanalyze.live.worker import Batcher
from kanalyze.metrics import Metrics, observation
from kanalyze.session import Session
from tests.live.test_live_unit import FakeSource, replay

CAPTURE = Path(__file__).resolve().parents[2] / "captures" / "aio_group.pcap"


class _Sock:
    def close(self) -> None:
        pass


class PoolSource(FakeSource):
    """A FakeSource with the `sock` the pool closes in the processes that do not own it."""

    sock = _Sock()


def split(n: int) -> tuple[list[PoolSource], int]:
    """The capture's packets dealt to `n` sources by connection (both directions together)."""
    pkts, lt = replay(CAPTURE)
    conns: dict[frozenset, int] = {}
    parts: list[list[tuple[int, bytes]]] = [[] for _ in range(n)]
    for ts, data in pkts:
        seg = decode_segment(lt, data, FlowStats())
        assert seg is not None
        key = frozenset({(seg.src, seg.sport), (seg.dst, seg.dport)})
        parts[conns.setdefault(key, len(conns) % n)].append((ts, data))
    assert all(parts)
    return [PoolSource(p, lt) for p in parts], len(pkts)


def subscriber(session: LiveSession, batch: Batcher) -> Callable[[Exchange], None]:
    enc = ExchangeEncoder()

    def on_exchange(ex: Exchange) -> None:
        d = enc.encode(ex)
        batch.observe(ex, d)
        batch.write(json.dumps(d))

    return on_exchange


def without_id(line: str) -> str:
    """The line without what is numbered per worker: the connection id, and frame numbers
    (packet numbers of the worker's own stream, as in its --write-pcap file)."""
    d = json.loads(line)
    d["connection"].pop("id")
    for side in ("request", "response"):
        if d.get(side):
            d[side].pop("frame", None)
            d[side].pop("first_frame", None)
    return json.dumps(d, sort_keys=True)


def test_two_workers_write_every_exchange_of_the_capture() -> None:
    sources, total = split(2)
    pool = WorkerPool(sources, LiveOptions(tick_s=0.2), subscriber)
    lines: list[str] = []
    metrics = Metrics()
    pool.start()
    result = pool.run(
        lines.extend, lambda obs: [metrics.apply(o) for o in obs] and None, duration_s=1.5
    )
    assert result.lost == []
    assert result.total.stop_reason == "duration reached"
    assert result.total.counters.packets == total
    assert [w.counters.packets for w in result.workers] == [len(s.packets) for s in sources]
    offline = [ExchangeEncoder().encode(ex) for ex in Session([str(CAPTURE)]).exchanges()]
    assert Counter(map(without_id, lines)) == Counter(without_id(json.dumps(d)) for d in offline)
    # connection ids stay unique: worker 0 numbers 1, 3, ..., worker 1 2, 4, ...
    ids = {json.loads(x)["connection"]["id"] for x in lines}
    assert len(ids) == 8 and {i % 2 for i in ids} == {0, 1}
    # each connection's lines in its own order (a connection is in one worker)
    for cid in ids:
        starts = [
            json.loads(x)["request"]["ts"]
            for x in lines
            if json.loads(x)["connection"]["id"] == cid
        ]
        assert starts == sorted(starts)
    # the metrics the parent applied equal one process observing every exchange
    one = Metrics()
    for ex in Session([str(CAPTURE)], EngineOptions()).exchanges():
        one.observe(ex, ExchangeEncoder().encode(ex))
    assert _samples(metrics) == _samples(one)


def _samples(m: Metrics) -> Counter:
    return Counter(
        (s.name, tuple(sorted(s.labels.items())), round(s.value, 9))  # sums in another order
        for fam in m.registry.collect()
        for s in fam.samples
        if not s.name.endswith("_created")
    )


def test_packet_limit_is_exact_across_workers() -> None:
    sources, total = split(2)
    limit = total - 7
    pool = WorkerPool(sources, LiveOptions(tick_s=0.2, max_packets=limit), subscriber)
    pool.start()
    result = pool.run(lambda _lines: None, duration_s=10)
    assert result.total.stop_reason == "packet limit reached"
    assert result.total.counters.packets == limit
    assert result.total.counters.packets == sum(w.counters.packets for w in result.workers)


def test_reports_add_up_and_totals_equal_the_per_worker_sums() -> None:
    a = LiveReport(
        counters=CaptureCounters(packets=10, bytes=100, kernel_packets=20, kernel_drops=3),
        started=5.0,
        stopped=9.0,
        exchanges=4,
        by_status={"ok": 4},
        limit_hits={"max_frame": 1},
    )
    b = LiveReport(
        counters=CaptureCounters(packets=7, bytes=70, kernel_packets=14, kernel_drops=2),
        started=4.0,
        stopped=8.0,
        exchanges=3,
        by_status={"ok": 2, "no_response": 1},
        failed=True,
    )
    t = merged([a, b])
    assert (t.counters.packets, t.counters.kernel_packets, t.counters.kernel_drops) == (17, 34, 5)
    assert (t.started, t.stopped, t.failed) == (4.0, 9.0, True)
    assert t.by_status == {"ok": 6, "no_response": 1} and t.limit_hits == {"max_frame": 1}
    fams = {f.name: f for f in pool_families([a, b])}
    for total, each in (
        ("kanalyze_capture_kernel_drops", "kanalyze_worker_capture_kernel_drops"),
        ("kanalyze_capture_kernel_packets", "kanalyze_worker_capture_kernel_packets"),
        ("kanalyze_capture_packets", "kanalyze_worker_capture_packets"),
        ("kanalyze_exchanges", "kanalyze_worker_exchanges"),
    ):
        per = [s.value for s in fams[each].samples if s.name.endswith("_total")]
        assert len(per) == 2
        assert fams[total].samples[0].value == sum(per)
    assert fams["kanalyze_capture_kernel_drops"].samples[0].value == 5


@pytest.mark.parametrize(
    ("path", "want"),
    [("live.pcap", "live.w1.pcap"), ("out/x", "out/x.w1"), ("a.b/c", "a.b/c.w1")],
)
def test_worker_pcap_names(path: str, want: str) -> None:
    from kanalyze.commands.live import worker_pcap

    assert worker_pcap(path, 1) == want


def test_observation_is_what_observe_records() -> None:
    ex = next(iter(Session([str(CAPTURE)]).exchanges()))
    d = ExchangeEncoder().encode(ex)
    a, b = Metrics(), Metrics()
    a.observe(ex, d)
    b.apply(observation(ex, d))
    assert _samples(a) == _samples(b)
