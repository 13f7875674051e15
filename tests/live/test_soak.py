"""A bounded soak: a few minutes of steady traffic (long-lived producer and consumer, plus a new
short-lived client connection every couple of seconds); the RSS of `kanalyze live` must stay flat
after warm-up. KANALYZE_SOAK_SECONDS overrides the length (default 150 s)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.live.conftest import Live, needs_root, rss_kib
from tests.live.test_live_capture import PARTITIONS, create_topic

pytestmark = [pytest.mark.slow, needs_root]
TOPIC = "soak"
SECONDS = float(os.environ.get("KANALYZE_SOAK_SECONDS", "150"))
WARMUP = min(40.0, SECONDS / 3)
SAMPLE_EVERY = 5.0
TOLERANCE_KIB = 12 * 1024  # spread of the samples after warm-up
DRIFT_KIB = 6 * 1024  # mean of the last third minus mean of the first third


def test_memory_flat_under_steady_traffic(broker: int, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    out = tmp_path / "soak.ndjson"
    create_topic(broker, TOPIC)
    live = Live(
        [
            "-i",
            "lo",
            "--port",
            str(broker),
            "-o",
            str(out),
            "--idle-timeout",
            "10",
            "--pending-timeout",
            "10",
        ],
        tmp_path,
    )
    stop = threading.Event()
    acked: list[str] = []
    errors: list[str] = []

    def producer() -> None:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{broker}", "acks": "all", "linger.ms": 2})
        i = 0
        while not stop.is_set():
            for _ in range(20):
                p.produce(
                    TOPIC,
                    value=f"s-{i}".encode(),
                    partition=i % PARTITIONS,
                    on_delivery=lambda e, m: (
                        errors.append(str(e)) if e else acked.append(m.value().decode())
                    ),
                )
                i += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(20)

    def consumer() -> None:
        c = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{broker}",
                "group.id": "soak",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 200,
            }
        )
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        last_commit = time.monotonic()
        while not stop.is_set():
            c.poll(0.2)
            if time.monotonic() - last_commit > 2:
                c.commit(asynchronous=False) if c.position(c.assignment()) else None
                last_commit = time.monotonic()
        c.close()

    def churn() -> None:
        # short-lived connections: open, a few requests, close
        n = 0
        while not stop.is_set():
            p = Producer({"bootstrap.servers": f"127.0.0.1:{broker}", "acks": "1"})
            p.produce(TOPIC, value=f"c-{n}".encode(), partition=0)
            p.flush(10)
            del p
            n += 1
            stop.wait(2.0)

    threads = [threading.Thread(target=f, daemon=True) for f in (producer, consumer, churn)]
    samples: list[tuple[float, int]] = []
    t0 = time.monotonic()
    try:
        for t in threads:
            t.start()
        while (el := time.monotonic() - t0) < SECONDS:
            samples.append((round(el, 1), rss_kib(live.proc.pid)))
            time.sleep(SAMPLE_EVERY)
        stop.set()
        for t in threads:
            t.join(30)
        time.sleep(1.0)
    finally:
        stop.set()
        rc, err = live.stop()
    assert rc == 0, err
    assert not errors
    after = [kib for el, kib in samples if el >= WARMUP]
    third = max(1, len(after) // 3)
    drift = sum(after[-third:]) / third - sum(after[:third]) / third
    report = {
        "seconds": SECONDS,
        "warmup": WARMUP,
        "rss_kib": samples,
        "spread_kib": max(after) - min(after),
        "drift_kib": round(drift),
    }
    (tmp_path / "soak.json").write_text(json.dumps(report))
    print("soak:", json.dumps(report))
    print(err)
    with out.open() as f:
        lines = sum(1 for _ in f)
    assert lines > 300
    # every record acknowledged to the long-lived producer is in the output
    seen = set()
    with out.open() as f:
        for line in f:
            if '"Produce"' not in line:
                continue
            d = json.loads(line)
            for t in d["request"]["body"]["topic_data"]:
                for p in t["partition_data"]:
                    for b in p["records"]["batches"]:
                        seen.update(r["value"] for r in b["records"])
    assert set(acked) <= seen
    assert max(after) - min(after) <= TOLERANCE_KIB, report
    assert drift <= DRIFT_KIB, report
