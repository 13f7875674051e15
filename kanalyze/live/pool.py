"""The parent of `kanalyze live --workers N`: forks one worker per fanout socket and merges.

The workers are forked (not spawned): the sockets, already in their fanout group, and the
decode context pass as they are, and a worker is capturing milliseconds after the start. The
parent merges the workers' lines in start-time order (`kanalyze.live.merge`: each worker's
lines are in start-time order and carry the worker's watermark; a line waits at most a second
for a silent worker), applies the metric observations (as they arrive) to the one `Metrics`
it serves, keeps each worker's latest `LiveReport`, and decides when to stop: a
signal, the duration, the output closing, or a worker stopping on its own (packet limit, the
interface gone) stops them all at one shared stop time.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING

from kanalyze.live.merge import HOLD_S, Line, StartMerge
from kanalyze.live.report import LiveReport, merged
from kanalyze.live.worker import BY_PARENT, Control, Subscriber, run_worker

if TYPE_CHECKING:
    from kanalyze.capture.writer import PcapWriter
    from kanalyze.live.afpacket import AfPacketSource
    from kanalyze.live.session import LiveOptions
    from kanalyze.metrics import Observation


@dataclass(slots=True)
class PoolResult:
    total: LiveReport
    workers: list[LiveReport]
    lost: list[int] = field(default_factory=list)  # workers that ended without a final report


class WorkerPool:
    """N forked capture workers, one per source; `run()` merges until they have all ended."""

    def __init__(
        self,
        sources: list[AfPacketSource],
        opts: LiveOptions,
        subscriber: Subscriber,
        pcaps: list[PcapWriter | None] | None = None,
        hold_s: float = HOLD_S,
    ) -> None:
        self.ctx = mp.get_context("fork")
        self.sources = sources
        self.opts = opts
        self.subscriber = subscriber
        self.pcaps = pcaps or [None] * len(sources)
        self.control = Control(
            stopped=self.ctx.RawValue("b", 0),
            hurried=self.ctx.RawValue("b", 0),
            stop_ns=self.ctx.RawValue("q", 0),
            lock=self.ctx.RLock(),  # re-entrant: stop() may run in a signal handler
            fed=self.ctx.Value("q", 0) if opts.max_packets is not None else None,
            max_packets=opts.max_packets,
        )
        self.reports = [LiveReport() for _ in sources]
        self.reason = ""  # why the parent stopped the workers ("" if it did not)
        self.conns: list[Connection] = []
        self.procs: list[mp.process.BaseProcess] = []
        self.started = 0.0
        self.merge = StartMerge(len(sources), hold_s)

    # -- starting -------------------------------------------------------------------------------
    def start(self) -> None:
        """Fork the workers; the parent keeps no capture socket (each worker owns its own)."""
        self.started = time.time()
        for pcap in self.pcaps:
            if pcap is not None:
                pcap.flush()  # the header: written once, not once per process
        for i in range(len(self.sources)):
            reader, writer = self.ctx.Pipe(duplex=False)
            _widen(writer)
            proc = self.ctx.Process(
                target=self._worker_main,
                args=(i, reader, writer),
                name=f"kanalyze-live-{i}",
                daemon=True,
            )
            proc.start()
            writer.close()
            self.conns.append(reader)
            self.procs.append(proc)
        for src in self.sources:
            src.sock.close()  # the workers' copies stay open (closing does not read counters)
        for p in self.pcaps:
            if p is not None:
                p.f.close()

    def _worker_main(self, index: int, own_reader: Connection, conn: Connection) -> None:
        for j, other in enumerate(self.sources):
            if j != index:
                other.sock.close()
        # only the parent may hold the read ends (its own and the earlier workers'), or a
        # worker would not see the parent go away (its sends would block, not fail)
        for reader in [*self.conns, own_reader]:
            reader.close()
        # the parent keeps the time; the shared count keeps the packet limit
        n = len(self.sources)
        engine = replace(self.opts.engine, id_first=index + 1, id_step=n)  # unique ids
        wopts = replace(self.opts, engine=engine, duration_s=None, max_packets=None)
        run_worker(
            self.sources[index], conn, self.control, wopts, self.subscriber, self.pcaps[index]
        )

    # -- stopping -------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Stop every worker (safe from a signal handler); a second call: stop draining."""
        if not self.control.stopping:
            self.reason = reason
            self.control.request_stop(time.time_ns())
        else:
            self.control.hurry()

    @property
    def stopping(self) -> bool:
        return self.control.stopping

    # -- merging --------------------------------------------------------------------------------
    def run(
        self,
        on_lines: Callable[[list[Line]], None],
        on_observations: Callable[[list[Observation]], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        duration_s: float | None = None,
    ) -> PoolResult:
        """Merge until every worker has sent its final report (or died); then join them.
        `on_lines` gets the merged lines as views of UTF-8 bytes, without their newlines."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        alive = {c: i for i, c in enumerate(self.conns)}
        done: set[int] = set()
        next_tick = time.monotonic() + self.opts.tick_s
        merge = self.merge
        while alive:
            due = merge.due_in(time.monotonic())
            for c in wait(list(alive), timeout=0.2 if due is None else min(0.2, due + 0.001)):
                assert isinstance(c, Connection)
                i = alive[c]
                try:
                    msg = c.recv()
                    # a batch's lines follow its header: one blob, split here, never decoded
                    blob = c.recv_bytes() if msg[0] == "batch" and msg[1] else None
                except (EOFError, OSError):
                    del alive[c]
                    merge.end(i)
                    if i not in done:  # died without its final report: stop the others
                        self.reports[i].failed = True
                        self.stop(f"worker {i} ended unexpectedly")
                    continue
                kind = msg[0]
                if kind == "batch":
                    _kind, _n, obs, starts, mark = msg
                    lines = _split(blob) if blob is not None else []
                    merge.add(i, lines, starts, mark, time.monotonic())
                    if obs and on_observations is not None:
                        on_observations(obs)
                elif kind in ("report", "done"):
                    self.reports[i] = msg[1]
                    if kind == "done":
                        done.add(i)
                        merge.end(i)
                        if not self.stopping:  # it stopped on its own: the others follow
                            self.control.request_stop(time.time_ns())
            out = merge.take(time.monotonic())
            if out:
                on_lines(out)
            now = time.monotonic()
            if deadline is not None and now >= deadline and not self.stopping:
                self.stop("duration reached")
            if now >= next_tick:
                next_tick = now + self.opts.tick_s
                if on_tick is not None:
                    on_tick()
        out = merge.drain()
        if out:
            on_lines(out)
        for p in self.procs:
            p.join(10)
            if p.exitcode is None:
                p.kill()
                p.join()
        lost = [i for i in range(len(self.procs)) if i not in done]
        return PoolResult(self.total(), list(self.reports), lost)

    def total(self) -> LiveReport:
        """The workers' latest reports added up, with the run's stop reason."""
        t = merged(self.reports)
        t.stop_reason = self.reason or next(
            (r.stop_reason for r in self.reports if r.stop_reason not in ("", BY_PARENT)),
            "stopped",
        )
        if not t.started:
            t.started = self.started
        return t


PIPE_BYTES = 1 << 20  # a batch's worth (BATCH_BYTES): written without waiting for the parent
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Python 3.10+ on Linux)


def _widen(conn: Connection) -> None:
    """Give a worker's pipe room for a whole batch. With the default 64 KiB a 1 MiB batch
    took 16 rounds of the worker blocking and the parent waking to read (a worker spent 1.3 s
    of a 12 s replay blocked in write); where the size cannot be raised, it stays."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(conn.fileno(), F_SETPIPE_SZ, PIPE_BYTES)


def _split(blob: bytes) -> list[Line]:
    """A batch's lines: views of the blob (its newlines between them), not copies."""
    view = memoryview(blob)
    out: list[Line] = []
    find = blob.find
    start = 0
    while (end := find(b"\n", start)) >= 0:
        out.append(view[start:end])
        start = end + 1
    out.append(view[start:])
    return out
