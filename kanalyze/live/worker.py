"""One capture worker of `kanalyze live --workers N`: a forked process with its own engine on one
socket of the fanout group.

It sends the parent, over a pipe, batches of (NDJSON lines, metric observations) and once per
tick and at the end its `LiveReport`. Batches go out when 256 items or 1 MiB of lines are
waiting, when the oldest is 0.1 s old, when the socket has nothing to read, and at every
tick, so a line waits little longer than in one process. Signals are the parent's business: a
worker ignores SIGINT/SIGTERM (a terminal's Ctrl-C reaches the whole process group) and stops
when the shared `Control` says so, draining its socket up to the shared stop time. If the
parent goes away (the pipe breaks) it stops at once.
"""

from __future__ import annotations

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
    from kanalyze.live.afpacket import CaptureCounters
    from kanalyze.metrics import Observation

BATCH_ITEMS = 256
BATCH_BYTES = 1 << 20  # lines of big Fetch responses: keep both sides' buffers small
BATCH_AGE_S = 0.1
BY_PARENT = "stopped with the other workers"
WATCH_S = 0.02  # how often a worker's watcher looks at the shared stop flags


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


class Batcher:
    """Lines and observations on their way to the parent; an `NdjsonOutput` and a `Metrics`
    look-alike for the exchange writer (`write(line)`, `broken`, `observe(ex, d)`)."""

    def __init__(self, conn: _Sink) -> None:
        self.conn = conn
        self.lines: list[str] = []
        self.observations: list[Observation] = []
        self.first = 0.0
        self.size = 0  # characters of the waiting lines
        self.broken = False  # the parent is gone
        self.on_broken: Callable[[], None] | None = None

    def write(self, line: str) -> None:
        if not self.lines and not self.observations:
            self.first = time.monotonic()
        self.lines.append(line)
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

    def flush(self) -> None:
        if not self.lines and not self.observations:
            return
        lines, obs = self.lines, self.observations
        self.lines, self.observations, self.size = [], [], 0
        self.send(("batch", lines, obs))

    def send(self, msg: object) -> None:
        if self.broken:
            return
        try:
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
        self.inner = inner
        self.batch = batch
        self.control = control
        self.linktype = inner.linktype
        self.counters: CaptureCounters = inner.counters  # the same object, updated by `inner`
        self.session: LiveSession | None = None

    def read(self, timeout: float | None) -> tuple[int, bytes] | None:
        got = self.inner.read(0)
        if got is None:
            self.batch.flush()
            if timeout == 0:
                return None
            got = self.inner.read(timeout)
            if got is None:
                return None
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
