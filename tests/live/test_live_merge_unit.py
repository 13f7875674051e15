"""`live --workers`: the parent's start-time merge (`kanalyze.live.merge`) and what the workers
send it (lines' start times, watermarks), without processes or a network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kanalyze.live import worker
from kanalyze.live.merge import StartMerge
from kanalyze.live.worker import Batcher, WorkerSource, low_water


def lines(*starts: int, tag: str = "") -> tuple[list[str], list[int]]:
    return [f"{tag}{s}" for s in starts], list(starts)


def test_lines_go_out_in_start_order_once_every_worker_promised() -> None:
    m = StartMerge(2)
    m.add(0, *lines(10, 20, 30, tag="a"), mark=30, now=0.0)
    # worker 1 promised nothing yet: everything waits
    assert m.take(0.1) == []
    m.add(1, *lines(15, 25, tag="b"), mark=25, now=0.1)
    # worker 1 may still send lines from 25 on: a30 waits for its word
    assert m.take(0.1) == ["a10", "b15", "a20", "b25"]
    m.add(1, [], [], mark=40, now=0.2)
    assert m.take(0.2) == ["a30"]
    assert m.forced == 0 and m.held == 0


def test_an_equal_start_goes_out_and_a_promise_never_moves_back() -> None:
    m = StartMerge(2)
    m.add(0, *lines(50, tag="a"), mark=60, now=0.0)
    m.add(1, [], [], mark=50, now=0.0)
    assert m.take(0.0) == ["a50"]
    m.add(1, [], [], mark=20, now=0.0)  # a late, smaller watermark does not undo the promise
    assert m.marks[1] == 50


def test_a_silent_worker_holds_lines_at_most_the_hold_time() -> None:
    m = StartMerge(2, hold_s=1.0)
    m.add(0, *lines(1, 2, tag="a"), mark=2, now=10.0)
    assert m.take(10.5) == []
    assert m.due_in(10.5) == pytest.approx(0.5)
    assert m.take(11.0) == ["a1", "a2"]
    assert m.forced == 2
    assert m.due_in(11.0) is None


def test_the_held_bytes_are_bounded() -> None:
    m = StartMerge(2, hold_s=100, hold_bytes=10)
    m.add(0, ["x" * 6, "y" * 6], [1, 2], mark=None, now=0.0)
    # 12 characters held, over 10: the oldest goes out until the bound holds again
    assert m.take(0.0) == ["x" * 6]
    assert m.held == 6


def test_an_ended_worker_constrains_nothing_and_each_worker_order_is_kept() -> None:
    m = StartMerge(3)
    m.add(0, *lines(5, 3, 9, tag="a"), mark=None, now=0.0)  # out of order within the worker
    m.add(1, *lines(4, tag="b"), mark=None, now=0.0)
    m.end(2)
    # every worker that may still send has a line here: the least one is safe
    assert m.take(0.0) == ["b4"]
    assert m.take(0.0) == []  # worker 1 may send from 4 on again
    m.end(1)
    assert m.take(0.0) == ["a5", "a3", "a9"]  # a5 before a3: a worker's order is kept
    m.add(0, *lines(7, tag="a"), mark=None, now=0.0)
    assert m.drain() == ["a7"]


class _Msg:
    def __init__(self, done: bool) -> None:
        self.done = done


def engine(done=(), waiting=(), undecided=(), now: int = 0, window: int = 1000):  # noqa: ANN001, ANN201
    return SimpleNamespace(
        done=list(done),
        waiting=[(t, k, _Msg(d)) for k, (t, d) in enumerate(waiting)],
        undecided={k: SimpleNamespace(first_ts=t) for k, t in enumerate(undecided)},
        now=now,
        opts=SimpleNamespace(order_window_ns=window),
    )


def test_low_water_is_the_least_of_the_engine_bounds_and_the_unread_packets() -> None:
    assert low_water(engine(), 500) == 500  # nothing held: the next packet decides
    assert low_water(engine(done=[(300, 1, None)]), 500) == 300
    # a request still pending holds the mark at its start; an answered one does not
    assert low_water(engine(waiting=[(200, True), (400, False)], now=600), 500) == 400
    # one pending longer than the order window no longer holds the output (nor the mark)
    assert low_water(engine(waiting=[(100, False)], now=5000, window=1000), 4500) == 4000
    assert low_water(engine(undecided=[250, 350]), 500) == 250


class _Pipe:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, obj: object) -> None:
        self.sent.append(obj)  # type: ignore[arg-type]

    def send_bytes(self, buf: bytes) -> None:
        self.sent.append(buf)  # type: ignore[arg-type]


def test_a_batch_carries_start_times_and_the_watermark() -> None:
    pipe = _Pipe()
    b = Batcher(pipe, low_water=lambda: 77)
    b.note(SimpleNamespace(start_ts=42))  # type: ignore[arg-type]
    b.write("one")
    b.write("two")  # a second line of the same exchange (events format)
    b.flush()
    # the header, then the lines as one UTF-8 blob (not pickled: the parent splits it)
    assert pipe.sent == [("batch", 2, [], [42, 42], 77), b"one\ntwo"]


def test_an_idle_worker_sends_its_watermark_alone_when_it_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(worker.time, "monotonic", lambda: clock[0])
    mark = [5]
    pipe = _Pipe()
    b = Batcher(pipe, low_water=lambda: mark[0])
    b.flush()  # not idle, nothing waiting: nothing to say
    assert pipe.sent == []
    b.flush(idle=True)
    assert pipe.sent == [("batch", 0, [], [], 5)]
    mark[0] = 6
    clock[0] += 0.05
    b.flush(idle=True)  # moved, but less than 0.1 s since the last word
    clock[0] += 0.1
    b.flush(idle=True)
    b.flush(idle=True)  # not moved since
    assert [m[4] for m in pipe.sent] == [5, 6]


class _Inner:
    linktype = 1
    counters = None

    def __init__(self, packets: list[tuple[int, bytes]]) -> None:
        self.packets = packets

    def read(self, timeout: float | None) -> tuple[int, bytes] | None:
        return self.packets.pop(0) if self.packets else None


def test_the_floor_follows_the_packets_read_then_the_clock_once_caught_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker.time, "time_ns", lambda: 9_000_000_000)
    control = SimpleNamespace(fed=None, max_packets=None)
    src = WorkerSource(_Inner([(1_000, b"a"), (3_000, b"b")]), Batcher(_Pipe()), control)  # type: ignore[arg-type]
    assert src.read(0.1) == (1_000, b"a")
    assert src.floor == 1_000
    src.read(0.1)
    assert src.floor == 3_000
    assert src.read(0) is None
    assert src.floor == 9_000_000_000 - worker.CLOCK_SLACK_NS


def test_a_busy_worker_sends_aged_lines_and_its_watermark_at_packet_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [50.0]
    monkeypatch.setattr(worker.time, "monotonic", lambda: clock[0])
    mark = [1]
    pipe = _Pipe()
    b = Batcher(pipe, low_water=lambda: mark[0])
    b.write("x")
    b.poll()  # a packet read: the line is not 0.1 s old yet
    assert pipe.sent == []
    clock[0] += 0.1
    b.poll()
    assert pipe.sent == [("batch", 1, [], [0], 1), b"x"]
    mark[0] = 2
    clock[0] += 0.05
    b.poll()  # nothing waiting, but the last word is recent
    clock[0] += 0.06
    b.poll()  # a backlog that completes nothing: the watermark alone
    assert pipe.sent[2:] == [("batch", 0, [], [], 2)]


class _Timed(_Inner):
    """An empty socket that records the timeouts it was read with."""

    def __init__(self) -> None:
        super().__init__([])
        self.timeouts: list[float | None] = []

    def read(self, timeout: float | None) -> tuple[int, bytes] | None:
        self.timeouts.append(timeout)
        return None


def test_an_empty_socket_sends_lines_once_they_lingered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker keeping up finds its socket empty after most packets: sending each time made
    batches of a few lines; young lines wait (the read wakes when they are due), old ones go."""
    clock = [10.0]
    monkeypatch.setattr(worker.time, "monotonic", lambda: clock[0])
    pipe = _Pipe()
    batch = Batcher(pipe, low_water=lambda: 3)
    inner = _Timed()
    control = SimpleNamespace(fed=None, max_packets=None)
    src = WorkerSource(inner, batch, control)  # type: ignore[arg-type]
    batch.write("young")
    clock[0] += 0.01
    assert src.read(0.2) is None
    assert pipe.sent == []  # not due yet
    assert inner.timeouts == [0, pytest.approx(worker.BATCH_LINGER_S - 0.01)]
    clock[0] += worker.BATCH_LINGER_S
    assert src.read(0.2) is None
    assert pipe.sent == [("batch", 1, [], [0], 3), b"young"]
    assert inner.timeouts[-1] == 0.2  # nothing waits: the session's own timeout


def test_the_watermark_skips_answered_requests_at_the_top_of_the_heap() -> None:
    e = engine(waiting=[(100, True), (150, True), (300, False)], now=400)
    assert low_water(e, 1000) == 300
    assert [t for t, _k, _m in e.waiting] == [300]  # dropped as the engine itself drops them
