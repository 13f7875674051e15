"""One capture worker of `kanalyze live --workers N`: a forked process with its own engine on one
socket of the fanout group.

It sends the parent, over a pipe, batches of (NDJSON lines, metric observations) and once per
tick and at the end its `LiveReport`. A batch is a small pickled header (line count,
observations, start times, watermark) and, with lines, one UTF-8 blob of them joined by
newlines: the parent splits it and writes the bytes as they are, so a line is encoded once and
never pickled (pickling and unpickling the lines cost the two processes 1.3 ms per MB of them).
Batches go out when 256 items or 1 MiB of lines are waiting, when the oldest is 0.1 s old
(checked at each line and each packet read), when the socket has had nothing to read while the
oldest waited 0.05 s, and at every tick. Sending at every empty read instead made batches of a
few lines (a worker keeping up finds its socket empty after most packets), and their fixed costs
(a watermark, two pipe writes, a wake-up of the parent) were part of why a pool of one worker
cost 1.25x the CPU per MB of one process (docs/performance.md). Each batch carries the lines'
start times and the worker's watermark (`low_water`), by which the parent merges the workers'
lines in start-time order (`kanalyze.live.merge`); a worker with nothing to send sends its
watermark alone, at most every 0.1 s, so it holds the others' lines back no longer. Signals are
the parent's business: a worker ignores SIGINT/SIGTERM (a terminal's Ctrl-C reaches the whole
process group) and stops when the shared `Control` says so, draining its socket up to the shared
stop time. If the parent goes away (the pipe breaks) it stops at once.
"""

from __future__ import annotations

import heapq
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import RLock
from typing import TYPE_CHECKING, Protocol

from kanalyze.correlation import Exchange
from kanalyze.live.report import LiveReport, of_session
from kanalyze.live.session import LiveOptions, LiveSession, Source

if TYPE_CHECKING:
    from kanalyze.capture.writer import PcapWriter
    from kanalyze.engine import Engine
    from kanalyze.live.afpacket import CaptureCounters
    from kanalyze.metrics import Observation

BATCH_ITEMS = 256
BATCH_BYTES = 1 << 20  # lines of big Fetch responses: keep both sides' buffers small
BATCH_AGE_S = 0.1
BATCH_LINGER_S = 0.05  # socket empty: lines this old go out (younger ones wait for company)
BY_PARENT = "stopped with the other workers"
WATCH_S = 0.02  # how often a worker's watcher looks at the shared stop flags
# a packet the kernel stamped just before a read found the socket empty may show up after it
CLOCK_SLACK_NS = 5_000_000


@dataclass(slots=True)
class Control:
    """What the parent and the workers share (made before the fork).

    The flags are lock-free shared integers, polled by each worker's watcher thread: a
    multiprocessing `Event` is a lock and a condition, and a worker process that ends while its
    watcher thread holds that lock (waking from `wait`) leaves it held for good, so the parent
    hung on the next `is_set()`. The one lock here is taken only by main threads (a request to
    stop) and never by a thread that can die with its process."""

    stopped: Synchronized[int]  # raw (no lock): 1 once a stop was requested
    hurried: Synchronized[int]  # raw: 1 after a second SIGINT (stop draining)
    stop_ns: Synchronized[int]  # raw: the shared stop time, written before `stopped`
    lock: RLock  # orders concurrent stop requests: the first one's time wins
    fed: Synchronized[int] | None  # packets fed, all workers (with --max-packets)
    max_packets: int | None

    @property
    def stopping(self) -> bool:
        return bool(self.stopped.value)

    def request_stop(self, at_ns: int) -> None:
        with self.lock:
            if not self.stopped.value:
                self.stop_ns.value = at_ns
                self.stopped.value = 1

    def hurry(self) -> None:
        self.hurried.value = 1


class _Sink(Protocol):
    def send(self, obj: object) -> None: ...

    def send_bytes(self, buf: bytes) -> None: ...


class Batcher:
    """Lines and observations on their way to the parent; an `NdjsonOutput` and a `Metrics`
    look-alike for the exchange writer (`write(line)`, `broken`, `observe(ex, d)`)."""

    def __init__(self, conn: _Sink, low_water: Callable[[], int | None] | None = None) -> None:
        self.conn = conn
        self.lines: list[str] = []
        self.starts: list[int] = []  # per line, its exchange's start time
        self.observations: list[Observation] = []
        self.first = 0.0
        self.size = 0  # characters of the waiting lines
        self.broken = False  # the parent is gone
        self.on_broken: Callable[[], None] | None = None
        self.low_water = low_water  # the worker's watermark (None: no promise)
        self.start_ts = 0  # of the exchange being written (`note`)
        self.sent = 0.0  # when the last batch went out
        self.sent_mark: int | None = None

    def note(self, ex: Exchange) -> None:
        """Subscribed before the writer: the start time of the lines `ex` writes."""
        self.start_ts = ex.start_ts

    def write(self, line: str) -> None:
        if not self.lines and not self.observations:
            self.first = time.monotonic()
        self.lines.append(line)
        self.starts.append(self.start_ts)
        self.size += len(line)
        self._maybe_flush()

    def observe(self, ex: Exchange, d: dict) -> None:
        from kanalyze.metrics import observation

        if not self.lines and not self.observations:
            self.first = time.monotonic()
        self.observations.append(observation(ex, d))
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        n = len(self.lines) + len(self.observations)
        if (
            n >= BATCH_ITEMS
            or self.size >= BATCH_BYTES
            or time.monotonic() - self.first >= BATCH_AGE_S
        ):
            self.flush()

    def linger(self) -> float | None:
        """Seconds until waiting lines are due on an empty socket (<= 0: now); None: no line
        or observation waits."""
        if not self.lines and not self.observations:
            return None
        return self.first + BATCH_LINGER_S - time.monotonic()

    def poll(self) -> None:
        """For every packet read: lines waiting 0.1 s go out, and with none waiting the
        watermark alone every 0.1 s (a worker busy with a backlog that completes nothing
        would otherwise hold the others' lines back until it writes or catches up)."""
        now = time.monotonic()
        if self.lines or self.observations:
            if now - self.first >= BATCH_AGE_S:
                self.flush()
        elif now - self.sent >= BATCH_AGE_S:
            self.flush(idle=True)

    def flush(self, idle: bool = False) -> None:
        """Send what is waiting, with the watermark; `idle` (the socket is empty): with
        nothing waiting, the watermark alone when it moved and 0.1 s went by."""
        low = self.low_water
        if self.lines or self.observations:
            mark = low() if low is not None else None
        else:
            if not idle or low is None or time.monotonic() - self.sent < BATCH_AGE_S:
                return
            mark = low()
            if mark == self.sent_mark:
                return
        lines, starts, obs = self.lines, self.starts, self.observations
        self.lines, self.starts, self.observations, self.size = [], [], [], 0
        self.sent, self.sent_mark = time.monotonic(), mark
        self.send(("batch", len(lines), obs, starts, mark))
        if lines:
            self.send("\n".join(lines).encode(), raw=True)

    def send(self, msg: object, raw: bool = False) -> None:
        """`msg` pickled, or with `raw` the bytes `msg` as they are."""
        if self.broken:
            return
        try:
            if raw:
                self.conn.send_bytes(msg)  # type: ignore[arg-type]
            else:
                self.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self.broken = True
            if self.on_broken is not None:
                self.on_broken()


class WorkerSource:
    """The worker's socket as the session sees it: flushes the batch whenever the socket has
    nothing waiting, and with --max-packets claims each packet from the shared count (exactly
    N packets are fed across the workers)."""

    def __init__(self, inner: Source, batch: Batcher, control: Control) -> None:
        self.floor = 0  # no packet read later is older (kernel time, ns)
        self.inner = inner
        self.batch = batch
        self.control = control
        self.linktype = inner.linktype
        self.counters: CaptureCounters = inner.counters  # the same object, updated by `inner`
        self.session: LiveSession | None = None

    def read(self, timeout: float | None) -> tuple[int, bytes] | None:
        before = time.time_ns() - CLOCK_SLACK_NS
        got = self.inner.read(0)
        if got is None:
            # caught up: what the kernel stamps from now on is no older than the clock
            self.floor = max(self.floor, before)
            batch = self.batch
            due = batch.linger()
            if due is None or due <= 0:
                batch.flush(idle=True)
            elif timeout is None or timeout > due:
                timeout = due  # wake to send them if no packet comes first
            if timeout == 0:
                return None
            got = self.inner.read(timeout)
            if got is None:
                return None
        if got[0] > self.floor:  # behind (or a packet now): the next is no older than this one
            self.floor = got[0]
        self.batch.poll()
        c = self.control
        if c.fed is not None and c.max_packets is not None:
            with c.fed.get_lock():
                if c.fed.value >= c.max_packets:
                    self.counters.packets -= 1  # read but not fed: not captured
                    self.counters.bytes -= len(got[1])
                    self._limit_reached()
                    return None
                c.fed.value += 1
        return got

    def _limit_reached(self) -> None:
        s = self.session
        if s is not None and not s.stopping:
            s.stop("packet limit reached")
            self.control.request_stop(time.time_ns())

    def update_counters(self) -> None:
        self.inner.update_counters()

    def close(self) -> None:
        self.inner.close()


def low_water(engine: Engine, floor: int) -> int:
    """No exchange `engine` outputs later starts before this: it is at most `floor` (the
    packets not fed yet) and the engine's own bound (its release rule: held exchanges, the
    oldest pending request unless it waited the order window, undecided connections)."""
    mark = floor
    if engine.done:
        mark = min(mark, engine.done[0][0])
    # the oldest pending request: the heap's top once the answered ones there are dropped
    # (the engine cleans it the same lazy way); scanning the heap cost O(requests) a batch
    waiting = engine.waiting
    while waiting and waiting[0][2].done:
        heapq.heappop(waiting)
    if waiting:
        mark = min(mark, max(waiting[0][0], engine.now - engine.opts.order_window_ns))
    if engine.undecided:
        mark = min(mark, min(u.first_ts for u in engine.undecided.values()))
    return mark


def _watch(control: Control, session: LiveSession) -> None:
    """Stop the session when the parent (or another worker) says so; hurry on a second word.
    Polls the lock-free flags (see `Control`)."""
    while not control.stopping:
        time.sleep(WATCH_S)
    if not session.stopping:
        session.stop(BY_PARENT, at_ns=int(control.stop_ns.value))
    while not control.hurried.value:
        time.sleep(WATCH_S)
    session.stop(BY_PARENT)  # the second call: stop reading the kernel's backlog


Subscriber = Callable[[LiveSession, Batcher], Callable[[Exchange], None]]


def run_worker(
    source: Source,
    conn: Connection,
    control: Control,
    opts: LiveOptions,
    subscriber: Subscriber,
    pcap: PcapWriter | None = None,
) -> None:
    """The body of a worker process: capture until stopped, then send the final report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    batch = Batcher(conn)
    wsrc = WorkerSource(source, batch, control)
    session = LiveSession(wsrc, opts, pcap)
    wsrc.session = session
    batch.low_water = lambda: low_water(session.engine, wsrc.floor)
    session.subscribe(batch.note)  # first: the start time of the lines the writer writes
    session.subscribe(subscriber(session, batch))

    def parent_gone() -> None:
        session.stop("the parent went away")
        session.stop()  # and do not drain

    def tick(s: LiveSession) -> None:
        batch.flush()
        batch.send(("report", of_session(s)))

    batch.on_broken = parent_gone
    session.on_tick(tick)
    threading.Thread(target=_watch, args=(control, session), daemon=True).start()
    try:
        session.run()
    finally:
        if session.failed:  # the interface went away: the others stop too
            control.request_stop(time.time_ns())
        report: LiveReport = of_session(session)
        batch.flush()
        batch.send(("done", report))
        conn.close()
