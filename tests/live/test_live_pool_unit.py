"""`live --workers` without a network: forked workers replaying a capture split by connection
(as the fanout group splits it), merged by the parent; the metrics split; the report sums."""

from __future__ import annotations

import json
import time
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


def split(n: int, capture: Path = CAPTURE) -> tuple[list[PoolSource], int]:
    """The capture's packets dealt to `n` sources by connection (both directions together)."""
    pkts, lt = replay(capture)
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


def without_id(line: str | bytes) -> str:
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
    lines: list[bytes] = []
    metrics = Metrics()
    pool.start()
    result = pool.run(
        lambda out: lines.extend(map(bytes, out)),
        lambda obs: [metrics.apply(o) for o in obs] and None,
        duration_s=1.5,
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


@pytest.mark.parametrize("name", ["aio_group.pcap", "kp_v25.pcap"])
def test_lines_are_merged_in_the_one_process_order(name: str) -> None:
    """Each worker replays as fast as it can, so the lines arrive in any interleaving; merged
    by start time with the workers' watermarks they come out in one process's order (the hold
    bound set out of reach: a starved worker must not pass this test by luck)."""
    capture = CAPTURE.parent / name
    sources, _total = split(2, capture)
    pool = WorkerPool(sources, LiveOptions(tick_s=0.2), subscriber, hold_s=60)
    lines: list[bytes] = []
    pool.start()
    pool.run(lambda out: lines.extend(map(bytes, out)), duration_s=1.5)
    offline = [ExchangeEncoder().encode(ex) for ex in Session([str(capture)]).exchanges()]
    assert [without_id(x) for x in lines] == [without_id(json.dumps(d)) for d in offline]
    assert pool.merge.forced == 0


class StuckSource(PoolSource):
    """A socket whose first read blocks (a worker that says nothing for a while)."""

    slept = False

    def read(self, timeout: float | None):  # noqa: ANN201
        if not self.slept:
            self.slept = True
            time.sleep(3)
        return super().read(timeout)


def test_a_silent_worker_does_not_stall_the_output() -> None:
    sources, _total = split(2)
    stuck = StuckSource([], sources[1].linktype)
    pool = WorkerPool([sources[0], stuck], LiveOptions(tick_s=0.2), subscriber, hold_s=0.3)
    got: list[float] = []
    started = time.monotonic()

    def on_lines(lines: list[memoryview]) -> None:
        got.extend(time.monotonic() - started for _ in lines)

    pool.start()
    result = pool.run(on_lines, duration_s=1.0)
    assert got
    assert max(got) < 2.5  # out before the silent worker said a word
    assert pool.merge.forced == len(got)
    assert result.lost == []


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
