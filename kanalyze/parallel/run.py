"""`--jobs N` for export: plan, run the shards (shard 0 in this process), merge; None when the
shards turned out coupled, and the caller runs the one-process path instead."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import stat
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import BinaryIO

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureStats
from kanalyze.engine import EngineOptions, EngineStats
from kanalyze.parallel import merge
from kanalyze.parallel.plan import WORKER_START_US, Plan, make_plan
from kanalyze.parallel.range_export import RANGE_BYTES_ENV, export_ranges
from kanalyze.parallel.ranges import plan_ranges
from kanalyze.parallel.scan import Scan, scan
from kanalyze.parallel.worker import ShardResult, ShardTask, run_shard

FORK = "fork"
SPAWN_START_US = 100_000.0  # a spawned worker's interpreter and imports, in CPU µs
last_fallback: str | None = None  # why the last run was not merged (tests read it)
# CPU seconds of the last run's phases: scan, shards (one each), merge (benchmarks read it)
last_timings: dict[str, object] = {}


def default_jobs(paths: Sequence[str], jobs: int | None) -> int:
    """The job count to use: as asked, by default 1 (`kanalyze.commands.export.auto_jobs` asks
    for the cores on a big full export); always 1 when an input is not a regular file (stdin,
    a pipe: every shard reads the input, a pipe can be read once)."""
    try:
        sizes = [os.stat(p) for p in paths if p != "-"]
    except OSError:
        return 1
    if len(sizes) < len(paths) or not all(stat.S_ISREG(st.st_mode) for st in sizes):
        return 1
    return 1 if jobs is None else jobs


# (capture stats, bytes skipped, bytes in gaps, the numbers of flows that are not Kafka)
Exported = tuple[CaptureStats, int, int, EngineStats | None]


def run_export(paths: Sequence[str], jobs: int, opts: EngineOptions, ctx: DecodeContext,
               header_only: bool, out: BinaryIO,
               processes: bool = True) -> Exported | None:
    """Write the export of `paths` to `out` with `jobs` processes; returns (capture stats,
    bytes skipped, bytes in gaps, the numbers of the flows that are not Kafka (None: there are
    none; the shards refuse them)) for the closing notes, or None (nothing written) when the
    shards were coupled. `processes=False` runs the shards one after the other in this
    process (the tests' way to check the merge with many shards cheaply)."""
    global last_fallback
    last_fallback = None
    cpu = time.process_time()
    range_bytes = int(os.environ.get(RANGE_BYTES_ENV) or 0) or None
    forked = processes and jobs > 1 and FORK in mp.get_all_start_methods()
    # forked workers start at once; spawned ones spend ~0.1 s importing while range 0 runs.
    # (The copies into the output file come after the stitch, shared by every process: no lead)
    lead = 0.0 if forked or not processes else SPAWN_START_US
    ranges = plan_ranges(paths, jobs, range_bytes, bodies=not header_only, lead_us=lead)
    if ranges is not None:
        last_timings.clear()
        last_timings["scan"] = time.process_time() - cpu
        last_timings["ranges"] = len(ranges)
        last_timings["workers"] = FORK if forked else "spawn" if processes else "inline"
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kanalyze-jobs-"))
            workers: Executor | int | None = None
            if forked:
                workers = jobs - 1
            elif processes and jobs > 1:
                workers = stack.enter_context(
                    ProcessPoolExecutor(jobs - 1, mp_context=mp.get_context("spawn")))
            try:
                got = export_ranges(ranges, opts, ctx, header_only, out, tmp, workers,
                                    last_timings)
            except (BrokenProcessPool, OSError) as e:
                last_fallback = f"workers failed: {e}"
                return None
        if isinstance(got, str):
            last_fallback = got
            return None
        capture = CaptureStats()
        capture.files.append(paths[0])
        capture.packets = sum(r.count for r in ranges)
        return capture, got[0], got[1], got[2]
    with contextlib.ExitStack() as stack:
        pool = None
        if processes and jobs > 1:
            # the workers start (interpreter, imports) while this process scans
            pool = stack.enter_context(
                ProcessPoolExecutor(jobs - 1, mp_context=mp.get_context("spawn"))
            )
            warm = [pool.submit(_warm) for _ in range(jobs - 1)]
        sc = scan(paths)
        start = [0.0] + [WORKER_START_US] * (jobs - 1) if processes else []
        plan = make_plan(sc.loads, jobs, bodies=not header_only, start=start)
        last_timings.clear()
        last_timings["scan"] = time.process_time() - cpu
        last_timings["balance"] = plan.balance()
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kanalyze-jobs-"))
        tasks = [
            ShardTask(list(paths), opts, ctx, header_only, plan, i,
                      os.path.join(tmp, f"{i}.ndjson"), sc.last_ts, sc.layout)
            for i in range(jobs)
        ]
        if sc.layout is not None:
            _assign(sc, plan, tasks)
        results: list[ShardResult]
        try:
            if pool is None:
                results = [run_shard(t) for t in tasks]
            else:
                for w in warm:
                    w.result()
                futures = [pool.submit(run_shard, t) for t in tasks[1:]]
                results = [run_shard(tasks[0])] + [f.result() for f in futures]
        except (BrokenProcessPool, OSError) as e:  # no workers here (a sandbox, an odd __main__)
            last_fallback = f"workers failed: {e}"
            return None
        last_timings["shards"] = [r.cpu_s for r in results]
        cpu = time.process_time()
        try:
            merge.check(results, opts, sc.clock)
            merge.check_shared(results, plan, sc.keys)
            ids = merge.global_ids(results)
            sequence = list(merge.order(results, ids))
            merge.check_names(results, sequence, ctx.topic_names)
        except merge.Coupled as e:
            last_fallback = str(e)
            return None
        merge.write(out, results, [t.out_path for t in tasks], ids, sequence)
        last_timings["merge"] = time.process_time() - cpu
    capture = results[0].capture or _fast_capture(sc, paths)
    return capture, sum(r.skipped for r in results), sum(r.gaps for r in results), None



def _warm() -> None:
    """A spawned worker's first task: be started and have the decoders imported."""


def _assign(sc: Scan, plan: Plan, tasks: list[ShardTask]) -> None:
    """Each shard's packets (numbers and file offsets): those of its connections' pieces, and
    the packets that are not TCP segments for shard 0 (its engine counts them)."""
    where = [plan.pieces(k) for k in sc.keys]
    numbers = [t.numbers for t in tasks]
    offsets = [t.offsets for t in tasks]
    for no, (off, kid) in enumerate(zip(sc.offsets, sc.conns, strict=True), 1):
        for s in {p.shard for p in where[kid]} if kid >= 0 else (0,):
            numbers[s].append(no)
            offsets[s].append(off)


def _fast_capture(sc: Scan, paths: Sequence[str]) -> CaptureStats:
    """What the capture readers would have counted for the one file the scan walked."""
    stats = CaptureStats()
    stats.files.append(paths[0])
    stats.packets = len(sc.offsets)
    stats.bytes = sc.captured
    return stats
