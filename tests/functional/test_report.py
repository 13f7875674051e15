"""`kanalyze report` on real-client captures: findings equal what the clients know; no false alarms;
`--json` validates against docs/report.schema.json."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import jsonschema
import pytest

from dissectors.context import DecodeContext
from kanalyze.analysis.report import analyze
from kanalyze.engine import EngineOptions
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "captures" / "replication").glob("*.pcap")
)
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
REAL = [c for c in CAPTURES if c.parent.name == "captures"]

# Warnings and errors the clients' truth explains (the capture shows a real problem):
# legacy magic 0/1 batches rejected by tansu (the clients' delivery reports carry the error), and
# tansu handing aborted records to a read_committed consumer (the truth notes it and lists them
# in `consumed`), and records of a format the request or response version excludes (Sarama's
# zstd in Produce v3, tansu's magic 2 batches in kafka-node's Fetch v0: the truth notes each).
EXPLAINED = {
    "produce_error",
    "read_committed_got_aborted",
    "record_format_version",
    # tansu's latest-offset answers (go_sarama, kjs_group: the truth notes them)
    "list_offsets_behind",
}


def truth(cap: Path) -> dict:
    return json.loads(cap.with_suffix(".truth.json").read_text())


@cache
def report(cap: Path) -> dict:
    port = truth(cap).get("broker", {}).get("port")
    s = Session([str(cap)], EngineOptions(ports=frozenset({port}) if port else frozenset()))
    return analyze(s.exchanges(), DecodeContext(strict=True))


def client_ids(t: dict) -> dict[str, str]:
    return {
        c["name"]: c["config"].get("client.id") or c["config"].get("client_id")
        for c in t["clients"]
    }


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.stem)
def test_report_json_validates(cap: Path) -> None:
    errors = sorted(VALIDATOR.iter_errors(report(cap)), key=lambda e: list(e.absolute_path))
    assert not errors, [(list(e.absolute_path), e.message) for e in errors[:5]]


@pytest.mark.parametrize("cap", REAL, ids=lambda p: p.stem)
def test_no_false_alarms(cap: Path) -> None:
    t = truth(cap)
    alarms = [f for f in report(cap)["findings"] if f["severity"] != "info"]
    assert {f["kind"] for f in alarms} <= EXPLAINED, alarms
    ids = client_ids(t)
    failed = Counter(ids[p["client"]] for p in t["produced"] if p.get("error"))
    produce_errors = [f for f in alarms if f["kind"] == "produce_error"]
    # one finding per failed Produce request; every failing client failed in its truth
    assert {f["client_id"] for f in produce_errors} == set(failed)
    for f in alarms:
        if f["kind"] == "list_offsets_behind":
            assert any("ListOffsets for the latest offset" in n for n in t["notes"])
        if f["kind"] == "record_format_version":
            fmt = {"zstd-compressed records": "zstd", "magic 2 record batches": "magic 2"}
            word = fmt.get(f["records_format"], f["records_format"])
            assert any(word in n and f["api"] in n for n in t["notes"]), f["message"]
    if any(f["kind"] == "read_committed_got_aborted" for f in alarms):
        aborted = {k for tx in t["transactions"] if tx["outcome"] == "abort" for k in tx["keys"]}
        assert aborted & {c["key"] for c in t["consumed"]}, "the client did receive aborted records"


@pytest.mark.parametrize("cap", REAL, ids=lambda p: p.stem)
def test_producers_equal_client_truth(cap: Path) -> None:
    t = truth(cap)
    ids = client_ids(t)
    want: dict[str, Counter] = defaultdict(Counter)
    for p in t["produced"]:
        want[ids[p["client"]]][f"{p['topic']}-{p['partition']}"] += 1
    got: dict[str, Counter] = defaultdict(Counter)
    prods = report(cap)["producers"]
    for pr in prods:
        for key, v in pr["partitions"].items():
            got[pr["client_id"]][key] += v["records"]
    legacy = "legacy" in cap.stem  # magic 0/1 message sets: rejected, retried by the clients
    for client, per_tp in want.items():
        if legacy:  # the truth has no partition for a rejected record: compare topics
            assert {k.rsplit("-", 1)[0] for k in got[client]} == {
                k.rsplit("-", 1)[0] for k in per_tp
            }
        else:
            assert got[client] == per_tp, client
    for c in t["clients"]:
        acks = c["config"].get("acks")
        if acks is not None and c["name"] in {p["client"] for p in t["produced"]}:
            levels = {pr["acks"] for pr in prods if pr["client_id"] == ids[c["name"]]}
            assert levels == {-1 if acks == "all" else int(acks)}
    if any(c["config"].get("enable.idempotence") for c in t["clients"]):
        for pr in prods:
            assert pr["idempotent"] and pr["producer_id"] >= 0
            for key, v in pr["partitions"].items():
                n = want[pr["client_id"]][key]
                assert (v["first_sequence"], v["last_sequence"], v["duplicates"], v["gaps"]) == (
                    0,
                    n - 1,
                    0,
                    0,
                )


def test_idempotent_producer_sequences() -> None:
    cap = ROOT / "captures" / "lib_idempotent.pcap"
    prods = report(cap)["producers"]
    assert {
        k: (v["first_sequence"], v["last_sequence"])
        for p in prods
        for k, v in p["partitions"].items()
    } == {"lib-idem-0": (0, 9), "lib-idem-1": (0, 9)}
    # producer ids as the broker issued them in InitProducerId responses
    pids = set()
    for line in subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", str(cap)],
        capture_output=True,
        check=True,
        cwd=ROOT,
    ).stdout.splitlines():
        row = json.loads(line)
        if row["api"] == "InitProducerId":
            pids.add(
                (row["response"]["body"]["producer_id"], row["response"]["body"]["producer_epoch"])
            )
    assert {(p["producer_id"], p["producer_epoch"]) for p in prods} == pids


def test_transactions_equal_client_truth() -> None:
    cap = ROOT / "captures" / "lib_transactions.pcap"
    t = truth(cap)
    doc = report(cap)
    got = [(x["transactional_id"], x["outcome"]) for x in doc["transactions"]]
    assert got == [
        (x["transactional_id"], {"commit": "committed", "abort": "aborted"}[x["outcome"]])
        for x in t["transactions"]
    ]
    for x in doc["transactions"]:
        assert x["partitions"] == ["lib-txn-0"]
        assert x["producer_id"] is not None and x["producer_epoch"] == 0
        marker = "COMMIT" if x["outcome"] == "committed" else "ABORT"
        assert x["control_records"]["lib-txn-0"].startswith(marker)
    # the five records of each transaction: sequences 0..4 then 5..9 for the one producer id
    (prod,) = doc["producers"]
    assert prod["transactional_id"] == "lib-txn-1"
    assert (
        prod["partitions"]["lib-txn-0"]["first_sequence"],
        prod["partitions"]["lib-txn-0"]["last_sequence"],
    ) == (0, 9)
    (consumer,) = doc["consumers"]
    assert consumer["isolation_level"] == ["read_committed"]
    assert consumer["aborted_records_received"] == sum(
        1 for tx in t["transactions"] if tx["outcome"] == "abort" for _ in tx["keys"]
    )


@pytest.mark.parametrize(
    "name",
    [
        "lib_group_rebalance",
        "aio_group",
        "kp_codecs",
        "lib_codecs",
        "kp_v25",
        "go_sarama",
        "kjs_group",
        "kcat_tool",
    ],
)
def test_committed_offsets_equal_client_truth(name: str) -> None:
    cap = ROOT / "captures" / f"{name}.pcap"
    t = truth(cap)
    want: dict[str, dict[str, int]] = defaultdict(dict)
    for c in t["committed"]:
        want[c["group"]][f"{c['topic']}-{c['partition']}"] = c["offset"]
    got = {g["group_id"]: g["committed"] for g in report(cap)["groups"] if g["committed"]}
    assert got == dict(want)


def test_group_rebalance_equals_client_truth() -> None:
    cap = ROOT / "captures" / "lib_group_rebalance.pcap"
    t = truth(cap)
    ids = client_ids(t)
    (g,) = report(cap)["groups"]
    tg = t["groups"][0]
    assert g["group_id"] == tg["group_id"] and g["protocol"] == tg["protocol"]
    # assignments each member received, in order, as the clients' rebalance callbacks saw them
    want: dict[str, list[list[str]]] = defaultdict(list)
    for e in tg["events"]:
        if e["event"] == "assigned":
            want[ids[e["member"]]].append(sorted(f"{tp[0]}-{tp[1]}" for tp in e["partitions"]))
    got = {m["client_id"]: [a["partitions"] for a in m["assignments"]] for m in g["members"]}
    assert got == dict(want)
    gens = [r["generation_id"] for r in g["rebalances"]]
    assert gens == sorted(gens) and len(gens) == 2  # the second member's join caused one rebalance
    assert [r["members"] for r in g["rebalances"]] == [1, 2]
    assert all(r["duration_ms"] is not None and r["assignor"] == "range" for r in g["rebalances"])
    assert {m["client_id"] for m in g["members"]} == {ids[m] for m in tg["members"]}
    assert all(m["left"] for m in g["members"])  # both closed cleanly (LeaveGroup)
    assert {k: v["status"] for k, v in g["lag"].items()} == {
        "lib-group-0": "OK",
        "lib-group-1": "OK",
    }


def test_aio_group_final_assignment() -> None:
    cap = ROOT / "captures" / "aio_group.pcap"
    t = truth(cap)
    ids = client_ids(t)
    (g,) = report(cap)["groups"]
    want = {
        ids[m]: sorted(f"{a}-{b}" for a, b in parts)
        for m, parts in t["groups"][0]["final_assignment"].items()
    }
    assert {m["client_id"]: m["assignment"] for m in g["members"]} == want


def test_stats_clients_and_topics() -> None:
    cap = ROOT / "captures" / "lib_group_rebalance.pcap"
    t = truth(cap)
    ids = client_ids(t)
    st = report(cap)["stats"]
    assert {c["client_id"] for c in st["clients"]} == set(ids.values())
    assert all(c["software_name"] == "confluent-kafka-python" for c in st["clients"])
    (topic,) = st["topics"]
    assert topic["producers"] == [ids["producer"]] and topic["consumers"] == sorted(
        [ids["member-a"], ids["member-b"]]
    )
    counts = Counter()
    for a in st["apis"]:
        counts[f"{a['api_key']}:{a['api_version']}"] += a["count"]
    assert dict(counts) == t["tshark_requests"]  # the same requests tshark counted
    assert {e["name"] for e in st["errors"]} == {"MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS"}


def test_cli_report_text_and_json(tmp_path: Path) -> None:
    cap = ROOT / "captures" / "replication" / "anomalies.pcap"
    text = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", str(cap)],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    for word in (
        "Findings",
        "Replication",
        "Producers",
        "Transactions",
        "Consumer groups",
        "Latency by API",
        "sequence_gap",
        "hw_regression",
        "follower_truncation",
        "commit_ahead_of_consumption",
    ):
        assert word in out
    js = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", "--json", str(cap)],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert js.returncode == 0
    doc = json.loads(js.stdout)
    VALIDATOR.validate(doc)
    assert doc["files"] == [str(cap)]
    bad = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", str(tmp_path / "missing.pcap")],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert bad.returncode != 0 and b"Traceback" not in bad.stderr


def test_analysis_is_headless() -> None:
    code = (
        "import sys, kanalyze.analysis.report, kanalyze.commands.report; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'pyspark', 'scapy')]; "
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, cwd=ROOT, check=True, timeout=60
    )
    assert out.stdout.strip() == b"[]"
