"""`export --jobs N` over byte ranges: each range's exchanges encoded as NDJSON lines into a
scratch file by its worker (range 0 in the calling process), the stitch choosing which lines
stand and in what order, the lines copied out with the run's connection ids. Into a regular
output file, range 0 writes straight into it and each process copies its own ranges' lines to
their final offsets (`place.py`). None (nothing written) when the stitch refuses: the caller
runs one process.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import BinaryIO

from dissectors.context import DecodeContext
from kanalyze import gcyoung as young
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions, EngineStats
from kanalyze.export import ExchangeEncoder
from kanalyze.held import HeldFrames
from kanalyze.parallel import place
from kanalyze.parallel.merge import names_agree, write_spliced
from kanalyze.parallel.range_stats import other_flows
from kanalyze.parallel.ranges import Range, RangeResult, run_range
from kanalyze.parallel.stitch import Stitched, Unstitchable, stitch
from kanalyze.parallel.worker import LINE_PREFIX, RecordingNames

RANGE_BYTES_ENV = "KANALYZE_RANGE_BYTES"  # tests: cut into ranges of this many bytes


@dataclass(slots=True)
class RangeTask:
    rng: Range
    opts: EngineOptions
    ctx: DecodeContext
    header_only: bool
    out_path: str


@dataclass(slots=True)
class RangeOutput:
    result: RangeResult
    lines: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, size, local id)
    # per exchange index: (topic-id names its decode read, names it taught), when any
    names: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)
    bad_line: bool = False


def export_range(task: RangeTask, sink: BinaryIO | None = None) -> RangeOutput:
    """One range's lines into `task.out_path`, or into `sink` (range 0 straight into the
    output file), offsets from where it starts (spawn-safe: picklable in and out)."""
    names = RecordingNames(task.ctx.topic_names)
    enc = ExchangeEncoder(replace(task.ctx, topic_names=names), decode=not task.header_only)
    line_of = enc.line_bytes
    lines: list[tuple[int, int, int]] = []
    recorded: dict[int, tuple[dict[str, str | None], dict[str, str]]] = {}
    pos = 0
    bad = False
    with open(task.out_path, "wb") if sink is None else contextlib.nullcontext(sink) as out:
        write = out.write

        def on_exchange(ex: Exchange) -> None:
            nonlocal pos, bad
            if len(lines) % young.EVERY == young.EVERY - 1:
                gc.collect(1)  # the young generations, as the one-process export (gcyoung)
            line = line_of(ex)  # and the newline written apart: a line may be megabytes
            if names.reads or names.writes:  # (empty before each exchange)
                recorded[len(lines)] = (names.reads, names.writes)
                names.reads, names.writes = {}, {}
            cid = ex.conn.id
            bad = bad or not line.startswith(LINE_PREFIX + b"%d," % cid)
            size = len(line) + 1
            lines.append((pos, size, cid))
            write(line)
            write(b"\n")
            pos += size

        paused = gc.isenabled()
        gc.disable()  # as `gcyoung.young_only` in the one-process export
        # held frames parked (full) or dropped (header-only) as one process's Session does:
        # kept in memory, the held 4 MB blocks of a range cost page faults and memory
        held = HeldFrames(wanted=not task.header_only)
        try:
            res = run_range(task.rng, task.opts, on_exchange, held)
        finally:
            held.close()
            if paused:
                gc.enable()
    return RangeOutput(res, lines, recorded, bad)


def check_names(outs: Sequence[RangeOutput], st: Stitched, preloaded: dict[str, str]) -> None:
    """Every topic-id name a range's decode read must be the one the run knew by then."""
    if not names_agree([o.names for o in outs], st.sequence, preloaded):
        raise Unstitchable("a topic name taught in another range")


def _write(out: BinaryIO, outs: Sequence[RangeOutput], paths: Sequence[str],
           st: Stitched) -> None:
    """The lines in the stitched order, from the ranges' scratch files."""
    items = []
    for r, i in st.sequence:
        off, size, lid = outs[r].lines[i]
        items.append((r, off, size, lid, st.ids[r][lid]))
    write_spliced(out, paths, items)


PlaceJob = tuple[int, int, list[list[place.Place]]]  # (output fd, its base, per task: places)


def place_from(path: str, fd: int, base: int, places: list[place.Place]) -> None:
    """A range's lines from its scratch file `path` to their final offsets in `fd`."""
    if not places:
        return
    src = os.open(path, os.O_RDONLY)
    try:
        place.place(src, fd, base, places)
    finally:
        os.close(src)


def _child(tasks: list[RangeTask], conn: Connection,
           fn: Callable[[RangeTask], RangeOutput]) -> None:
    """A forked worker: its ranges' outputs back through the pipe (or why it failed); then,
    when the parent sends a `PlaceJob`, its lines copied to their final offsets."""
    try:
        conn.send(("ok", [fn(t) for t in tasks]))
        job: PlaceJob | None = conn.recv()
        if job is not None:
            cpu = time.process_time()
            fd, base, per_task = job
            for t, places in zip(tasks, per_task, strict=True):
                place_from(t.out_path, fd, base, places)
            conn.send(("placed", time.process_time() - cpu))
    except EOFError:
        pass  # the parent is gone or needs nothing more
    except Exception as e:  # noqa: BLE001 (reported by the parent, which runs one process)
        conn.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


class Forked:
    """The forked workers of a run, kept after their ranges for the placement (`place`)."""

    def __init__(self) -> None:
        self.procs: list[tuple[mp.process.BaseProcess, Connection, list[RangeTask]]] = []

    def send(self, job: Callable[[list[RangeTask]], PlaceJob]) -> None:
        """Each worker starts copying its ranges' lines (`job(its tasks)`)."""
        for _proc, conn, share in self.procs:
            conn.send(job(share))

    def wait(self) -> list[float]:
        """The workers' CPU seconds of copying, once all are done. Raises OSError when one
        failed."""
        cpus: list[float] = []
        for _proc, conn, _share in self.procs:
            status, got = _receive(conn)
            if status != "placed":
                raise OSError(got)
            cpus.append(float(got))  # type: ignore[arg-type]
        return cpus

    def close(self, abort: bool = False) -> None:
        """Release the workers (those waiting for a placement get none) and join them;
        `abort`: stop them first (this process failed before reading every result: a worker
        still sending one would wait forever, as each fork holds a copy of this end of its
        own pipe, so closing it here does not end the send)."""
        for proc, conn, _share in self.procs:
            if abort and proc.is_alive():
                proc.kill()
            # said, not left to the end of the pipe: a later fork holds a copy of this end
            with contextlib.suppress(OSError):
                conn.send(None)
            conn.close()
            proc.join()
        self.procs = []


def _receive(conn: Connection) -> tuple[str, object]:
    try:
        return conn.recv()
    except EOFError:
        return "failed", "a worker ended without its result"


def start_tasks(tasks: list[RangeTask], workers: Executor | int | None,
                fn: Callable[[RangeTask], RangeOutput] = export_range,
                first: Callable[[RangeTask], RangeOutput] | None = None,
                ) -> tuple[list[RangeOutput], Forked]:
    """`fn` over every range (`first` over range 0 when given): in this process one after
    another (`workers` None), or range 0 here and the others in a pool of spawned workers, or
    over `workers` forked workers (round robin; a fork starts at once with every module this
    process imported, where a spawned worker spends ~0.1 s), which stay for `Forked.place`
    until `Forked.close`. Raises OSError when a worker failed (the workers closed)."""
    first = first or fn
    forked = Forked()
    if workers is None:
        return [first(tasks[0])] + [fn(t) for t in tasks[1:]], forked
    if not isinstance(workers, int):
        futures = [workers.submit(fn, t) for t in tasks[1:]]
        return [first(tasks[0])] + [f.result() for f in futures], forked
    n = workers
    fork = mp.get_context("fork")
    shares = [tasks[1 + i :: n] for i in range(n)]
    try:
        for share in shares:
            if share:
                here, there = fork.Pipe(duplex=True)
                proc = fork.Process(target=_child, args=(share, there, fn), daemon=True)
                proc.start()
                there.close()
                forked.procs.append((proc, here, share))
        outs: list[RangeOutput | None] = [first(tasks[0])] + [None] * (len(tasks) - 1)
        for _proc, conn, share in forked.procs:
            status, got = _receive(conn)
            if status != "ok":
                raise OSError(got)
            for t, o in zip(share, got, strict=True):  # type: ignore[call-overload]
                outs[t.rng.index] = o
    except BaseException:
        forked.close(abort=True)
        raise
    return [o for o in outs if o is not None], forked


def run_tasks(tasks: list[RangeTask], workers: Executor | int | None,
              fn: Callable[[RangeTask], RangeOutput] = export_range) -> list[RangeOutput]:
    """`start_tasks` without a placement: the workers are released at once."""
    outs, forked = start_tasks(tasks, workers, fn)
    forked.close()
    return outs


def export_ranges(ranges: Sequence[Range], opts: EngineOptions, ctx: DecodeContext,
                  header_only: bool, out: BinaryIO, tmp: str, workers: Executor | int | None,
                  timings: dict[str, object]) -> tuple[int, int, EngineStats] | str:
    """Write the stitched export; (bytes skipped, bytes in gaps, the numbers of the flows that
    are not Kafka) for the closing notes, or why
    the ranges could not be stitched (nothing written). `workers`: a pool of spawned workers,
    a number of workers to fork, or None (every range in this process, one after another)."""
    tasks = [RangeTask(r, opts, ctx, header_only, os.path.join(tmp, f"r{r.index}.ndjson"))
             for r in ranges]
    out.flush()  # a forked worker must not inherit lines still buffered here
    target = place.open_target(out)
    first = None if target is None else functools.partial(export_range, sink=out)
    try:
        outs, forked = start_tasks(tasks, workers, first=first)
    except BaseException:
        if target is not None:
            target.reset()
            target.close()
        raise
    try:
        return _finish(outs, tasks, forked, target, opts, ctx, out, timings)
    finally:
        forked.close()
        if target is not None:
            target.close()


def _finish(outs: list[RangeOutput], tasks: list[RangeTask], forked: Forked,
            target: place.Target | None, opts: EngineOptions, ctx: DecodeContext,
            out: BinaryIO, timings: dict[str, object]) -> tuple[int, int, EngineStats] | str:
    """The stitch, then the lines written out (see `export_ranges`)."""
    timings["shards"] = shards = [o.result.cpu_s for o in outs]
    timings["balance"] = max(shards) * len(shards) / (sum(shards) or 1.0)
    cpu = time.process_time()
    try:
        if any(o.bad_line for o in outs):
            raise Unstitchable("a line without its connection id first")
        st = stitch([o.result for o in outs], opts, others=True)
        check_names(outs, st, ctx.topic_names)
        others = other_flows([o.result for o in outs], st)
    except Unstitchable as e:
        if target is not None:
            target.reset()
        return str(e)
    timings["stitch"] = time.process_time() - cpu
    timings["handovers"] = st.handovers
    timings["stale"] = st.stale
    if target is None:
        _write(out, outs, [t.out_path for t in tasks], st)
        timings["merge"] = time.process_time() - cpu
        timings["place"] = []
        return st.skipped, st.gaps, others
    try:
        timings["place"] = _place(outs, tasks, forked, target, st, timings)
    except BaseException:
        target.reset()
        raise
    timings["merge"] = time.process_time() - cpu
    return st.skipped, st.gaps, others


def _place(outs: list[RangeOutput], tasks: list[RangeTask], forked: Forked,
           target: place.Target, st: Stitched, timings: dict[str, object]) -> list[float]:
    """Range 0's lines are in the output file from its start: its first lines stay, its tail
    is set aside; every other line goes to its final offset, copied by the process that wrote
    it, except the last 1/N of each range's bytes, which this process copies meanwhile (it has
    nothing else to do after the stitch: with 2 jobs the copying is halved). Per range, the
    CPU seconds of its process's copying (the merge's parallel part; range 0: this process's)."""
    lines = [o.lines for o in outs]
    k = place.prefix(st.sequence, lines[0], st.ids[0])
    start = lines[0][k][0] if k < len(lines[0]) else sum(s for _o, s, _l in lines[0])
    end0 = sum(s for _o, s, _l in lines[0])
    places, end = place.layout(st.sequence, lines, st.ids, start, k, len(outs))
    timings["in_place"] = k
    helped: dict[int, list[place.Place]] = {}  # range -> the share this process copies
    for i in range(1, len(places)):
        places[i], helped[i] = place.split(places[i], len(places))
    cpu = time.process_time()
    target.out.flush()  # range 0's lines all written before anything lands after them
    aside = None
    if places[0]:  # moved before any other line lands on it
        aside = place.set_tail_aside(target, start, end0, tasks[0].out_path)
    if forked.procs:
        forked.send(lambda share: (target.fd, target.base, [places[t.rng.index] for t in share]))
    by_range = [0.0] * len(outs)
    if aside is not None:
        try:
            place.place(aside, target.fd, target.base,
                        [(o - start, n, lid, gid, pos) for o, n, lid, gid, pos in places[0]])
        finally:
            os.close(aside)
    for t in tasks[1:]:
        place_from(t.out_path, target.fd, target.base, helped[t.rng.index])
    by_range[0] = time.process_time() - cpu
    mine = {t.rng.index for _p, _c, share in forked.procs for t in share}
    for t in tasks[1:]:
        if t.rng.index not in mine:
            cpu = time.process_time()
            place_from(t.out_path, target.fd, target.base, places[t.rng.index])
            by_range[t.rng.index] = time.process_time() - cpu
    timings["place_here"] = sum(by_range)  # (the workers' are added below)
    if forked.procs:
        for (_p, _c, share), c in zip(forked.procs, forked.wait(), strict=True):
            for t in share:
                by_range[t.rng.index] = c / len(share)
    target.finish(end)
    return by_range
