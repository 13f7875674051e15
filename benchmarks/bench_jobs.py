#!/usr/bin/env python3
"""`--jobs N`: speed-up over one process, the header-only floor, and tshark, in one run.

On one capture (by default the cached 250 MB benchmark capture of `bench_export.py`), it times

* `kanalyze export` (full bodies) and `export --header-only` with `--jobs 1` and `--jobs 2`:
  wall and CPU seconds of the whole process tree (`wait4`), peak RSS;
* the header-only sketch (`header_sketch.py`: struct over mmap, TCP in order, frame headers
  only), the floor a pure-Python header walk reaches;
* `tshark -T fields` with the oracle's header fields (and with `--tshark-full`, `tshark -V`);

and prints the ratios. The machine is shared (the load average is printed before and after):
wall time says little on a busy machine, CPU time says how much work was done, and the
speed-up is also given as a *critical path* from CPU times measured per phase in process:
start-up, then the plan (the record walk that cuts the byte ranges) and range 0 in the calling
process while each spawned worker starts (interpreter, imports) and then runs its range, then
the stitch and the merge: the wall time on idle cores. The same model, with the ranges run one
after the other in this process and each timed, gives the scaling up to 16 jobs.

Usage::

    python benchmarks/bench_jobs.py [--pcap FILE] [--port P] [--repeat 3] [--tshark-full]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from bench_export import (  # noqa: E402
    KANALYZE_ENV,
    TSHARK_HEADER_FIELDS,
    compile_kanalyze,
    kanalyze_cmd,
    timed,
    tshark_base,
)

DEFAULT_PCAP = HERE / ".data" / "bench-250mb-plain.pcap"  # bench_export.py builds it
MB = 1_000_000


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.1f} {b:.1f} {c:.1f} on {os.cpu_count()} cores"


def start_up_cpu() -> float:
    """CPU of starting kanalyze and importing what an export needs (the part `--jobs` repeats
    in every spawned worker)."""
    code = "import kanalyze.parallel.range_export, kanalyze.cli"
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"]
    best = 1e9
    for _ in range(3):
        t0 = os.times()
        subprocess.run(cmd, check=True, env=KANALYZE_ENV)
        t1 = os.times()
        best = min(
            best, t1.children_user + t1.children_system - t0.children_user - t0.children_system
        )
    return best


def phases(pcap: Path, jobs: int, header_only: bool, processes: bool, dest: str) -> dict:
    from dissectors.context import DecodeContext
    from kanalyze.engine import EngineOptions
    from kanalyze.parallel import run

    with open(dest, "wb") as out:
        done = run.run_export(
            [str(pcap)],
            jobs,
            EngineOptions(),
            DecodeContext(),
            header_only,
            out,
            processes=processes,
        )
    if done is None:
        raise RuntimeError(f"--jobs {jobs} fell back to one process: {run.last_fallback}")
    return dict(run.last_timings)


def fork_cpu() -> float:
    """CPU of forking a worker and joining it (a forked worker starts with every module)."""
    import multiprocessing as mp

    best = 1e9
    for _ in range(3):
        t0, c0 = os.times(), time.process_time()
        p = mp.get_context("fork").Process(target=int)
        p.start()
        p.join()
        t1 = os.times()
        best = min(best, time.process_time() - c0 + t1.children_user + t1.children_system
                   - t0.children_user - t0.children_system)
    return best


def one_process(pcap: Path, header_only: bool, dest: str) -> float:
    """CPU seconds of the one-process export (`--jobs 1`) in this process, written to `dest`
    (a file, or /dev/null)."""
    from dissectors.context import DecodeContext
    from kanalyze.engine import EngineOptions
    from kanalyze.export import ExchangeEncoder
    from kanalyze.gcyoung import young_only  # as the CLI's export
    from kanalyze.session import Session

    enc = ExchangeEncoder(DecodeContext(), decode=not header_only)
    c0 = time.process_time()
    with open(dest, "wb") as out:
        for ex in young_only(Session([str(pcap)], EngineOptions()).exchanges()):
            out.write(enc.line_bytes(ex))
            out.write(b"\n")
    return time.process_time() - c0


def critical_path(t: dict, start: float, worker: float) -> float:
    """start-up, then range 0 after the plan in this process, each other range once both the
    plan and its worker's own start (`worker`: a fork, or a spawned interpreter's imports,
    which run meanwhile) are done; then the stitch and the merge: into a file, each process
    copies its own ranges' lines to their final offsets at once (`place`: the slowest counts;
    the ranges run in this process placed them one after the other), into /dev/null the
    calling process copies them all."""
    shards, scan = t["shards"], t["scan"]
    ends = [scan + shards[0]] + [max(scan, worker) + s for s in shards[1:]]
    places = t.get("place") or [0.0]
    here = t.get("place_here", 0.0)
    return start + max(ends) + t["merge"] - here + max(places)


def model(pcap: Path, ho: bool, mode: str, dest: str, start: float, fork: float,
          scale: str) -> None:
    """The critical-path model of one mode: `--jobs 2` with a forked worker, then the ranges
    of 2..16 jobs run one after the other in this process."""
    one_process(pcap, ho, dest)  # warm the caches as the other runs are
    t1 = start + min(one_process(pcap, ho, dest) for _ in range(2))
    two = phases(pcap, 2, ho, True, dest)
    t2 = critical_path(two, start, fork)
    print(
        f"  {mode}: --jobs 1 {t1:.2f} s, --jobs 2 {t2:.2f} s (ranges "
        f"{', '.join(f'{s:.2f}' for s in two['shards'])}, plan {two['scan']:.2f}, stitch "
        f"{two.get('stitch', 0):.2f}, copies {_secs(two.get('place'))}, stitch + merge here "
        f"{two['merge']:.2f}): speed-up {t1 / t2:.2f}x"
    )
    print(f"  {mode}, scaling (shards timed one after the other in this process):")
    for jobs in (int(j) for j in scale.split(",")):
        try:
            t = phases(pcap, jobs, ho, False, dest)
        except RuntimeError as e:  # a refused stitch: one process (same output), no figure
            print(f"    --jobs {jobs:2}: {e}")
            continue
        tn = critical_path(t, start, fork)
        places = t.get("place") or [0.0]
        print(
            f"    --jobs {jobs:2}: {tn:5.2f} s  speed-up {t1 / tn:5.2f}x  balance "
            f"{t['balance']:.2f}  slowest range {max(t['shards']):.2f} s, all ranges "
            f"{sum(t['shards']):.2f} s, plan {t['scan']:.2f} s, stitch "
            f"{t.get('stitch', 0):.2f} s, merge serial "
            f"{t['merge'] - t.get('place_here', 0.0):.2f} s, slowest copy {max(places):.2f} s, "
            f"all copies {sum(places):.2f} s, handovers {t.get('handovers', 0)}"
        )


def _secs(xs: list[float] | None) -> str:
    return "+".join(f"{x:.2f}" for x in xs) if xs else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcap", type=Path, default=DEFAULT_PCAP)
    ap.add_argument(
        "--port", type=int, help="Kafka port (default: from the .json beside the capture)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="best of N for each timed run")
    ap.add_argument("--tshark-full", action="store_true", help="also time tshark -V (slow)")
    ap.add_argument("--scale", default="2,4,8,16", help="job counts for the scaling model")
    ap.add_argument("--output", default="file", choices=["file", "null"],
                    help="where kanalyze's exports write: a scratch file in $TMPDIR (what a "
                         "user gets with -o or > FILE; default) or /dev/null")
    args = ap.parse_args(argv)
    pcap = args.pcap
    port = args.port or json.loads(pcap.with_suffix(".json").read_text())["port"]
    size = pcap.stat().st_size / MB
    print(f"capture: {pcap} ({size:.0f} MB)")
    print(f"before: {load()}")
    dest = os.devnull
    if args.output == "file":
        fd, dest = tempfile.mkstemp(prefix="bench-jobs-", suffix=".ndjson")
        os.close(fd)
    print(f"kanalyze's exports write to {'a file' if dest != os.devnull else dest}")
    compile_kanalyze()
    kan = kanalyze_cmd()
    rows: list[tuple[str, float, float, float]] = []

    def run(name: str, cmd: list[str], out: str | None = None) -> float:
        wall, rss, cpu = timed(cmd, Path(out) if out else None, args.repeat)
        rows.append((name, wall, cpu, rss))
        sys.stderr.write(f"{name}: {cpu:.2f} s CPU, {wall:.2f} s wall\n")
        return cpu

    for mode, flag in (("full", []), ("header-only", ["--header-only"])):
        for jobs in (1, 2):
            run(
                f"export {mode} --jobs {jobs}",
                [*kan, "export", *flag, "--jobs", str(jobs), str(pcap)],
                dest,
            )
    run("header sketch (floor)", [sys.executable, str(HERE / "header_sketch.py"), str(pcap)])
    base = tshark_base(pcap, port)
    fields = TSHARK_HEADER_FIELDS
    tf = run(
        "tshark -T fields (headers)",
        [*base, "-Y", "kafka", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", *fields],
    )
    tv = run("tshark -V", [*base, "-V"]) if args.tshark_full else None

    print(f"after: {load()}\n")
    print(
        f"{'run':32} {'CPU s':>7} {'wall s':>7} {'RSS MB':>7} {'MB/CPU s':>9} "
        f"{'vs tshark fields':>17}"
    )
    for name, wall, cpu, rss in rows:
        print(f"{name:32} {cpu:7.2f} {wall:7.2f} {rss:7.0f} {size / cpu:9.0f} {tf / cpu:16.2f}x")
    if tv:
        full1 = rows[0][2]
        print(f"\nfull export --jobs 1 vs tshark -V: {tv / full1:.2f}x (CPU)")

    start = start_up_cpu()
    print(f"\nstart-up (interpreter + imports): {start:.2f} s CPU")
    print(
        "critical path = start-up + max(plan + range 0, max(plan, fork) + range i) + stitch "
        "and merge, from per-phase CPU seconds (the wall time on idle cores); --jobs 1 = "
        "start-up + the one-process export"
    )
    fork = fork_cpu()
    print(f"fork and join of a worker: {fork:.3f} s CPU")
    try:
        for mode, ho in (("full", False), ("header-only", True)):
            model(pcap, ho, mode, dest, start, fork, args.scale)
    finally:
        if dest != os.devnull:
            os.unlink(dest)
    print(f"\nend: {load()}")
    return 0


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, line_buffering=True)
    t0 = time.time()
    code = main()
    sys.stderr.write(f"bench_jobs: {time.time() - t0:.0f} s\n")
    raise SystemExit(code)
