"""Captures of clients outside the Python world (Sarama, kafkajs, kafka-node, kcat), checked
against what each client recorded (captures/*.truth.json) and, field by field, against tshark.

The generic checks (clean export, tshark framing and pairing, records equal to the truth,
producers, committed offsets) run on these captures through the per-capture tests; here are
the facts particular to each client, the ones a new client is likely to get wrong.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kanalyze.analysis.report import analyze
from kanalyze.bodies import error_codes
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.session import Session
from tests.support.tshark import base_args, tshark_binary

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"


def truth(name: str) -> dict[str, Any]:
    return json.loads((CAPTURES / f"{name}.truth.json").read_text())


@cache
def rows(name: str) -> list[dict[str, Any]]:
    port = truth(name)["broker"]["port"]
    s = Session([str(CAPTURES / f"{name}.pcap")], EngineOptions(ports=frozenset({port})))
    enc = ExchangeEncoder()
    return [json.loads(json.dumps(enc.encode(ex))) for ex in s.exchanges()]


@cache
def report(name: str) -> dict[str, Any]:
    return analyze(Session([str(CAPTURES / f"{name}.pcap")]).exchanges())


def records(body: object) -> Iterator[dict[str, Any]]:
    """Every decoded record of a body (Produce request, Fetch response), in order."""
    if isinstance(body, dict):
        if isinstance(body.get("batches"), list):
            for b in body["batches"]:
                yield from b.get("records") or []
            return
        for v in body.values():
            yield from records(v)
    elif isinstance(body, list):
        for v in body:
            yield from records(v)


def kanalyze_cli(*args: str) -> str:
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return out.stdout


def test_sarama_every_codec_and_the_partitions_it_filled() -> None:
    t = truth("go_sarama")
    produces = [r for r in rows("go_sarama") if r["api"] == "Produce"]
    # one Produce v3 per codec, all 8 records in one batch, acknowledged at the truth's offsets
    assert [r["api_version"] for r in produces] == [3] * 5
    codecs = [
        r["request"]["body"]["topic_data"][0]["partition_data"][0]["records"]["batches"][0]["codec"]
        for r in produces
    ]
    assert codecs == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert [[x["key"] for x in records(r["request"]["body"])] for r in produces] == [
        [p["key"] for p in t["produced"] if p["codec"] == c] for c in codecs
    ]
    leo = {
        f"{p['topic']}-{p['partition']}": p["final"]["leader_leo"]
        for p in report("go_sarama")["replication"]
    }
    want: dict[str, int] = defaultdict(int)
    for p in t["produced"]:
        key = f"{p['topic']}-{p['partition']}"
        want[key] = max(want[key], p["offset"] + 1)
    assert leo == dict(want)


def test_sarama_admin_calls() -> None:
    t = truth("go_sarama")
    by_api = defaultdict(list)
    for r in rows("go_sarama"):
        by_api[r["api"]].append(r)
    (create,) = by_api["CreateTopics"]
    topic = create["request"]["body"]["topics"][0]
    assert (topic["name"], topic["num_partitions"]) == ("go-admin", t["topics"]["go-admin"])
    # the truth's failed describe_config: tansu says "No error." with error code 0, and Sarama
    # 1.22 takes any error message as a failure
    assert {a["op"]: a["ok"] for a in t["admin"]}["describe_config go-none"] is False
    for r in by_api["DescribeConfigs"]:
        for res in r["response"]["body"]["results"]:
            assert (res["error_code"], res["error_message"]) == (0, "No error.")
    groups = {g["group_id"] for r in by_api["ListGroups"] for g in r["response"]["body"]["groups"]}
    assert groups == {"go-group"}


def test_kafkajs_group_join_and_commits() -> None:
    t = truth("kjs_group")
    joins = [r for r in rows("kjs_group") if r["api"] == "JoinGroup"]
    # KIP-394: the first join is answered MEMBER_ID_REQUIRED with the member id to use
    first, second = (j["response"]["body"] for j in joins)
    assert first["error_code_name"] == "MEMBER_ID_REQUIRED"
    assert second["error_code"] == 0 and second["member_id"] == first["member_id"]
    (group,) = report("kjs_group")["groups"]
    assert group["committed"] == {
        f"{c['topic']}-{c['partition']}": c["offset"] for c in t["committed"]
    }
    stats = json.loads(kanalyze_cli("stats", "-z", "errors", "--json", "captures/kjs_group.pcap"))
    assert [(e["error"], e["expected"]) for e in stats["tables"]["errors"]] == [
        ("MEMBER_ID_REQUIRED", True)
    ]


def test_kafka_node_legacy_records_count_everywhere() -> None:
    """kafka-node's magic 1 message sets: 8 records refused; `stats`, the `records` filter
    field and the report count them like magic 2 records."""
    t = truth("kn_legacy")
    assert len(t["produced"]) == 8 and all(p["error"] for p in t["produced"])
    topics = json.loads(kanalyze_cli("stats", "-z", "topics", "--json", "captures/kn_legacy.pcap"))
    (part,) = topics["tables"]["topics"]
    assert (part["topic"], part["produced_records"]) == ("kn-a", len(t["produced"]))
    fields = kanalyze_cli(
        "export",
        "captures/kn_legacy.pcap",
        "-Y",
        'api == "Produce" and records == 4',
        "-T",
        "fields",
        "-e",
        "error",
    )
    assert fields.split() == ["UNKNOWN_PRODUCER_ID"] * 2
    (prod,) = report("kn_legacy")["producers"]
    assert prod["errors"] == {"UNKNOWN_PRODUCER_ID": 2}
    assert prod["partitions"]["kn-a-0"]["records"] == len(t["produced"])


def test_kafka_node_list_offsets_v0_response_is_malformed() -> None:
    """tansu's ListOffsets v0 response stops after each partition's error code (the spec's
    OldStyleOffsets array is missing): kanalyze says truncated, kafka-node read no offsets."""
    (lo,) = [r for r in rows("kn_legacy") if r["api"] == "ListOffsets"]
    assert lo["api_version"] == 0
    assert [d["code"] for d in lo["response"]["diagnostics"]] == ["truncated"]
    assert {a["op"]: a.get("result") for a in truth("kn_legacy")["admin"]}["latest_offsets"] == {}


def test_kcat_gives_up_after_a_valid_api_versions_response() -> None:
    """librdkafka 2.0.2 reports 'Read underflow' on tansu's ApiVersions v3 response; the
    response follows the spec, tagged fields included, and kanalyze decodes it cleanly."""
    rs = rows("kcat_apiversions")
    assert [(r["api"], r["api_version"], r["status"]) for r in rs] == [("ApiVersions", 3, "ok")] * 3
    assert len({r["connection"]["id"] for r in rs}) == 3  # one try per connection, then closed
    for r in rs:
        body = r["response"]["body"]
        assert r["response"]["diagnostics"] == [] and body["error_code"] == 0
        assert body["finalized_features_epoch"] == -1 and body["zk_migration_ready"] is False
        assert r["request"]["body"]["client_software_version"] == "2.0.2"


def test_kcat_transaction_timestamp_query_and_telemetry() -> None:
    """kcat on librdkafka 2.16: `-X transactional.id` puts the zstd records in one committed
    transaction; `-Q` is a ListOffsets by timestamp; librdkafka asks for telemetry (KIP-714)."""
    t = truth("kcat_tool")
    (txn,) = report("kcat_tool")["transactions"]
    assert (txn["transactional_id"], txn["outcome"]) == ("kcat-txn", "committed")
    assert txn["partitions"] == ["kcat-zstd-0"]
    (query,) = [
        r for r in rows("kcat_tool") if r["client_id"] == "kcat-query" and r["api"] == "ListOffsets"
    ]
    asked = query["request"]["body"]["topics"][0]["partitions"][0]["timestamp"]
    answer = query["response"]["body"]["topics"][0]["partitions"][0]
    op = {a["op"]: a for a in t["admin"]}[f"offsets_for_times kcat-gzip:0:{asked}"]
    assert op["result"] == f"kcat-gzip [0] offset {answer['offset']}"
    telemetry = [r for r in rows("kcat_tool") if r["api"] == "GetTelemetrySubscriptions"]
    assert telemetry and all(r["status"] == "ok" for r in telemetry)
    assert all(r["response"]["diagnostics"] == [] for r in telemetry)


def test_latest_offsets_below_the_high_watermark() -> None:
    """tansu answers ListOffsets latest with the last batch's base offset + 1 (the truth: kafkajs'
    fetch_topic_offsets says high 13 for kjs-a's 18 records)."""
    high = {a["op"]: a for a in truth("kjs_group")["admin"]}["fetch_topic_offsets kjs-a"]
    assert high["result"] == [[0, 0, 13]]

    def found(name: str) -> list[tuple[str, int, int]]:
        return [
            (f["partition_key"], f["offset"], f["reported"])
            for f in report(name)["findings"]
            if f["kind"] == "list_offsets_behind"
        ]

    assert found("kjs_group") == [("kjs-a-0", 13, 18)]
    assert found("go_sarama") == [
        (f"go-{c}-0", 1, 8) for c in ("none", "gzip", "snappy", "lz4", "zstd")
    ]
    assert found("kcat_tool") == found("kn_legacy") == []


# ------------------------------------------------------------------------------------------
# field by field against tshark (versions tshark 4.0 dissects completely)
# ------------------------------------------------------------------------------------------

TSHARK_FIELDS = (
    "kafka.error",
    "kafka.message_key",
    "kafka.message_value",
    "kafka.header_key",
    "kafka.generation_id",
)


def _tshark_values(name: str) -> dict[int, Counter]:
    port = truth(name)["broker"]["port"]
    args = base_args(CAPTURES / f"{name}.pcap", port)
    args += ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=\x1f", "-e", "frame.number"]
    for f in TSHARK_FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    got: dict[int, Counter] = defaultdict(Counter)
    for line in out.splitlines():
        frame, *cells = line.split("\t")
        for f, cell in zip(TSHARK_FIELDS, cells, strict=True):
            for v in cell.split("\x1f") if cell else []:
                if f == "kafka.error" and v == "0":
                    continue
                if f in ("kafka.message_key", "kafka.message_value"):
                    v = bytes.fromhex(v).decode()  # tshark shows bytes as hex
                got[int(frame)][(f, v)] += 1
    return got


def _kanalyze_values(name: str) -> dict[int, Counter]:
    got: dict[int, Counter] = defaultdict(Counter)
    for r in rows(name):
        for side in ("request", "response"):
            m = r[side]
            if not m:
                continue
            c, body = got[m["frame"]], m["body"]
            c.update(("kafka.error", str(e)) for e in error_codes(body))
            for rec in records(body):
                c[("kafka.message_key", rec["key"])] += rec["key"] is not None
                c[("kafka.message_value", rec["value"])] += rec["value"] is not None
                c.update(("kafka.header_key", h["key"]) for h in rec["headers"])
            for key in ("generation_id", "generation_id_or_member_epoch"):
                if isinstance(body, dict) and key in body:
                    c[("kafka.generation_id", str(body[key]))] += 1
    return {f: +c for f, c in got.items() if +c}


@pytest.mark.tshark
@pytest.mark.skipif(tshark_binary() is None, reason="tshark is not installed")
@pytest.mark.parametrize("name", ["go_sarama", "kjs_group"])
def test_tshark_sees_the_same_records_errors_and_generations(name: str) -> None:
    t, k = _tshark_values(name), _kanalyze_values(name)
    assert {f: c for f, c in t.items() if c} == k
    seen = Counter(f for c in k.values() for f, _v in c.elements())
    # what was compared: every produced and fetched record's key, value and headers
    n = len(truth(name)["produced"]) + len(truth(name)["consumed"])
    assert seen["kafka.message_key"] == seen["kafka.message_value"] == n
    assert seen["kafka.header_key"] == 2 * n
    assert seen["kafka.generation_id"] == {"go_sarama": 6, "kjs_group": 5}[name]


def test_member_id_required_below_join_group_v4_is_a_real_error() -> None:
    """Sarama 1.22 joins with JoinGroup v1; tansu answers MEMBER_ID_REQUIRED, which KIP-394
    reserves for v4+ (the two-step join), and Sarama gives up: not the expected first join."""
    from kanalyze.views.expected import expected_error

    (join,) = [r for r in rows("go_sarama") if r["api"] == "JoinGroup"]
    assert (join["api_version"], join["response"]["body"]["error_code"]) == (1, 79)
    failed = {a["op"]: a for a in truth("go_sarama")["admin"]}["join_group go-group"]
    assert not failed["ok"] and "79" in failed["error"]
    stats = json.loads(kanalyze_cli("stats", "-z", "errors", "--json", "captures/go_sarama.pcap"))
    assert [(e["error"], e["expected"]) for e in stats["tables"]["errors"]] == [
        ("MEMBER_ID_REQUIRED", False)
    ]
    text = kanalyze_cli("report", "captures/go_sarama.pcap")
    assert "MEMBER_ID_REQUIRED" in text and "expected: first JoinGroup" not in text
    # v4+ (kjs_group: v5) stays expected; an unknown version is judged by the code alone
    assert expected_error(11, 79, {"member_id": ""}, 4) is not None
    assert expected_error(11, 79, {"member_id": ""}, 3) is None
    assert expected_error(11, 79, None) is not None


def test_record_formats_the_versions_exclude() -> None:
    """Sarama 1.22 produces zstd with Produce v3 and tansu serves it to Fetch v4; tansu answers
    kafka-node's Fetch v0 with magic 2 batches (kafka-node: "Not a message set")."""

    def found(name: str) -> list[tuple[str, int, str, str]]:
        return [
            (f["api"], f["api_version"], f["records_format"], f["partition_key"])
            for f in report(name)["findings"]
            if f["kind"] == "record_format_version"
        ]

    assert found("go_sarama") == [
        ("Produce", 3, "zstd-compressed records", "go-zstd-0"),
        ("Fetch", 4, "zstd-compressed records", "go-zstd-0"),
    ]
    assert found("kn_legacy") == [("Fetch", 0, "magic 2 record batches", "kn-a-0")]
    assert any("Magic byte is 2" in n for n in truth("kn_legacy")["notes"])
    assert found("kjs_group") == found("kcat_apiversions") == found("kcat_tool") == []
