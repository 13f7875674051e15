"""`kanalyze live -i lo` across real clients and a real broker (tansu), checked against the
clients' own truth and against tcpdump's capture of the same traffic."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.live.conftest import Live, Tcpdump, needs_root

pytestmark = [pytest.mark.slow, needs_root]
TOPIC = "live-truth"
PARTITIONS = 3
N = 600


def produce(port: int, n: int, topic: str = TOPIC, **conf: object) -> dict[str, tuple[int, int]]:
    """n records with acks=all; what the delivery reports say: value -> (partition, offset)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 5, **conf})
    acked: dict[str, tuple[int, int]] = {}

    def report(err, msg) -> None:  # noqa: ANN001
        assert err is None, err
        acked[msg.value().decode()] = (msg.partition(), msg.offset())

    for i in range(n):
        p.produce(
            topic,
            value=f"m-{i}".encode(),
            key=str(i % 7).encode(),
            partition=i % PARTITIONS,
            on_delivery=report,
        )
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(20) == 0
    return acked


def produce_kafka_python(port: int, n: int, topic: str = TOPIC) -> dict[str, tuple[int, int]]:
    """n records with kafka-python (acks=all); value -> (partition, offset) from its futures."""
    import warnings

    with warnings.catch_warnings():  # kafka-python 3.0.12 warns at import (importlib.resources)
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks="all", linger_ms=5)
    futures = {
        f"kp-{i}": p.send(topic, value=f"kp-{i}".encode(), partition=i % PARTITIONS)
        for i in range(n)
    }
    p.flush(20)
    acked = {}
    for v, f in futures.items():
        md = f.get(timeout=20)
        acked[v] = (md.partition, md.offset)
    p.close(5)
    return acked


def create_topic(port: int, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def consume(
    port: int, group: str, expect: int, topic: str = TOPIC, commit_at: dict[int, int] | None = None
) -> dict[int, int]:
    """Read every partition from 0 with assign(); commit `commit_at` offsets (default: all read).
    Returns partition -> committed offset."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    ends: dict[int, int] = {}
    got = 0
    deadline = time.monotonic() + 30
    while got < expect and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got += 1
        ends[m.partition()] = m.offset() + 1
    assert got == expect
    commits = commit_at if commit_at is not None else ends
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()], asynchronous=False)
    c.close()
    return commits


def read_ndjson(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def produced(exchanges: list[dict], topic: str = TOPIC) -> dict[str, tuple[int, int]]:
    """value -> (partition, offset) from Produce requests to `topic` and their responses, as
    kanalyze saw them (only the test's topic: a client another test left behind may still
    reach a broker port that test had, which this broker now has)."""
    out: dict[str, tuple[int, int]] = {}
    for d in exchanges:
        if d["api"] != "Produce" or d["status"] != "ok":
            continue
        base = {}
        for t in d["response"]["body"]["responses"]:
            for p in t["partition_responses"]:
                if p["error_code"] == 0:
                    base[(t["name"], p["index"])] = p["base_offset"]
        for t in d["request"]["body"]["topic_data"]:
            if t["name"] != topic:
                continue
            for p in t["partition_data"]:
                b = base.get((t["name"], p["index"]))
                if b is None:
                    continue
                for batch in p["records"]["batches"]:
                    for r in batch["records"]:
                        v = r["value"]
                        assert v not in out, f"record {v} produced twice"
                        # the broker assigns offsets from its base offset, in request order
                        out[v] = (p["index"], b + batch["base_offset"] + r["offset_delta"])
    return out


def keys(exchanges: list[dict]) -> list[tuple]:
    return [
        (d["connection"]["client"], d["connection"]["broker"], d["correlation_id"], d["api"])
        for d in exchanges
    ]


@pytest.mark.parametrize("iface", ["lo", "any"])
def test_live_matches_client_truth_and_tcpdump(broker: int, tmp_path: Path, iface: str) -> None:
    out, pcap, ref = tmp_path / "out.ndjson", tmp_path / "live.pcap", tmp_path / "tcpdump.pcap"
    td = Tcpdump(broker, ref)
    live = Live(
        ["-i", iface, "--port", str(broker), "-o", str(out), "--write-pcap", str(pcap)], tmp_path
    )
    try:
        create_topic(broker)
        acked = produce(broker, N)
        acked.update(produce_kafka_python(broker, N // 3))
        committed = consume(broker, "live-group", len(acked))
        time.sleep(1.0)  # FIN/ACK tails
    finally:
        rc, err = live.stop()
        td_err = td.stop()
    assert rc == 0, err
    assert "Traceback" not in err
    assert "SIGINT" in err and "exchanges:" in err

    ex = read_ndjson(out)
    # every record the clients produced, at the offset their delivery report gave
    assert len(acked) == N + N // 3
    assert produced(ex) == acked
    # no exchange twice
    k = Counter(
        (d["connection"]["id"], d["correlation_id"]) for d in ex if d["correlation_id"] is not None
    )
    assert [x for x, n in k.items() if n > 1] == []
    # the commit the consumer made
    commits = {}
    for d in ex:
        if d["api"] == "OffsetCommit" and d["status"] == "ok":
            for t in d["request"]["body"]["topics"]:
                for p in t["partitions"]:
                    commits[p["partition_index"]] = p["committed_offset"]
    assert commits == committed

    # nothing lost compared with tcpdump's capture of the same traffic
    offline = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--port", str(broker), str(ref)],
        capture_output=True,
        text=True,
        check=True,
    )
    ref_ex = [json.loads(line) for line in offline.stdout.splitlines()]
    assert ref_ex, "tcpdump captured nothing"
    live_ok = Counter(x for x, d in zip(keys(ex), ex, strict=True) if d["status"] == "ok")
    ref_ok = Counter(x for x, d in zip(keys(ref_ex), ref_ex, strict=True) if d["status"] == "ok")
    assert ref_ok - live_ok == Counter()
    # and nothing more, unless the reference itself lost packets (tcpdump under load says so)
    dropped = re.search(r"(\d+) packets? dropped by kernel", td_err)
    if dropped is None or int(dropped.group(1)) == 0:
        assert live_ok == ref_ok

    # what --write-pcap saved, exported offline, is exactly what live mode wrote
    again = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--port", str(broker), str(pcap)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.splitlines() == out.read_text().splitlines()
