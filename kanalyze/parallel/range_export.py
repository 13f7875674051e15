"""`export --jobs N` over byte ranges: each range's exchanges encoded as NDJSON lines into a
scratch file by its worker (range 0 in the calling process), the stitch choosing which lines
stand and in what order, the lines copied out with the run's connection ids. None (nothing
written) when the stitch refuses: the caller runs one process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import BinaryIO

from dissectors.context import DecodeContext
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.parallel.merge import names_agree, write_spliced
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


def export_range(task: RangeTask) -> RangeOutput:
    """One range's lines into `task.out_path` (spawn-safe: picklable in and out)."""
    names = RecordingNames(task.ctx.topic_names)
    enc = ExchangeEncoder(replace(task.ctx, topic_names=names), decode=not task.header_only)
    line_of = enc.line_bytes
    lines: list[tuple[int, int, int]] = []
    recorded: dict[int, tuple[dict[str, str | None], dict[str, str]]] = {}
    pos = 0
    bad = False
    with open(task.out_path, "wb") as out:
        write = out.write

        def on_exchange(ex: Exchange) -> None:
            nonlocal pos, bad
            names.reads, names.writes = {}, {}
            line = line_of(ex)  # and the newline written apart: a line may be megabytes
            if names.reads or names.writes:
                recorded[len(lines)] = (names.reads, names.writes)
            cid = ex.conn.id
            bad = bad or not line.startswith(LINE_PREFIX + b"%d," % cid)
            size = len(line) + 1
            lines.append((pos, size, cid))
            write(line)
            write(b"\n")
            pos += size

        res = run_range(task.rng, task.opts, on_exchange)
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


def _child(tasks: list[RangeTask], conn: Connection,
           fn: Callable[[RangeTask], RangeOutput]) -> None:
    """A forked worker: its ranges' outputs back through the pipe (or why it failed)."""
    try:
        conn.send(("ok", [fn(t) for t in tasks]))
    except Exception as e:  # noqa: BLE001 (reported by the parent, which runs one process)
        conn.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def run_tasks(tasks: list[RangeTask], workers: Executor | int | None,
              fn: Callable[[RangeTask], RangeOutput] = export_range) -> list[RangeOutput]:
    """`fn` over every range: in this process one after another (`workers` None), or range 0
    here and the others in a pool of spawned workers, or over `workers` forked workers (round
    robin): a fork starts at once with every module this process imported, where a spawned
    worker spends ~0.1 s. Raises OSError when a worker failed."""
    if workers is None:
        return [fn(t) for t in tasks]
    if not isinstance(workers, int):
        futures = [workers.submit(fn, t) for t in tasks[1:]]
        return [fn(tasks[0])] + [f.result() for f in futures]
    n = workers
    fork = mp.get_context("fork")
    shares = [tasks[1 + i :: n] for i in range(n)]
    procs = []
    for share in shares:
        if share:
            recv, send = fork.Pipe(duplex=False)
            proc = fork.Process(target=_child, args=(share, send, fn), daemon=True)
            proc.start()
            send.close()
            procs.append((proc, recv, share))
    outs: list[RangeOutput | None] = [fn(tasks[0])] + [None] * (len(tasks) - 1)
    for proc, recv, share in procs:
        try:
            status, got = recv.recv()
        except EOFError:
            status, got = "failed", "a worker ended without its result"
        proc.join()
        if status != "ok":
            raise OSError(got)
        for t, o in zip(share, got, strict=True):
            outs[t.rng.index] = o
    return [o for o in outs if o is not None]


def export_ranges(ranges: Sequence[Range], opts: EngineOptions, ctx: DecodeContext,
                  header_only: bool, out: BinaryIO, tmp: str, workers: Executor | int | None,
                  timings: dict[str, object]) -> tuple[int, int] | str:
    """Write the stitched export; (bytes skipped, bytes in gaps) for the closing note, or why
    the ranges could not be stitched (nothing written). `workers`: a pool of spawned workers,
    a number of workers to fork, or None (every range in this process, one after another)."""
    tasks = [RangeTask(r, opts, ctx, header_only, os.path.join(tmp, f"r{r.index}.ndjson"))
             for r in ranges]
    outs = run_tasks(tasks, workers)
    timings["shards"] = shards = [o.result.cpu_s for o in outs]
    timings["balance"] = max(shards) * len(shards) / (sum(shards) or 1.0)
    cpu = time.process_time()
    try:
        if any(o.bad_line for o in outs):
            raise Unstitchable("a line without its connection id first")
        st = stitch([o.result for o in outs], opts)
        check_names(outs, st, ctx.topic_names)
    except Unstitchable as e:
        return str(e)
    timings["stitch"] = time.process_time() - cpu
    _write(out, outs, [t.out_path for t in tasks], st)
    timings["merge"] = time.process_time() - cpu
    timings["handovers"] = st.handovers
    timings["stale"] = st.stale
    return st.skipped, st.gaps
