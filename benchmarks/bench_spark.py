#!/usr/bin/env python3
"""Spark local[N] next to the offline single process, on one large capture and on many small files.

The inputs are built here from the committed real-client captures (``captures/*.pcap``) and cached
in ``benchmarks/.data/spark/`` (git-ignored):

* **large**: copies of every real capture, one after the other in time, each copy's client side
  moved to its own address (10.x.y.z), so the file holds many distinct connections (about
  ``--large-mb`` MB of genuine client/broker traffic);
* **small**: ``--small-files`` files, each one such copy of one real capture (a directory of
  rotated/independent captures, one capture group).

``--large PATH`` times an existing capture instead (e.g. ``benchmarks/.data/bench-250mb-plain.pcap``
from ``bench_export.py``: few, very long connections, the worst case for per-connection
parallelism).

Timed, per input: ``kanalyze export`` (full bodies, the offline single process) and the Spark
pipeline (``run_pipeline``: all tables, full bodies) on a ``local[N]`` session whose start-up is
reported apart. Both must give the same number of exchanges. Not a test: numbers depend on the
machine (report the load average alongside).

Usage::

    python benchmarks/bench_spark.py                       # 200 MB large, 120 small files, local[2]
    python benchmarks/bench_spark.py --large-mb 50 --small-files 100
    python benchmarks/bench_spark.py --large benchmarks/.data/bench-250mb-plain.pcap
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / ".data" / "spark"
CAPTURES = ROOT / "captures"
SPAN_GAP_NS = 1_000_000_000


def _records(path: Path) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """(global header, [(sec, usec, data)]) of a little/big-endian µs pcap."""
    raw = path.read_bytes()
    endian = "<" if raw[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    rec = struct.Struct(endian + "IIII")
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, usec, incl, _orig = rec.unpack_from(raw, off)
        out.append((sec, usec, raw[off + 16 : off + 16 + incl]))
        off += 16 + incl
    return raw[:24], out


def _retarget(data: bytes, broker_port: int, client_ip: bytes) -> bytes:
    """Move the client side of an Ethernet/IPv4/TCP packet to `client_ip` (checksums are not
    checked by kanalyze; the broker stays where it was)."""
    if len(data) < 34 or data[12:14] != b"\x08\x00" or data[23] != 6:
        return data
    ihl = (data[14] & 0x0F) * 4
    sport, dport = struct.unpack_from("!HH", data, 14 + ihl)
    b = bytearray(data)
    if dport == broker_port:
        b[26:30] = client_ip
    elif sport == broker_port:
        b[30:34] = client_ip
    return bytes(b)


def _sources() -> list[tuple[Path, int]]:
    out = []
    for p in sorted(CAPTURES.glob("*.pcap")):
        truth = p.with_suffix(".truth.json")
        if truth.exists():
            out.append((p, int(json.loads(truth.read_text())["broker"]["port"])))
    return out


def _copies(n_bytes: int | None, n_copies: int | None):
    """Yield (copy number, source, global header, shifted records) until the budget is spent."""
    srcs = [(p, port, *_records(p)) for p, port in _sources()]
    t = 0
    k = 0
    total = 0
    while (n_bytes is not None and total < n_bytes) or (n_copies is not None and k < n_copies):
        p, port, hdr, recs = srcs[k % len(srcs)]
        ip = bytes([10, (k >> 16) & 255, (k >> 8) & 255, k & 255])
        t0 = recs[0][0] * 1_000_000 + recs[0][1]
        base = 1_800_000_000_000_000 + t
        shifted = []
        for sec, usec, data in recs:
            us = base + (sec * 1_000_000 + usec - t0)
            shifted.append((us // 1_000_000, us % 1_000_000, _retarget(data, port, ip)))
            total += 16 + len(data)
        t = (
            (shifted[-1][0] * 1_000_000 + shifted[-1][1])
            - 1_800_000_000_000_000
            + SPAN_GAP_NS // 1000
        )
        yield k, p, hdr, shifted
        k += 1


def _write(path: Path, hdr: bytes, recs: list[tuple[int, int, bytes]], mode: str = "wb") -> None:
    with open(path, mode) as f:
        if mode == "wb":
            f.write(hdr)
        for sec, usec, data in recs:
            f.write(struct.pack("<IIII", sec, usec, len(data), len(data)) + data)


def build_large(mb: int) -> Path:
    path = DATA / f"large-{mb}mb.pcap"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    first = True
    for _k, _p, _hdr, recs in _copies(mb * 1_000_000, None):
        _write(
            tmp,
            struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1),
            recs,
            "wb" if first else "ab",
        )
        first = False
    tmp.rename(path)
    return path


def build_small(n: int) -> Path:
    d = DATA / f"small-{n}"
    if d.is_dir() and len(list(d.glob("*.pcap"))) == n:
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for k, p, _hdr, recs in _copies(None, n):
        _write(
            d / f"{k:04d}-{p.stem}.pcap",
            struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1),
            recs,
        )
    return d


def offline(paths: list[str]) -> tuple[float, float, int]:
    """(wall s, cpu s, exchanges) of `kanalyze export` in its own process."""
    out = DATA / "offline.ndjson"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", *paths, "-o", str(out)], check=True
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(out, "rb") as f:
        n = sum(1 for _ in f)
    out.unlink()
    return wall, cpu, n


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--large-mb", type=int, default=200)
    ap.add_argument("--small-files", type=int, default=120)
    ap.add_argument(
        "--large", default=None, help="time this capture instead of the generated large one"
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--split-mb", type=int, default=32, help="byte-range size for the large capture"
    )
    ap.add_argument("--skip-offline", action="store_true")
    args = ap.parse_args()

    large = Path(args.large) if args.large else build_large(args.large_mb)
    small = build_small(args.small_files)
    small_files = sorted(str(p) for p in small.glob("*.pcap"))
    small_mb = sum(os.path.getsize(p) for p in small_files) / 1e6
    inputs = {
        f"large ({large.stat().st_size / 1e6:.0f} MB, 1 file)": ([str(large)], args.split_mb),
        f"small ({len(small_files)} files, {small_mb:.1f} MB)": ([str(small)], args.split_mb),
    }

    from kanalyze.spark.pipeline import run_pipeline
    from kanalyze.spark.session import get_session

    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}")
    t = time.perf_counter()
    spark = get_session(args.master, "kanalyze-bench")
    startup = time.perf_counter() - t
    print(f"Spark {spark.version} {args.master}: session start {startup:.1f} s")
    # warm the Python workers once so the first input does not pay for them
    t = time.perf_counter()
    run_pipeline(spark, [str(CAPTURES / "lib_acks.pcap")], str(DATA / "out-warm"))
    print(f"warm-up run (tiny capture): {time.perf_counter() - t:.1f} s")
    rows = []
    for label, (paths, split_mb) in inputs.items():
        if args.skip_offline:
            ow = oc = on = float("nan")
        else:
            expanded = paths if len(paths) > 1 or not os.path.isdir(paths[0]) else small_files
            ow, oc, on = offline(expanded)
        t = time.perf_counter()
        res = run_pipeline(spark, paths, str(DATA / "out"), split_bytes=split_mb << 20)
        sw = time.perf_counter() - t
        rows.append(
            (label, ow, oc, on, sw, res.counts["exchanges"], len(res.plan.units), res.seconds)
        )
    spark.stop()
    print()
    print(
        f"{'input':34} {'offline s':>10} {'(cpu s)':>8} {'spark s':>8} {'speed-up':>8} "
        f"{'exchanges offline/spark':>24} units"
    )
    for label, ow, oc, on, sw, sn, units, secs in rows:
        print(f"{label:34} {ow:10.1f} {oc:8.1f} {sw:8.1f} {ow / sw:8.2f} {on:>12}/{sn:<11} {units}")
        print(f"{'':34} spark phases: " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()))
    print(
        f"(+ {startup:.1f} s Spark session start-up, paid once); "
        f"load average after: {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
