"""The Prometheus endpoint of `kanalyze live`, scraped during a run, agrees with the NDJSON."""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.live.conftest import Live, free_port, needs_root
from tests.live.test_live_capture import PARTITIONS, consume, create_topic, produce, read_ndjson

pytestmark = [pytest.mark.slow, needs_root]
TOPIC = "live-metrics"


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(m: dict, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in m.items() if n == name}


def test_metrics_agree_with_ndjson(broker: int, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    out = tmp_path / "out.ndjson"
    mport = free_port({broker})
    live = Live(
        ["-i", "lo", "--port", str(broker), "-o", str(out), "--prometheus", str(mport)], tmp_path
    )
    try:
        create_topic(broker, TOPIC)
        produce(broker, 90, TOPIC)
        # commit behind the end on purpose: lag = HW - committed
        consume(broker, "metrics-group", 90, TOPIC, commit_at={0: 10, 1: 20, 2: 30})
        # an error response: delete a topic that does not exist
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker}"})
        for f in admin.delete_topics(["no-such-topic"], operation_timeout=5).values():
            with pytest.raises(Exception):  # noqa: B017 - the broker's error, any KafkaException
                f.result(10)
        del admin
        time.sleep(2.0)  # every connection closed, every exchange out
        m = scrape(mport)
    finally:
        rc, err = live.stop()
    assert rc == 0, err
    ex = read_ndjson(out)
    # requests by api/version/client/status
    want = Counter((d["api"], str(d["api_version"]), d["client_id"] or "", d["status"]) for d in ex)
    got = {
        tuple(v for _k, v in sorted(dict(labels).items())): n
        for labels, n in series(m, "kanalyze_requests_total").items()
    }
    # labels sorted by name: api, client_id, status, version
    want_sorted = {(a, c, s, v): n for (a, v, c, s), n in want.items()}
    assert got == want_sorted
    # error codes by name
    from kanalyze.bodies import error_codes

    errs = Counter()
    for d in ex:
        if d["response"] and d["response"]["body"]:
            from dissectors.errors import error_name

            for code in error_codes(d["response"]["body"]):
                errs[(d["api"], error_name(code))] += 1
    got_errs = {
        (dict(lb)["api"], dict(lb)["error"]): v
        for lb, v in series(m, "kanalyze_errors_total").items()
    }
    assert got_errs == errs
    assert any(api == "DeleteTopics" for api, _ in errs)
    # latency observations = exchanges with a latency
    lat = Counter(d["api"] for d in ex if d["latency_ms"] is not None)
    got_lat = {
        dict(lb)["api"]: v for lb, v in series(m, "kanalyze_request_latency_seconds_count").items()
    }
    assert got_lat == lat
    # bytes
    rq = Counter()
    for d in ex:
        if d["request"]:
            rq[d["api"]] += d["request"]["size"]
    assert {dict(lb)["api"]: v for lb, v in series(m, "kanalyze_request_bytes_total").items()} == rq
    # high watermarks: the latest error-free Fetch response per partition
    hw: dict[tuple[str, str], int] = {}
    for d in ex:
        if d["api"] == "Fetch" and d["response"]:
            for t in d["response"]["body"]["responses"]:
                name = t.get("topic") or t.get("name") or t.get("topic_name") or t.get("topic_id")
                for p in t["partitions"]:
                    if p["error_code"] == 0 and p["high_watermark"] >= 0:
                        hw[(name, str(p["partition_index"]))] = p["high_watermark"]
    got_hw = {
        (dict(lb)["topic"], dict(lb)["partition"]): v
        for lb, v in series(m, "kanalyze_partition_high_watermark").items()
    }
    assert got_hw == hw
    assert {hw[(TOPIC, str(p))] for p in range(PARTITIONS)} == {30}
    # consumer lag: HW - committed offset
    lag = {
        (dict(lb)["group"], dict(lb)["partition"]): v
        for lb, v in series(m, "kanalyze_consumer_lag").items()
        if dict(lb)["topic"] == TOPIC
    }
    assert lag == {
        ("metrics-group", "0"): 20,
        ("metrics-group", "1"): 10,
        ("metrics-group", "2"): 0,
    }
    # capture health
    assert series(m, "kanalyze_capture_packets_total")[()] > 0
    assert series(m, "kanalyze_capture_kernel_drops_total")[()] == 0
    assert series(m, "kanalyze_exchanges_total")[()] == len(ex)
