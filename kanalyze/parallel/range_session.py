"""`--jobs N` for the commands that consume exchanges (`report`, `stats`): a `Session` whose
exchanges come from byte ranges run in parallel, stitched back into the one-process order.

Each range's engine (range 0 in this process, the others in forked workers, as for `export`)
writes every exchange it completes, pickled, into a scratch file; the stitch
(`kanalyze.parallel.stitch`) says which of them stand, in what order and with which
connection id; `exchanges()` then reads them back in that order, connection ids replaced by
the run's. The consumers (the report's analyzers, the stats collectors, body decoding and
topic names learned in wire order) are the unchanged one-process code fed the same exchanges
in the same order, so their output is the same by construction: what runs in parallel is the
engine (reassembly, framing, correlation), what stays serial is decoding and analysis.

What the consumers read besides exchanges: the packet count and files (`capture`), the bytes
skipped and lost in gaps (`engine.stats`, filled from the stitch; only those and the number of
Kafka connections are meaningful, which is why `summary`, which prints the engine's peaks and
stream events, stays one process), and `on_packet` (the stats `conv` table), fed by one plain
walk over the packets in this process. When the stitch refuses, or a worker fails, the
session runs as one process (`Session.exchanges`): nothing has been yielded by then.
"""

from __future__ import annotations

import mmap
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureStats, read_captures
from kanalyze.correlation import ConnInfo, Exchange, Message
from kanalyze.engine import Engine
from kanalyze.parallel import range_stats
from kanalyze.parallel.range_engine import FINAL
from kanalyze.parallel.range_export import RANGE_BYTES_ENV, RangeOutput, RangeTask, run_tasks
from kanalyze.parallel.ranges import plan_ranges, run_range
from kanalyze.parallel.stitch import Stitched, Unstitchable, stitch
from kanalyze.session import Session

# tests and benchmarks read these after a run
last_fallback: str | None = None  # why the last run was one process (None: it was stitched)
last_ranges = 0  # how many ranges the last stitched run had


def _owned(msg: Message | None) -> Message | None:
    """The message with its frame's bytes its own (a frame may be a view of the mapped file,
    which does not pickle)."""
    if msg is None or type(msg.pdu.data) is bytes:
        return msg
    return replace(msg, pdu=msg.pdu._replace(data=bytes(msg.pdu.data)))


def _moved(msg: Message | None, by: int) -> Message | None:
    if msg is None or not by:
        return msg
    msg.pdu = msg.pdu._replace(offset=msg.pdu.offset + by)
    return msg


def collect_range(task: RangeTask) -> RangeOutput:
    """One range's exchanges, pickled one after the other into `task.out_path` (the
    `RangeOutput.lines` entries give each one's offset, size and local connection id)."""
    items: list[tuple[int, int, int]] = []
    pos = 0
    dumps = pickle.dumps
    with open(task.out_path, "wb") as out:

        def on_exchange(ex: Exchange) -> None:
            nonlocal pos
            if ex.request is not None and type(ex.request.pdu.data) is not bytes or \
                    ex.response is not None and type(ex.response.pdu.data) is not bytes:
                ex = ex._replace(request=_owned(ex.request), response=_owned(ex.response))
            blob = dumps(ex, pickle.HIGHEST_PROTOCOL)
            items.append((pos, len(blob), ex.conn.id))
            out.write(blob)
            pos += len(blob)

        res = run_range(task.rng, task.opts, on_exchange)
    return RangeOutput(res, items)


@dataclass(slots=True)
class RangeSession(Session):
    """`Session` with `jobs` processes over byte ranges (see the module docstring).
    `processes=False` runs the ranges one after the other in this process (the tests' way to
    cut a capture into many ranges cheaply). `hold` is not called: the exchanges are read
    back one at a time, nothing waits in memory."""

    jobs: int = 1
    processes: bool = True

    def exchanges(self) -> Iterator[Exchange]:
        global last_fallback, last_ranges
        last_fallback, last_ranges = None, 0
        with tempfile.TemporaryDirectory(prefix="kanalyze-jobs-") as tmp:
            got = self._stitched(tmp)
            if isinstance(got, str):
                last_fallback = got
                yield from Session.exchanges(self)
                return
            outs, st, paths, shifts = got
            last_ranges = len(outs)
            yield from _replay(outs, st, paths, shifts, self._tap())

    def _stitched(self, tmp: str) -> tuple[list[RangeOutput], Stitched, list[str],
                                           dict[tuple[int, int], tuple[int, int]]] | str:
        """The ranges run and stitched, or why not (then this is a one-process run)."""
        range_bytes = int(os.environ.get(RANGE_BYTES_ENV) or 0) or None
        ranges = plan_ranges(self.paths, self.jobs, range_bytes, bodies=False)
        if ranges is None:
            return "the input cannot be cut into ranges"
        ctx = DecodeContext()  # unused: the ranges decode no body
        tasks = [RangeTask(r, self.opts, ctx, True, os.path.join(tmp, f"r{r.index}.pickle"))
                 for r in ranges]
        try:
            outs = run_tasks(tasks, self.jobs - 1 if self.processes else None, collect_range)
        except OSError as e:
            return f"workers failed: {e}"
        try:
            st = stitch([o.result for o in outs], self.opts)
        except Unstitchable as e:
            return str(e)
        try:
            self._totals(outs, st)
            shifts = range_stats.offset_shifts([o.result for o in outs], st)
        except Unstitchable as e:
            return str(e)
        self.capture = CaptureStats(files=[self.paths[0]], packets=sum(r.count for r in ranges))
        return outs, st, [t.out_path for t in tasks], shifts

    def _totals(self, outs: list[RangeOutput], st: Stitched) -> None:
        """`engine.stats` as one engine would have counted them (`range_stats`; the peaks
        excepted); raises `Unstitchable` when they cannot be had."""
        engine = Engine(lambda _ex: None, self.opts)
        engine.stats = range_stats.engine_stats([o.result for o in outs], st)
        self.engine = engine

    def _tap(self) -> Callable[[int], None] | None:
        """`on_packet` kept in step with the exchanges as in one process: a call with packet
        number P shows it every packet up to P (before an exchange released after P)."""
        if self.on_packet is None:
            return None
        tap = self.on_packet
        packets = read_captures(self.paths, CaptureStats(), views=True)
        seen = 0

        def upto(no: int) -> None:
            nonlocal seen
            while seen < no:
                pkt = next(packets, None)
                if pkt is None:
                    seen = no
                    return
                tap(pkt)
                seen = pkt.no

        return upto


def _replay(outs: list[RangeOutput], st: Stitched, paths: list[str],
            shifts: dict[tuple[int, int], tuple[int, int]],
            tap: Callable[[int], None] | None) -> Iterator[Exchange]:
    """The exchanges that stand, in the stitched order, with the run's connection ids."""
    maps: list[mmap.mmap | None] = []
    try:
        for p in paths:
            with open(p, "rb") as f:
                size = f.seek(0, 2)
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None)
        infos: dict[tuple[int, int], ConnInfo] = {}
        loads = pickle.loads
        for (r, i), at in zip(st.sequence, st.released, strict=True):
            if tap is not None:
                tap(at)
            off, size, lid = outs[r].lines[i]
            m = maps[r]
            assert m is not None
            ex: Exchange = loads(m[off : off + size])
            info = infos.get((r, lid))
            if info is None:
                info = infos[(r, lid)] = replace(ex.conn, id=st.ids[r][lid])
            shift = shifts.get((r, lid))
            if shift is not None:  # stream offsets as the run counts them
                ex = ex._replace(request=_moved(ex.request, shift[0]),
                                 response=_moved(ex.response, shift[1]))
            yield ex._replace(conn=info)
        if tap is not None:
            tap(FINAL)
    finally:
        for m in maps:
            if m is not None:
                m.close()


__all__ = ["RangeSession", "collect_range"]
