#!/usr/bin/env python3
"""CPU seconds per MB of Kafka payload of `kanalyze live --workers N`, by a pcap replayed on
loopback: the same packets for every N, at a paced rate, with nothing else on the wire.

The frames are sent on `lo` from an AF_PACKET socket with the Ethernet destination rewritten
to a unicast address that is not the interface's: capture sockets see them like any frame,
and the kernel's IP layer drops them (`PACKET_OTHERHOST`), so no TCP stack answers and the
replay needs neither the broker nor the clients. (tcpreplay does the same, where installed.)

For each N, `kanalyze live -i lo --port P -o OUT --workers N` is started, left idle for
`--idle` seconds (the constant: pipes, watchers, ticks), then the pcap is replayed at
`--rate` MB/s of frames; once the capture has caught up (its packet count stops moving) the
CPU time of the parent and of each worker is read from /proc before the stop. A run is valid
only with zero kernel drops (a dropped packet costs nothing); the summary line says so.

Record a pcap with tcpdump on lo beside `benchmarks/bench_live.py`'s load (real clients and
broker), e.g. `tcpdump -i lo -s 0 -B 131072 -w load.pcap tcp port P`.

Usage::

    python benchmarks/bench_live_cpu.py --pcap load.pcap --port P --workers 1,2 [--rate 8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1_000_000
NOT_US = b"\x02\x00\x00\x00\x00\x01"  # locally administered unicast: not lo's 00:00:00:00:00:00
TICK = os.sysconf("SC_CLK_TCK")


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.1f} {b:.1f} {c:.1f}"


def read_pcap(path: Path, limit_s: float | None) -> tuple[list[bytes], int]:
    """The frames (Ethernet, destination rewritten) and their TCP payload bytes in total."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    if struct.unpack_from(end + "I", data, 20)[0] != 1:
        raise SystemExit("bench_live_cpu: an Ethernet pcap (tcpdump -i lo) is needed")
    rec = struct.Struct(end + "IIII")
    frames: list[bytes] = []
    payload = 0
    pos, first = 24, None
    while pos + 16 <= len(data):
        sec, _frac, incl, _orig = rec.unpack_from(data, pos)
        pos += 16
        frame = data[pos : pos + incl]
        pos += incl
        if first is None:
            first = sec
        if limit_s is not None and sec - first > limit_s:
            break
        if len(frame) < 54 or frame[12:14] != b"\x08\x00":
            continue
        ihl = (frame[14] & 15) * 4
        total = struct.unpack_from(">H", frame, 16)[0]
        thl = (frame[14 + ihl + 12] >> 4) * 4
        payload += max(0, total - ihl - thl)
        frames.append(NOT_US + frame[6:])
    return frames, payload


def replay(frames: list[bytes], rate_mb: float) -> float:
    """Send every frame on lo at `rate_mb` MB/s of frame bytes; returns the seconds taken."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
    sock.bind(("lo", 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    per_byte = 1.0 / (rate_mb * MB)
    sent = 0
    t0 = time.monotonic()
    for frame in frames:
        ahead = t0 + sent * per_byte - time.monotonic()
        if ahead > 0.002:
            time.sleep(ahead)
        sock.send(frame)
        sent += len(frame)
    sock.close()
    return time.monotonic() - t0


def cpu_s(pid: int, which: slice = slice(11, 13)) -> float:
    """CPU seconds of one process so far: user + system (or `which` of the two)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[which]) / TICK


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the parent and each worker, and the system part of the whole tree."""
    pids = {"parent": pid} | {f"worker{i}": kid for i, kid in enumerate(children(pid))}
    out = {name: cpu_s(p) for name, p in pids.items()}
    out["system"] = sum(cpu_s(p, slice(12, 13)) for p in pids.values())
    return out


def run(
    frames: list[bytes], payload: int, port: int, workers: int, args: argparse.Namespace, tmp: Path
) -> dict:
    err = tmp / f"live-{workers}.stderr"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        *(sys.executable, "-m", "kanalyze.cli", "live", "-i", "lo", "--port", str(port)),
        *("-o", args.output, "--workers", str(workers)),
    ]
    with open(err, "w") as f:
        proc = subprocess.Popen(cmd, stderr=f, stdout=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while "capturing on" not in err.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(err.read_text())
            time.sleep(0.05)
        time.sleep(3.0)  # the workers forked and settled
        a = tree_cpu(proc.pid)
        time.sleep(args.idle)
        b = tree_cpu(proc.pid)
        took = replay(frames, args.rate)
        # caught up: the tree's CPU time stops growing (two readings 0.5 s apart, < 2 ticks)
        last = _total(tree_cpu(proc.pid))
        while True:
            time.sleep(0.5)
            now = _total(tree_cpu(proc.pid))
            if now - last < 2.0 / TICK + 0.5 * idle_rate(a, b, args.idle):
                break
            last = now
        c = tree_cpu(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    summary = err.read_text()
    drops = [int(x) for x in _after(summary, "passed the filter, ", " dropped")]
    busy = {k: c[k] - b.get(k, 0.0) for k in c}
    idle = {k: (b[k] - a.get(k, 0.0)) / args.idle for k in b}
    total = _total(busy)
    return {
        "workers": workers,
        "replayed_s": round(took, 1),
        "kafka_payload_mb": round(payload / MB, 1),
        "kernel_drops": drops[0] if drops else None,
        "cpu_s": {k: round(v, 2) for k, v in busy.items()},
        "cpu_s_total": round(total, 2),
        "cpu_ms_per_mb": round(1000 * total / (payload / MB), 1),
        "idle_cpu_ms_per_s": {k: round(1000 * v, 1) for k, v in idle.items()},
        "load": load(),
        "summary": [
            line.strip()
            for line in summary.splitlines()
            if line.strip().startswith(("packets:", "exchanges:", "workers:", "bytes skipped"))
        ],
    }


def idle_rate(a: dict[str, float], b: dict[str, float], seconds: float) -> float:
    return (_total(b) - _total(a)) / seconds


def _total(cpu: dict[str, float]) -> float:
    return sum(v for k, v in cpu.items() if k != "system")


def _after(text: str, head: str, tail: str) -> list[str]:
    return [
        line.split(head, 1)[1].split(tail, 1)[0]
        for line in text.splitlines()
        if head in line and tail in line
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcap", required=True, type=Path, help="Ethernet pcap of Kafka traffic")
    ap.add_argument("--port", required=True, type=int, help="the broker port in the pcap")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--rate", type=float, default=8.0, help="MB/s of frames replayed")
    ap.add_argument("--seconds", type=float, default=None, help="replay only the first S s")
    ap.add_argument("--idle", type=float, default=5.0, help="idle seconds measured first")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-o", "--output", default=os.devnull, help="kanalyze's NDJSON output")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_live_cpu: capturing on lo needs root (or CAP_NET_RAW)", file=sys.stderr)
        return 2
    frames, payload = read_pcap(args.pcap, args.seconds)
    size = sum(len(f) for f in frames)
    print(
        f"bench_live_cpu: {len(frames)} frames, {size / MB:.1f} MB, {payload / MB:.1f} MB of"
        f" TCP payload, replayed at {args.rate} MB/s; {os.cpu_count()} cores, {load()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-live-cpu-") as d:
        for _ in range(args.repeat):
            for w in (int(x) for x in args.workers.split(",")):
                print(json.dumps(run(frames, payload, args.port, w, args, Path(d))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
