#!/usr/bin/env python3
"""`--jobs N` for `report`, `stats` and `summary`: the critical path on idle cores, modelled
from CPU seconds measured in this process, and the scaling up to 16 jobs.

For each command it times, in this process, the one-process run (`--jobs 1`: the command's
document built and rendered, output discarded) and the `--jobs N` run with its ranges run
one after the other here (`RangeSession(processes=False)`), each range timed on its own. The
critical path on N idle cores: everything the calling process does that is not a range (the
plan, the stitch, the engine statistics, reading the shipped exchanges and bodies back, the
analysis, the rendering), plus the slowest range (range 0 runs in the calling process while
forked workers run the others), plus a fork. Start-up (the interpreter and imports) is the
same for both and left out. Each figure is the least of `--repeat` rounds. The load average
is printed before and after: the machine may be shared.

Usage::

    python benchmarks/bench_jobs_commands.py [--pcap FILE] [--repeat 3] [--scale 2,4,8,16]
        [--commands report,stats,summary]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from bench_jobs import DEFAULT_PCAP, fork_cpu, load  # noqa: E402


def run_command(command: str, session: object) -> None:
    """The command's document built and its text rendered into a discarded buffer."""
    from dissectors.context import DecodeContext
    from kanalyze.views.table import Out

    out = Out(io.StringIO())
    if command == "report":
        from kanalyze.views.report_text import text_report

        text_report(session, 5000, 10_000.0, out, DecodeContext())  # type: ignore[arg-type]
    elif command == "stats":
        from kanalyze.views.stats import TABLES, build
        from kanalyze.views.stats_text import render

        render(build(session, dict.fromkeys(TABLES), ctx=DecodeContext()), out)
    else:
        from kanalyze.commands import summary

        summary.render(summary.build(session))  # type: ignore[arg-type]


def measure(command: str, pcap: Path, jobs: int) -> tuple[float, list[float]]:
    """CPU seconds of the whole run and of each range (jobs 1: no ranges)."""
    from kanalyze.engine import EngineOptions
    from kanalyze.parallel import range_session
    from kanalyze.session import Session

    ranges: list[float] = []
    if jobs == 1:
        session: Session = Session([str(pcap)], EngineOptions())
    else:
        session = range_session.RangeSession([str(pcap)], EngineOptions(), jobs=jobs,
                                             processes=False)
    real = range_session.run_tasks

    def timed_tasks(tasks: list, _workers: object, fn: Callable) -> list:
        def one(task: object) -> object:
            c0 = time.process_time()
            try:
                return fn(task)
            finally:
                ranges.append(time.process_time() - c0)

        return real(tasks, None, one)

    range_session.run_tasks = timed_tasks  # type: ignore[assignment]
    try:
        c0 = time.process_time()
        run_command(command, session)
        total = time.process_time() - c0
    finally:
        range_session.run_tasks = real
    if jobs > 1 and range_session.last_fallback is not None:
        raise RuntimeError(f"{command} --jobs {jobs} ran one process: "
                           f"{range_session.last_fallback}")
    if jobs > 1 and getattr(session, "diverged", None):
        raise RuntimeError(f"{command} --jobs {jobs} ran again: {session.diverged}")
    return total, ranges


def best(command: str, pcap: Path, jobs: int, repeat: int) -> tuple[float, list[float]]:
    """The round with the shortest critical path."""
    rounds = [measure(command, pcap, jobs) for _ in range(repeat)]
    return min(rounds, key=lambda r: path(r, 0.0))


def path(r: tuple[float, list[float]], fork: float) -> float:
    total, ranges = r
    if not ranges:
        return total
    return total - sum(ranges) + max(ranges) + fork


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcap", type=Path, default=DEFAULT_PCAP)
    ap.add_argument("--repeat", type=int, default=3, help="least of N rounds")
    ap.add_argument("--scale", default="2,4,8,16", help="job counts for the model")
    ap.add_argument("--commands", default="report,stats,summary")
    args = ap.parse_args(argv)
    print(f"capture: {args.pcap} ({args.pcap.stat().st_size / 1e6:.0f} MB)")
    print(f"before: {load()}")
    fork = fork_cpu()
    print(f"fork and join of a worker: {fork:.3f} s CPU")
    print("critical path = calling process (all but the ranges) + slowest range + a fork; "
          "CPU seconds, start-up left out")
    for command in args.commands.split(","):
        measure(command, args.pcap, 1)  # warm the caches as the other runs are
        t1 = best(command, args.pcap, 1, args.repeat)[0]
        print(f"\n{command}: --jobs 1 {t1:.2f} s")
        for jobs in (int(j) for j in args.scale.split(",")):
            try:
                r = best(command, args.pcap, jobs, args.repeat)
            except RuntimeError as e:  # the stitch refused: one process, nothing to model
                print(f"  --jobs {jobs:2}: {e}")
                continue
            total, ranges = r
            tn = path(r, fork)
            print(f"  --jobs {jobs:2}: {tn:5.2f} s  speed-up {t1 / tn:5.2f}x  slowest range "
                  f"{max(ranges):.2f} s, all ranges {sum(ranges):.2f} s, after and around "
                  f"the ranges {total - sum(ranges):.2f} s")
    print(f"\nafter: {load()}")
    return 0


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, line_buffering=True)
    t0 = time.time()
    code = main()
    sys.stderr.write(f"bench_jobs_commands: {time.time() - t0:.0f} s\n")
    raise SystemExit(code)
