"""How often the range stitch refuses, and how much range work that throws away.

When the stitch cannot prove a capture group's ranges equal to one process, the Spark
pipeline (and `kanalyze export --jobs N`) decodes that group again on another path, and the
group's range work is lost. This runs the same planner, range runs and stitch in this one
process (no Spark) over every capture given (default: the repository's `captures/`, recursively)
cut into ranges of each `--range-bytes`, and prints per size: the captures cut, those refused
(with the reasons), and the range CPU seconds of the refused ones against all.

    python benchmarks/range_refusals.py [PATHS...] [--range-bytes 2048,16384]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kanalyze.capture import CaptureError  # noqa: E402
from kanalyze.engine import EngineOptions  # noqa: E402
from kanalyze.parallel.range_plan import plan_chain  # noqa: E402
from kanalyze.parallel.ranges import Unstitchable, run_range, stitch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _captures(paths: list[str]) -> list[str]:
    if not paths:
        paths = [os.path.join(ROOT, "captures")]
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out.extend(sorted(glob.glob(os.path.join(p, "**", "*.pcap*"), recursive=True)))
        else:
            out.append(p)
    return [p for p in out if not p.endswith(".gz")]


def measure(path: str, range_bytes: int) -> tuple[int, float, str] | None:
    """(ranges, their CPU seconds, the refusal or "") for one capture; None if not cut."""
    try:
        plan = plan_chain([path], 2, range_bytes)
    except CaptureError:
        return None
    if plan is None or len(plan) < 2:
        return None
    opts = EngineOptions()
    t0 = time.process_time()
    results = [run_range(r, opts, lambda _ex: None) for r in plan]
    cpu = time.process_time() - t0
    try:
        stitch(results, opts, others=True)  # as the Spark range stage calls it
    except Unstitchable as e:
        return len(plan), cpu, str(e)
    return len(plan), cpu, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--range-bytes", default="2048,16384")
    args = ap.parse_args()
    files = _captures(args.paths)
    for size in (int(x) for x in args.range_bytes.split(",")):
        cut = refused = 0
        cpu_all = cpu_lost = 0.0
        ranges_lost = 0
        why: Counter = Counter()
        for path in files:
            got = measure(path, size)
            if got is None:
                continue
            n, cpu, reason = got
            cut += 1
            cpu_all += cpu
            if reason:
                refused += 1
                cpu_lost += cpu
                ranges_lost += n
                why[reason] += 1
        print(f"range bytes {size}: {cut} captures cut, {refused} refused "
              f"({ranges_lost} ranges), range CPU lost {cpu_lost:.2f} of {cpu_all:.2f} s")
        for reason, k in why.most_common():
            print(f"  {k:4d}  {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
