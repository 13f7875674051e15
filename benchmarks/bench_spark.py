#!/usr/bin/env python3
"""One `kanalyze export` process next to the Spark pipeline on local[1] and local[2], in one run.

The input is a rotation set of >= 1 GB made here from a real-client capture (default: the cached
``benchmarks/.data/bench-250mb-plain.pcap`` of ``bench_export.py``; it is read, never copied):
``--copies`` copies one after the other in time, each copy's client side moved to its own
address (10.0.k.1), so every copy's connections are distinct, written in ``tcpdump -C`` style
(a new file once the current one passes ``--rotate-mb``). The set lives in
``benchmarks/.data/spark/`` (git-ignored) and is deleted at the end unless ``--keep``.

Timed, each in its own process so the JVMs do not share a heap or a cache:

* ``kanalyze export --jobs 1`` (full bodies, NDJSON to a scratch file): the single process;
* ``run_pipeline`` (every table, full bodies) on a ``local[1]`` and a ``local[2]`` session. The
  session start-up and a warm-up run on small bundled captures (two per core, so that every
  Python worker has started before the timed run) are reported apart, and so is any Python
  process the timed run still started (``new processes``). Then the same run again on the
  same session: a session that has run once (the JVM's compiler has compiled the pipeline's
  code, each process's heap has grown), the state a long-lived session works in. The
  targets are printed for both runs.

From Spark's own REST API (``/api/v1/.../stages`` and each stage's task list; the UI is on for
the bench): the bytes shuffled (written) per run, and for the stage that reads the most shuffle
bytes (stage 2, the per-connection decode), the largest task's share of them. The stage-1
share is the largest packed unit group's share of the capture bytes (the plan). Also per run:
the Spark jobs of the timed run, and the CPU seconds it cost in the JVM, in the Python workers
(the processes under the JVM) and in the driver, read from ``/proc`` (the task metrics do not
see the Python side), to tell CPU from waiting on a shared machine; and where the JVM's went,
by thread name (``/proc/<jvm>/task/*/stat``: executor task threads, JIT compiler, GC, py4j).
The issue's targets are printed next to the figures: local[2] >= 1.7x local[1]; local[2] <=
1.5x one export process; no task above 1/N + 10 % of the bytes. Not a test: the numbers depend
on the machine, so the load average is printed before and after.

Usage::

    python benchmarks/bench_spark.py                    # 4 copies of the 250 MB capture (~1 GB)
    python benchmarks/bench_spark.py --copies 1 --rotate-mb 64
    python benchmarks/bench_spark.py --source my.pcap --broker-port 9092
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / ".data"
WORK = DATA / "spark"
DEFAULT_SOURCE = DATA / "bench-250mb-plain.pcap"
PCAP_HEADER = struct.Struct("<IHHiIII")
RECORD = struct.Struct("<IIII")
GAP_US = 1_000_000  # between copies


# --------------------------------------------------------------------------- the input set
def _read_pcap(path: Path) -> list[tuple[int, bytes]]:
    """[(µs timestamp, packet)] of a little-endian µs Ethernet pcap."""
    raw = path.read_bytes()
    magic, _vmaj, _vmin, _tz, _sig, _snap, linktype = PCAP_HEADER.unpack_from(raw, 0)
    if magic != 0xA1B2C3D4 or linktype != 1:
        raise SystemExit(f"{path}: need a little-endian µs Ethernet pcap (tcpdump -w)")
    out, off = [], PCAP_HEADER.size
    while off + RECORD.size <= len(raw):
        sec, usec, incl, _orig = RECORD.unpack_from(raw, off)
        off += RECORD.size
        out.append((sec * 1_000_000 + usec, raw[off : off + incl]))
        off += incl
    return out


def _move_client(data: bytes, broker_port: int, ip: bytes) -> bytes:
    """The client side of an Ethernet/IPv4/TCP packet moved to `ip` (kanalyze does not check
    IP or TCP checksums); other packets unchanged."""
    if len(data) < 38 or data[12:14] != b"\x08\x00" or data[23] != 6:
        return data
    ihl = (data[14] & 0x0F) * 4
    sport, dport = struct.unpack_from("!HH", data, 14 + ihl)
    b = bytearray(data)
    if dport == broker_port:
        b[26:30] = ip
    elif sport == broker_port:
        b[30:34] = ip
    return bytes(b)


def build_set(source: Path, broker_port: int, copies: int, rotate_mb: int) -> list[Path]:
    """`copies` shifted, re-addressed copies of `source`, cut tcpdump -C style into files."""
    out_dir = WORK / f"rot-{source.stem}-x{copies}-{rotate_mb}mb"
    done = out_dir / ".complete"
    if done.exists():
        return sorted(p for p in out_dir.iterdir() if p.name.startswith("kafka.pcap"))
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    recs = _read_pcap(source)
    span = recs[-1][0] - recs[0][0] + GAP_US
    limit = rotate_mb * 1_000_000
    files: list[Path] = []
    f = None
    size = 0
    for k in range(copies):
        ip = bytes([10, 0, k & 255, 1])
        shift = k * span
        for us, data in recs:
            if f is None or size > limit:
                if f is not None:
                    f.close()
                path = out_dir / ("kafka.pcap" + (str(len(files)) if files else ""))
                files.append(path)
                f = open(path, "wb")  # noqa: SIM115 - closed on rotation and at the end
                f.write(PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
                size = PCAP_HEADER.size
            t = us + shift
            pkt = _move_client(data, broker_port, ip)
            f.write(RECORD.pack(t // 1_000_000, t % 1_000_000, len(pkt), len(pkt)) + pkt)
            size += RECORD.size + len(pkt)
    if f is not None:
        f.close()
    done.touch()
    return files


# --------------------------------------------------------------------------- timed runs
def run_offline(files: list[Path]) -> dict:
    out = WORK / "offline.ndjson"
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--jobs", "1", *map(str, files),
         "-o", str(out)],
        check=True, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - t
    with open(out, "rb") as fh:
        n = sum(1 for _ in fh)
    out.unlink()
    return {"wall": wall, "exchanges": n}


def _get(url: str) -> list | dict:
    with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 - the local Spark UI
        return json.loads(r.read())


def _shuffle_figures(ui: str, app: str) -> dict:
    """Bytes shuffled and, for the stage that reads the most shuffle bytes, the largest task's
    share (Spark's REST API)."""
    base = f"{ui}/api/v1/applications/{app}"
    stages = _get(f"{base}/stages")
    written = sum(s.get("shuffleWriteBytes", 0) for s in stages)
    top = max(stages, key=lambda s: s.get("shuffleReadBytes", 0), default=None)
    share = None
    tasks = 0
    if top and top.get("shuffleReadBytes"):
        tl = _get(f"{base}/stages/{top['stageId']}/{top['attemptId']}/taskList?length=100000")
        reads = []
        for t in tl:
            m = (t.get("taskMetrics") or {}).get("shuffleReadMetrics") or {}
            reads.append(m.get("remoteBytesRead", 0) + m.get("localBytesRead", 0))
        tasks = len(reads)
        share = max(reads) / max(1, sum(reads))
    return {"shuffle_written": written, "stage2_tasks": tasks, "stage2_max_share": share}


def _tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of the JVM `root` and, apart, of the processes under it (the
    Python workers), from /proc: Spark's task metrics do not see the Python side; and how
    many such processes there are."""
    tick = os.sysconf("SC_CLK_TCK")
    stat: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stat[int(d)] = (int(f[1]), (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / tick)
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in stat.items():
        kids.setdefault(ppid, []).append(pid)
    below = 0.0
    todo = list(kids.get(root, []))
    seen = 0
    while todo:
        pid = todo.pop()
        below += stat[pid][1]
        seen += 1
        todo.extend(kids.get(pid, []))
    jvm = stat.get(root, (0, 0.0))[1]
    return {"jvm": jvm, "workers": below, "processes": seen}


def _jvm_threads(pid: int) -> dict[str, float]:
    """CPU seconds per kind of JVM thread (names with their numbers dropped: "Executor task
    launch worker for task 3" and "... 7" count together), from /proc/PID/task/*/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue  # the thread ended
        name = raw[raw.index("(") + 1 : raw.rindex(")")].rstrip("0123456789#-_ ")
        f = raw.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / tick
    return out


def _jvm_pid(spark) -> int:  # noqa: ANN001
    return spark.sparkContext._gateway.proc.pid  # noqa: SLF001 - the local JVM (bench only)


def _jobs(ui: str, app: str) -> int:
    return len(_get(f"{ui}/api/v1/applications/{app}/jobs"))


# small bundled captures for the warm-up, each its own capture group (so its own stage-1 task)
WARM_UP = ("lib_acks.pcap", "kp_codecs.pcap", "lib_codecs.pcap", "kp_v25.pcap", "admin.pcap",
           "aio_group.pcap", "kjs_group.pcap", "go_sarama.pcap")


def warm_up_inputs(cores: int) -> list[str]:
    """Two tasks per core for the warm-up, so that every Python worker of the session has
    started and imported the engine before the timed run (one capture started only one of
    local[2]'s two workers: the timed run then paid the second one's start, 0.3-0.4 s of
    its wall time, and local[1] did not)."""
    n = max(1, min(len(WARM_UP), 2 * cores))
    return [str(ROOT / "captures" / name) for name in WARM_UP[:n]]


def run_spark_child(master: str, files: list[str], out: str, split_mb: int) -> dict:
    """The body of one Spark process (`--child MASTER`): session, warm-up, timed pipeline."""
    from kanalyze.spark.pipeline import run_pipeline
    from kanalyze.spark.session import get_session

    t = time.perf_counter()
    spark = get_session(master, "kanalyze-bench", {"spark.ui.enabled": "true",
                                                   "spark.ui.port": "0"})  # fmt: skip
    startup = time.perf_counter() - t
    t = time.perf_counter()
    run_pipeline(spark, warm_up_inputs(spark.sparkContext.defaultParallelism), out + "-warm")
    warm = time.perf_counter() - t
    sc = spark.sparkContext
    jobs0 = _jobs(sc.uiWebUrl, sc.applicationId)
    jvm = _jvm_pid(spark)
    cpu0, self0, th0 = _tree_cpu(jvm), time.process_time(), _jvm_threads(jvm)
    t = time.perf_counter()
    res = run_pipeline(spark, files, out, split_bytes=split_mb << 20)
    wall = time.perf_counter() - t
    cpu1, self1, th1 = _tree_cpu(jvm), time.process_time(), _jvm_threads(jvm)
    # threads that ended during the run are missing from th1: their CPU is in cpu1 only
    threads = sorted(((round(v - th0.get(k, 0.0), 2), k) for k, v in th1.items()), reverse=True)
    bal = res.balance or {}
    figures = _shuffle_figures(sc.uiWebUrl, sc.applicationId)
    figures["jobs"] = _jobs(sc.uiWebUrl, sc.applicationId) - jobs0
    # Python workers started by the timed run itself (the warm-up should have started all)
    figures["new_processes"] = cpu1["processes"] - cpu0["processes"]
    figures["cpu"] = {"jvm": round(cpu1["jvm"] - cpu0["jvm"], 1),
                      "python_workers": round(cpu1["workers"] - cpu0["workers"], 1),
                      "driver": round(self1 - self0, 1)}  # fmt: skip
    figures["jvm_threads"] = {k: v for v, k in threads[:6] if v >= 0.05}
    # the same run again: a session that has run once (the JVM's compiler done with the
    # pipeline's code, every process's heap grown), the state a long-lived session works in
    t = time.perf_counter()
    again = run_pipeline(spark, files, out, split_bytes=split_mb << 20)
    figures["wall_again"] = time.perf_counter() - t
    figures["exchanges_again"] = again.counts.get("exchanges")
    spark.stop()
    return {
        "master": master, "startup": startup, "warmup": warm, "wall": wall,
        "phases": res.seconds, "exchanges": res.counts.get("exchanges"),
        "path": "ranges" if "ranges" in bal else "shuffle",
        "balance": bal,
        "stage1_tasks": int(bal.get("stage1_tasks", 0)),
        "stage1_max_share": bal.get("stage1_max_share"), "cpu_max_share": bal.get("cpu_max_share"),
        **figures,
    }  # fmt: skip


def run_spark(master: str, files: list[Path], split_mb: int) -> dict:
    out = WORK / ("out-" + master.removeprefix("local[").rstrip("]"))
    cmd = [sys.executable, __file__, "--child", master, "--split-mb", str(split_mb),
           "--out", str(out), *map(str, files)]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    total = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(str(out) + "-warm", ignore_errors=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process"] = total
    return res


def _fmt_share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a real-client capture")
    ap.add_argument("--broker-port", type=int, default=None, help="default: from SOURCE.json")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--rotate-mb", type=int, default=128)
    ap.add_argument("--split-mb", type=int, default=128)
    ap.add_argument("--keep", action="store_true", help="keep the generated rotation set")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = run_spark_child(args.child, args.files, args.out, args.split_mb)
        sys.stdout.write(json.dumps(res) + "\n")
        return 0

    port = args.broker_port
    if port is None:
        port = int(json.loads(args.source.with_suffix(".json").read_text())["port"])
    t = time.perf_counter()
    files = build_set(args.source, port, args.copies, args.rotate_mb)
    total = sum(p.stat().st_size for p in files)
    print(f"input: {len(files)} files, {total / 1e6:.0f} MB ({args.copies} copies of "
          f"{args.source.name}, rotated at {args.rotate_mb} MB), built in "
          f"{time.perf_counter() - t:.0f} s")  # fmt: skip
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}")
    try:
        off = run_offline(files)
        print(f"export --jobs 1: {off['wall']:.1f} s, {off['exchanges']} exchanges", flush=True)
        runs = []
        for master in ("local[1]", "local[2]"):
            r = run_spark(master, files, args.split_mb)
            runs.append(r)
            print(f"{master}: pipeline {r['wall']:.1f} s on the {r['path']} path (session "
                  f"{r['startup']:.1f} s, warm-up {r['warmup']:.1f} s, process "
                  f"{r['process']:.1f} s), {r['exchanges']} exchanges, phases "
                  f"{ {k: round(v, 1) for k, v in r['phases'].items()} }, load "
                  f"{os.getloadavg()}", flush=True)  # fmt: skip
            print(f"  balance: {json.dumps(r['balance'])}", flush=True)
            print(f"  Spark jobs: {r['jobs']}, new processes: {r['new_processes']}, CPU s during "
                  f"the run: {json.dumps(r['cpu'])}", flush=True)
            print(f"  JVM CPU s by thread: {json.dumps(r['jvm_threads'])}", flush=True)
            print(f"  the same run again on this session: {r['wall_again']:.2f} s "
                  f"(first: {r['wall']:.2f} s), {r['exchanges_again']} exchanges", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    one, two = runs
    print()
    print(f"{'run':10} {'wall s':>8} {'vs export':>10} {'shuffled MB':>12} {'stage-1 max':>12} "
          f"{'stage-2 max':>12} {'tasks 1/2':>10} {'exchanges':>10}")  # fmt: skip
    print(f"{'export':10} {off['wall']:8.1f} {1:10.2f} {'-':>12} {'-':>12} {'-':>12} {'-':>10} "
          f"{off['exchanges']:>10}")  # fmt: skip
    for r in runs:
        print(f"{r['master']:10} {r['wall']:8.1f} {r['wall'] / off['wall']:10.2f} "
              f"{r['shuffle_written'] / 1e6:12.1f} {_fmt_share(r['stage1_max_share']):>12} "
              f"{_fmt_share(r['stage2_max_share']):>12} "
              f"{r['stage1_tasks']:>4}/{r['stage2_tasks']:<5} {r['exchanges']:>10}")  # fmt: skip
    print()
    cap = 1 / 2 + 0.10
    for key, which in (("wall", "a session's first run"), ("wall_again", "its second run")):
        print(f"local[2] vs local[1], {which}: {one[key] / two[key]:.2f}x (target >= 1.7x); "
              f"local[2] vs one export process: {two[key] / off['wall']:.2f}x the wall time "
              f"(target <= 1.5x)")  # fmt: skip
    stages = [(1, "capture bytes", two["stage1_max_share"], two["stage1_tasks"])]
    if two["path"] == "shuffle":  # the range path has no stage 2 (no packet is shuffled)
        stages.append((2, "shuffle bytes", two["stage2_max_share"], two["stage2_tasks"]))
    for stage, what, share, tasks in stages:
        print(f"largest stage-{stage} task on local[2]: {_fmt_share(share)} of the {what} "
              f"(target <= 1/{tasks} tasks + 10 % = {1 / max(1, tasks) + 0.10:.0%}; "
              f"<= {cap:.0%} with N = 2 cores)")  # fmt: skip
    same = off["exchanges"] == one["exchanges"] == two["exchanges"] == one["exchanges_again"] \
        == two["exchanges_again"]
    print(f"exchanges equal (export = local[1] = local[2]): {same}")
    print(f"shuffled: {two['shuffle_written'] / 1e6:.0f} MB of {total / 1e6:.0f} MB captured")
    print(f"load average after: {os.getloadavg()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
