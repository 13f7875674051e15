"""`--jobs N` for export: plan, run the shards (shard 0 in this process), merge; None when the
shards turned out coupled, and the caller runs the one-process path instead."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import BinaryIO

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureStats
from kanalyze.engine import EngineOptions
from kanalyze.parallel import merge
from kanalyze.parallel.plan import make_plan, scan_loads
from kanalyze.parallel.worker import ShardResult, ShardTask, run_shard

AUTO_MIN_BYTES = 16 * 1024 * 1024  # below this, the default --jobs runs in one process
last_fallback: str | None = None  # why the last run was not merged (tests read it)


def default_jobs(paths: Sequence[str], jobs: int | None) -> int:
    """The job count to use: as asked; by default the cores, but 1 for small or piped inputs
    (starting workers costs more than they would save)."""
    if any(p == "-" for p in paths):
        return 1
    if jobs is not None:
        return jobs
    try:
        size = sum(os.path.getsize(p) for p in paths)
    except OSError:
        return 1
    return 1 if size < AUTO_MIN_BYTES else max(1, os.cpu_count() or 1)


def run_export(paths: Sequence[str], jobs: int, opts: EngineOptions, ctx: DecodeContext,
               header_only: bool, out: BinaryIO,
               processes: bool = True) -> tuple[CaptureStats, int, int] | None:
    """Write the export of `paths` to `out` with `jobs` processes; returns (capture stats,
    bytes skipped, bytes in gaps) for the closing notes, or None (nothing written) when the
    shards were coupled. `processes=False` runs the shards one after the other in this
    process (the tests' way to check the merge with many shards cheaply)."""
    global last_fallback
    last_fallback = None
    plan = make_plan(scan_loads(paths), jobs)
    with tempfile.TemporaryDirectory(prefix="kanalyze-jobs-") as tmp:
        tasks = [
            ShardTask(list(paths), opts, ctx, header_only, plan, i, os.path.join(tmp, f"{i}.ndjson"))
            for i in range(jobs)
        ]
        try:
            results = _run(tasks) if processes else [run_shard(t) for t in tasks]
        except (BrokenProcessPool, OSError) as e:  # no workers here (a sandbox, an odd __main__)
            last_fallback = f"workers failed: {e}"
            return None
        try:
            merge.check(results, opts)
            ids = merge.global_ids(results)
            sequence = list(merge.order(results, ids))
            merge.check_names(results, sequence)
        except merge.Coupled as e:
            last_fallback = str(e)
            return None
        merge.write(out, results, [t.out_path for t in tasks], ids, sequence)
    capture = results[0].capture or CaptureStats()
    return capture, sum(r.skipped for r in results), sum(r.gaps for r in results)


def _run(tasks: list[ShardTask]) -> list[ShardResult]:
    """Shard 0 here, the others in spawned workers (spawn: safe whatever the caller's threads)."""
    with ProcessPoolExecutor(len(tasks) - 1, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(run_shard, t) for t in tasks[1:]]
        return [run_shard(tasks[0])] + [f.result() for f in futures]
