"""`kanalyze live --workers 2` on loopback: the fanout group keeps connections whole, and the
merged output and metrics agree with the clients' truth and with each worker's own capture."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.live.conftest import Live, free_port, needs_root
from tests.live.test_live_capture import (
    consume,
    create_topic,
    keys,
    produce,
    produce_kafka_python,
    read_ndjson,
)

pytestmark = [pytest.mark.slow, needs_root]
TOPIC = "live-workers"


def can_capture() -> bool:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
    except (PermissionError, AttributeError, OSError):
        return False
    return True


needs_capture = pytest.mark.skipif(not can_capture(), reason="needs CAP_NET_RAW (AF_PACKET)")


@needs_capture
def test_fanout_hash_keeps_both_directions_of_a_connection_on_one_socket() -> None:
    """40 request/response connections on loopback: every packet of a connection, both
    directions, reaches the same socket of the group, and both sockets get connections."""
    from kanalyze.live.fanout import open_fanout

    port = free_port()
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    sources, _group = open_fanout("lo", f"tcp port {port}", 2, 65536, 4 << 20)

    def serve() -> None:
        for _ in range(40):
            c, _ = srv.accept()
            with c:
                c.sendall(b"response:" + c.recv(100))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        for i in range(40):
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(b"request %d" % i)
                assert c.recv(100) == b"response:request %d" % i
        t.join(10)
        time.sleep(0.2)
        seen: dict[int, set[int]] = {}  # client port -> sockets
        payload: dict[tuple[int, bool], int] = Counter()  # (socket, to the server) -> bytes
        for w, src in enumerate(sources):
            while (got := src.read(0)) is not None:
                ip = got[1][14:]  # loopback frames carry an Ethernet header
                ihl = (ip[0] & 0xF) * 4
                sport, dport = struct.unpack(">HH", ip[ihl : ihl + 4])
                to_server = dport == port
                seen.setdefault(sport if to_server else dport, set()).add(w)
                tcp_len = (ip[ihl + 12] >> 4) * 4
                payload[(w, to_server)] += len(ip) - ihl - tcp_len
            src.update_counters()
        assert len(seen) == 40
        assert [p for p, ws in seen.items() if len(ws) > 1] == []
        assert {w for ws in seen.values() for w in ws} == {0, 1}
        # requests and responses both reached each socket that had connections
        assert all(payload[(w, True)] > 0 and payload[(w, False)] > 0 for w in (0, 1))
        assert [s.counters.kernel_drops for s in sources] == [0, 0]
    finally:
        srv.close()
        for s in sources:
            s.close()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def export(pcap: Path, port: int) -> list[dict]:
    run = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--port", str(port), str(pcap)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in run.stdout.splitlines()]


@needs_capture
def test_two_workers_match_client_truth(broker: int, tmp_path: Path) -> None:
    from tests.live.test_live_capture import produced

    out, pcap = tmp_path / "out.ndjson", tmp_path / "live.pcap"
    mport = free_port({broker})
    live = Live(
        [
            *("-i", "lo", "--port", str(broker), "-o", str(out), "--workers", "2"),
            *("--prometheus", str(mport), "--write-pcap", str(pcap)),
        ],
        tmp_path,
    )
    try:
        create_topic(broker, TOPIC)
        acked = produce(broker, 300, TOPIC)
        acked.update(produce_kafka_python(broker, 100, TOPIC))
        committed = consume(broker, "workers-group", len(acked), TOPIC)
        time.sleep(2.5)  # connections closed, exchanges out, a report tick from each worker
        m = scrape(mport)
    finally:
        rc, err = live.stop()
    assert rc == 0, err
    assert "Traceback" not in err
    assert "2 workers" in err and "SIGINT" in err

    ex = read_ndjson(out)
    # merged in start-time order across the workers (within the watermark's clock slack);
    # merged by arrival, lines came up to a batch age (0.1 s) out of order
    starts = [(d.get("request") or d["response"])["ts"] for d in ex]
    back = [a - b for a, b in zip(starts, starts[1:], strict=False) if b < a]
    assert max(back, default=0.0) < 0.005, sorted(back)[-5:]
    # every record the clients produced, at the offsets their delivery reports gave, once
    assert produced(ex, TOPIC) == acked
    k = Counter((d["connection"]["id"], d["correlation_id"]) for d in ex)
    assert [x for x, n in k.items() if n > 1] == []
    commits = {
        p["partition_index"]: p["committed_offset"]
        for d in ex
        if d["api"] == "OffsetCommit" and d["status"] == "ok"
        for t in d["request"]["body"]["topics"]
        for p in t["partitions"]
    }
    assert commits == committed

    # each worker's pcap holds whole connections: none in both, and exporting them gives
    # every answered exchange of the merged output (request and response in one worker)
    w0, w1 = export(tmp_path / "live.w0.pcap", broker), export(tmp_path / "live.w1.pcap", broker)
    conns = [{(d["connection"]["client"], d["connection"]["broker"]) for d in w} for w in (w0, w1)]
    assert conns[0] & conns[1] == set()
    ok = Counter(x for x, d in zip(keys(ex), ex, strict=True) if d["status"] == "ok")
    both = [*w0, *w1]
    assert Counter(x for x, d in zip(keys(both), both, strict=True) if d["status"] == "ok") == ok

    # metrics: totals are the sums of the per-worker series; nothing dropped
    def per_worker(name: str) -> list[float]:
        return [m[(name, (("worker", str(w)),))] for w in (0, 1)]

    for total, each in (
        ("kanalyze_capture_kernel_drops_total", "kanalyze_worker_capture_kernel_drops_total"),
        ("kanalyze_capture_kernel_packets_total", "kanalyze_worker_capture_kernel_packets_total"),
        ("kanalyze_capture_packets_total", "kanalyze_worker_capture_packets_total"),
        ("kanalyze_exchanges_total", "kanalyze_worker_exchanges_total"),
    ):
        assert m[(total, ())] == sum(per_worker(each)), total
    assert m[("kanalyze_capture_kernel_drops_total", ())] == 0
    assert m[("kanalyze_capture_kernel_packets_total", ())] > 0
    # the request counters are every exchange written by then (all of them: traffic ended)
    assert sum(v for (n, _), v in m.items() if n == "kanalyze_requests_total") == len(ex)
    # and the summary's per-worker line adds up to its totals
    line = next(x for x in err.splitlines() if x.strip().startswith("workers: 2"))
    drops = [int(v) for v in line.split("kernel drops ")[1].split(",")[0].split(" + ")]
    assert drops == [0, 0]
    assert "(kernel: " in err and ", 0 dropped)" in err


@needs_capture
def test_workers_end_when_the_parent_is_killed(tmp_path: Path) -> None:
    import os
    import signal

    live = Live(
        ["-i", "lo", "--port", str(free_port()), "-o", os.devnull, "--workers", "2"], tmp_path
    )
    pid = live.proc.pid
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(kids) == 2
    live.stop(signal.SIGKILL, timeout=10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() < deadline:
        for k in kids:  # reap them if they are ours (they are the killed parent's: init reaps)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(int(k), os.WNOHANG)
        time.sleep(0.1)
    alive = [k for k in kids if Path(f"/proc/{k}").exists() and _state(k) != "Z"]
    for k in alive:  # do not leave them capturing after a failure
        with contextlib.suppress(OSError):
            os.kill(int(k), signal.SIGKILL)
    assert alive == []


def _state(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except OSError:
        return "Z"
