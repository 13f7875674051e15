#!/usr/bin/env python3
"""The range planner on a remote capture: the driver's own walk against the walk done by Spark
tasks (`kanalyze.spark.remote_walk`: a pcap's record headers by slices, a pcapng's ranges),
same plan asserted. Not a test: the
figures in docs/spark.md ("Planning a large remote pcap").

The capture is symlinked (never copied) into a temporary directory mounted as `viewfs://`
(Hadoop's mount table, as tests/spark/test_remote.py does), so both walks read it through the
Hadoop reader JVM. Printed per run: wall and CPU seconds of the driver's Python, the CPU of the
driver's Hadoop reader JVM, and the Spark JVM's (with a local master it also runs the
executors' side). The reader JVMs (the driver's, the workers') are started before the timed
runs; the first distributed walk (worker start included) is printed apart.

    python benchmarks/bench_remote_plan.py benchmarks/.data/bench-250mb-plain.pcap
    python benchmarks/bench_remote_plan.py --small-records 250   # 250 MB of 100-byte records
    editcap -F pcapng benchmarks/.data/bench-250mb-plain.pcap /tmp/b.pcapng
    python benchmarks/bench_remote_plan.py /tmp/b.pcapng
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kanalyze


def small_records(path: Path, mb: int) -> None:
    """A classic pcap of `mb` MB of 100-byte records (84 bytes of frame each)."""
    rec = struct.Struct("<IIII")
    chunk = b"".join(rec.pack(1_700_000_000 + k // 10_000, k % 1_000_000, 84, 84) + bytes(84)
                     for k in range(10_000))
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for _ in range(mb * (1 << 20) // len(chunk)):
            f.write(chunk)


def _jvm_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture", nargs="?", type=Path)
    ap.add_argument("--small-records", type=int, metavar="MB")
    ap.add_argument("--slice-mb", type=int, default=128)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from kanalyze.parallel.pcap_slices import SLICE_ENV
    from kanalyze.spark.hadoop_read import hadoop_settings, reader
    from kanalyze.spark.pipeline import rank_inputs
    from kanalyze.spark.range_stage import plan_groups
    from kanalyze.spark.remote_walk import pcapng_walker, walk_remote
    from kanalyze.spark.session import get_session

    tmp = Path(tempfile.mkdtemp(prefix="kanalyze-bench-plan-"))
    if args.small_records:
        small_records(tmp / "x.pcap", args.small_records)
    else:
        os.symlink(args.capture.resolve(), tmp / "x.pcap")
    spark = get_session(args.master, "bench-remote-plan", {"spark.default.parallelism": "2"})
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "fs.viewfs.mounttable.benchplan.link./caps", "file://" + str(tmp))
    files, _ = rank_inputs(spark, ["viewfs://benchplan/caps/x.pcap"])
    par = spark.sparkContext.defaultParallelism
    rd = reader(hadoop_settings(spark))  # the driver's reader JVM, started untimed
    spark_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    size = files[0].size

    def run(tasks: bool) -> tuple[float, float, float, float, object, dict]:
        os.environ[SLICE_ENV] = str(args.slice_mb << 20 if tasks else 0)
        c0, w0 = time.process_time(), time.perf_counter()
        j0, s0 = _jvm_cpu(rd._proc.pid), _jvm_cpu(spark_pid)
        report: dict = {}
        walked = walk_remote(spark, files, report)
        plan = plan_groups(files, par, walked, pcapng_walker(spark, files, report))
        return (time.perf_counter() - w0, time.process_time() - c0, _jvm_cpu(rd._proc.pid) - j0,
                _jvm_cpu(spark_pid) - s0, plan, report)

    first = run(True)
    print(f"{size / 1e6:.0f} MB, {args.master}, slices of {args.slice_mb} MB; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"tasks, first (worker start): wall {first[0]:.2f} s, driver CPU {first[1]:.2f} s, "
          f"{first[5]}")
    got: dict[bool, list] = {False: [], True: []}
    for _ in range(args.runs):
        for tasks in (False, True):
            got[tasks].append(run(tasks))
    assert all(r[4] == got[False][0][4] for rs in got.values() for r in rs), "plans differ"
    for tasks in (False, True):
        rs = got[tasks]
        med = [statistics.median(r[k] for r in rs) for k in range(4)]
        print(f"{'tasks ' if tasks else 'driver'}: wall {med[0]:.2f} s, driver CPU {med[1]:.2f}"
              f" s, driver reader JVM {med[2]:.2f} s, Spark JVM {med[3]:.2f} s"
              f" ({size / med[0] / 1e6:.0f} MB/s){'  ' + str(rs[-1][5]) if tasks else ''}")
    print(f"ranges: {sum(len(g) for g in got[False][0][4][0])}, load {os.getloadavg()[0]:.2f}")
    spark.stop()
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
