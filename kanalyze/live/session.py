"""Driving the engine from a live source: `LiveSession`.

It feeds packets, expires requests pending longer than the timeout (emitted as
`no_response`), settles acks=0 Produce requests, closes idle connections (memory stays flat
over hours), and hands each exchange to its subscribers in start-time order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kanalyze.capture import Packet
from kanalyze.capture.writer import PcapWriter
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.live.afpacket import CaptureCounters
from kanalyze.live.errors import LiveError


class Source(Protocol):
    """What LiveSession reads packets from (AfPacketSource, or a replay in tests)."""

    linktype: int
    counters: CaptureCounters

    def read(self, timeout: float | None) -> tuple[int, bytes] | None: ...

    def update_counters(self) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class LiveOptions:
    engine: EngineOptions = field(default_factory=EngineOptions)
    pending_timeout_s: float = 60.0  # requests unanswered this long become `no_response`
    idle_timeout_s: float = 600.0  # connections silent this long are closed and freed
    acks0_grace_s: float = 5.0  # acks=0 Produce requests unanswered this long are settled
    tick_s: float = 1.0  # housekeeping period
    drain_s: float = 3.0  # at most this long reading what the kernel captured before the stop
    duration_s: float | None = None
    max_packets: int | None = None


@dataclass(slots=True)
class LiveStats:
    started: float = 0.0
    stopped: float = 0.0
    exchanges: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    idle_closed: int = 0
    stop_reason: str = ""


class LiveSession:
    """Packets from a source through the engine to subscribers, until stopped.

    `source` needs `read(timeout) -> (ts_ns, bytes) | None`, `linktype`, `counters`,
    `update_counters()` and `close()` (AfPacketSource, or a fake in tests).
    Subscribers are called in the capture thread, in start-time order; `on_tick`
    callbacks get the session once per housekeeping tick (for gauges and charts)."""

    def __init__(
        self, source: Source, opts: LiveOptions | None = None, pcap: PcapWriter | None = None
    ) -> None:
        self.source = source
        self.opts = opts or LiveOptions()
        self.pcap = pcap
        self.stats = LiveStats()
        self._subscribers: list[Callable[[Exchange], None]] = []
        self._tickers: list[Callable[[LiveSession], None]] = []
        self._stop = threading.Event()
        self._stop_ns = 0
        self._hurry = False
        self.failed = False  # the capture ended on an error (the interface went away)
        # refreshed every tick, safe to read from other threads (metrics endpoint, TUI)
        self.pending = 0
        self.open_connections = 0
        eo = self.opts.engine
        if eo.pending_timeout_ns is None:
            eo.pending_timeout_ns = int(self.opts.pending_timeout_s * 1e9)
        self.engine = Engine(self._emit, eo)

    def subscribe(self, fn: Callable[[Exchange], None]) -> None:
        self._subscribers.append(fn)

    def on_tick(self, fn: Callable[[LiveSession], None]) -> None:
        self._tickers.append(fn)

    def stop(self, reason: str = "stopped", at_ns: int | None = None) -> None:
        """Ask the loop to finish (safe from signal handlers and other threads). `at_ns`: the
        stop time (kernel clock) packets are drained up to, default now (`--workers` share
        one)."""
        if not self._stop.is_set():
            self.stats.stop_reason = reason
            self._stop_ns = time.time_ns() if at_ns is None else at_ns
        else:
            self._hurry = True  # asked twice: stop reading the kernel's backlog
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _emit(self, ex: Exchange) -> None:
        st = self.stats
        st.exchanges += 1
        st.by_status[ex.status] = st.by_status.get(ex.status, 0) + 1
        for fn in self._subscribers:
            fn(ex)

    def housekeeping(self, now_ns: int) -> None:
        o = self.opts
        eng = self.engine
        # acks=0 Produce requests: held, they would hold back every later exchange in the
        # output for the order window
        eng.settle_unanswered(now_ns - int(min(o.pending_timeout_s, o.acks0_grace_s) * 1e9))
        eng.expire(now_ns - int(o.pending_timeout_s * 1e9))
        self.stats.idle_closed += eng.expire_idle(now_ns - int(o.idle_timeout_s * 1e9))
        self.pending = eng.pending_count
        self.open_connections = eng.open_count
        self.source.update_counters()
        if self.pcap is not None:
            self.pcap.flush()
        for fn in self._tickers:
            fn(self)

    def run(self) -> LiveStats:
        """Capture until stopped, `duration_s` elapsed or `max_packets` read; then drain what
        the kernel still holds, close the engine (flushing every exchange) and return."""
        o = self.opts
        src, feed, pcap = self.source, self.engine.feed, self.pcap
        st = self.stats
        st.started = time.time()
        deadline = None if o.duration_s is None else time.monotonic() + o.duration_s
        next_tick = time.monotonic() + o.tick_s
        n = 0
        drained = True  # the last read found the kernel queue empty
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self.stop("duration reached")
                    break
                if now >= next_tick:
                    # time goes by the wall clock when caught up, by the packets when behind
                    # (a backlog must not make answers still queued in the kernel look late)
                    self.housekeeping(time.time_ns() if drained else self.engine.now)
                    next_tick = now + o.tick_s
                wait = min(0.2, max(0.0, next_tick - now))
                try:
                    got = src.read(wait)
                except LiveError as e:  # the interface is gone: keep what was captured
                    self.stop(str(e))
                    self.failed = True
                    break
                drained = got is None
                if got is None:
                    continue
                n += 1
                ts, data = got
                if pcap is not None:
                    pcap.write(ts, data)
                feed(Packet(n, ts, src.linktype, data))
                if o.max_packets is not None and n >= o.max_packets:
                    self.stop("packet limit reached")
                    break
            if o.max_packets is None or n < o.max_packets:
                # what the kernel captured before the stop belongs to the run (not what traffic
                # still arriving adds: the kernel timestamps tell them apart); bounded in time
                stop_ns = self._stop_ns or time.time_ns()
                drain_until = time.monotonic() + o.drain_s
                while time.monotonic() < drain_until and not self._hurry and not self.failed:
                    got = src.read(0)
                    if got is None or got[0] > stop_ns:
                        break
                    n += 1
                    if pcap is not None:
                        pcap.write(*got)
                    feed(Packet(n, got[0], src.linktype, got[1]))
        finally:
            src.close()
            try:
                self.engine.close()
            finally:
                if pcap is not None:
                    pcap.close()
                st.stopped = time.time()
        return st
