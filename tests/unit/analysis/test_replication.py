"""Replication analysis against captures whose bytes kafka-python encoded (captures/replication/).

captures/replication/make_replication.py ran a fake leader, followers, producers and a consumer
over real loopback TCP under tcpdump and wrote the leader's state after every wire message.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from dissectors.context import DecodeContext
from kanalyze.analysis.report import analyze
from kanalyze.engine import EngineOptions
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[3]
REP = ROOT / "captures" / "replication"
STATE = ("event", "leader_leo", "high_watermark", "log_start_offset", "last_stable_offset", "isr")


def truth(name: str) -> dict:
    return json.loads((REP / f"{name}.truth.json").read_text())


@cache
def report(name: str) -> dict:
    port = truth(name)["broker"]["port"]
    s = Session([str(REP / f"{name}.pcap")], EngineOptions(ports=frozenset({port})))
    return analyze(s.exchanges(), DecodeContext(strict=True))


def timelines(doc: dict) -> dict[tuple[str, int], list[dict]]:
    return {(p["topic"], p["partition"]): p["timeline"] for p in doc["replication"]}


def comparable(entry: dict) -> dict:
    out = {k: entry[k] for k in STATE}
    out["followers"] = {
        f: {k: v[k] for k in ("leo", "remote_leo", "hw")} for f, v in entry["followers"].items()
    }
    return out


def test_textbook_case_step_by_step() -> None:
    """One partition, leader 1 + follower 2, empty logs: the three rows of the textbook table."""
    tl = timelines(report("textbook"))[("tb", 0)]
    rows = [
        (
            e["event"],
            e["leader_leo"],
            e["followers"]["2"]["remote_leo"],
            e["high_watermark"],
            e["followers"]["2"]["leo"],
            e["followers"]["2"]["hw"],
        )
        for e in tl
    ]
    assert rows == [
        # event                    leader LEO, remote LEO, leader HW, follower LEO, follower HW
        ("follower_fetch", 0, 0, 0, 0, 0),  # Fetch(0) waits in the leader's purgatory
        ("produce", 1, 0, 0, 0, 0),  # the producer writes 1 record
        ("produce_response", 1, 0, 0, 0, 0),  # row 1: 1 | 0 | 0 | 0 | 0
        ("follower_fetch_response", 1, 0, 0, 1, 0),  # row 2: record + HW 0 -> 1 | 0 | 0 | 1 | 0
        ("follower_fetch", 1, 1, 1, 1, 0),  # Fetch(1): remote LEO 1, HW = min(1, 1) = 1
        (
            "follower_fetch_response",
            1,
            1,
            1,
            1,
            1,
        ),  # row 3: HW 1 in the response -> 1 | 1 | 1 | 1 | 1
    ]
    t = truth("textbook")
    for row in t["textbook_rows"]:
        assert comparable(tl[row["step"]]) == comparable(t["steps"][row["step"]])
    # the frames are the wire order: requests before their responses, the produce inside the
    # fetch's wait
    frames = [e["frame"] for e in tl]
    assert frames == sorted(frames)
    doc = report("textbook")
    assert [f for f in doc["findings"] if f["severity"] != "info"] == []
    part = doc["replication"][0]
    assert part["final"]["high_watermark"] == 1 and part["final"]["isr"] == [2]
    assert part["hw_advance_latency_ms"]["count"] == 1  # offset 0 became committed once


@pytest.mark.parametrize("name", ["textbook", "isr", "anomalies", "mixed_ids"])
def test_timelines_equal_the_generator_truth(name: str) -> None:
    t = truth(name)
    got = timelines(report(name))
    expected: dict[tuple[str, int], list[dict]] = {}
    for st in t["steps"]:
        expected.setdefault((st["topic"], st["partition"]), []).append(st)
    assert set(got) == set(expected)
    checked = 0
    for key, steps in expected.items():
        assert len(got[key]) == len(steps), key
        for i, (g, e) in enumerate(zip(got[key], steps, strict=True)):
            if e.get("observable", True):
                assert comparable(g) == comparable(e), (key, i)
                checked += 1
    assert checked >= len(t["steps"]) - 1
    finals = {f"{p['topic']}-{p['partition']}": p["final"] for p in report(name)["replication"]}
    for key, fin in t["final"].items():
        assert {k: finals[key][k] for k in STATE if k != "event"} == {
            k: fin[k] for k in STATE if k != "event"
        }


def test_isr_shrinks_and_expands_where_the_leader_did() -> None:
    t = truth("isr")
    doc = report("isr")
    seen = [
        (f["kind"], f["topic"], f["partition"], f["replica"])
        for f in doc["findings"]
        if f["kind"] in ("isr_shrink", "isr_expand")
    ]
    assert sorted(seen) == sorted(
        (e["kind"], e["topic"], e["partition"], e["replica"]) for e in t["expected_findings"]
    )
    # acks=all producers waited for the HW: the response arrives after the followers' fetches
    rep0 = next(p for p in doc["replication"] if p["partition"] == 0)
    assert rep0["acks_all_latency_ms"]["total"]["count"] == 2
    assert rep0["acks_all_latency_ms"]["replication"]["count"] == 2
    assert rep0["hw_advance_latency_ms"]["count"] == 2
    assert set(rep0["sources"]) == {
        "produce_requests",
        "produce_acks",
        "follower_fetch",
        "follower_fetch_responses",
        "consumer_fetch_responses",
    }
    prods = {p["client_id"]: p for p in doc["producers"]}
    for want in t["producers"]:
        got = prods[want["client_id"]]
        assert got["acks"] == want["acks"] and got["idempotent"] == want["idempotent"]
        for key, v in want["partitions"].items():
            assert {k: got["partitions"][key][k] for k in v} == v


def test_injected_anomalies_are_detected() -> None:
    t = truth("anomalies")
    doc = report("anomalies")
    kinds = {(f["kind"], f["severity"]) for f in doc["findings"]}
    for e in t["expected_findings"]:
        assert (e["kind"], e["severity"]) in kinds, e
    trunc = next(f for f in doc["findings"] if f["kind"] == "follower_truncation")
    assert (trunc["previous"], trunc["offset"], trunc["replica"]) == (5, 3, 2)
    epoch_end = next(f for f in doc["findings"] if f["kind"] == "epoch_end_offset")
    assert (epoch_end["leader_epoch"], epoch_end["end_offset"], epoch_end["replica"]) == (0, 3, 2)
    reg = next(f for f in doc["findings"] if f["kind"] == "hw_regression")
    assert (reg["previous"], reg["high_watermark"]) == (5, 3)
    ahead = next(f for f in doc["findings"] if f["kind"] == "commit_ahead_of_consumption")
    assert (ahead["committed"], ahead["position"]) == (9, 5)
    gap = next(f for f in doc["findings"] if f["kind"] == "sequence_gap")
    assert (gap["expected"], gap["sequence"]) == (5, 7)
    # the first commit (3, at the consumer's position) is not flagged
    assert sum(f["kind"] == "commit_ahead_of_consumption" for f in doc["findings"]) == 1
    prod = doc["producers"][0]
    want = t["producers"][0]
    assert (prod["producer_id"], prod["producer_epoch"], prod["idempotent"]) == (
        want["producer_id"],
        want["producer_epoch"],
        True,
    )
    got = prod["partitions"]["anom-0"]
    assert {k: got[k] for k in want["partitions"]["anom-0"]} == want["partitions"]["anom-0"]
    assert prod["errors"] == {"OUT_OF_ORDER_SEQUENCE_NUMBER": 1}
    assert doc["groups"][0]["committed"] == {"anom-0": 9}


@pytest.mark.parametrize("name", ["textbook", "isr", "anomalies"])
def test_tshark_agrees_on_follower_positions_and_stable_offsets(name: str) -> None:
    """tshark (an independent decoder) reads the same follower fetch offsets and LSOs per frame."""
    import shutil
    import subprocess

    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    port = truth(name)["broker"]["port"]
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(REP / f"{name}.pcap"),
            "-d",
            f"tcp.port=={port},kafka",
            "-Y",
            "kafka",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "kafka.request_key",
            "-e",
            "kafka.request_frame",
            "-e",
            "kafka.replica_id",
            "-e",
            "kafka.partition_id",
            "-e",
            "kafka.offset",
            "-e",
            "kafka.last_stable_offset",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    by_frame: dict[tuple[int, int], dict] = {}
    for (_topic, part), entries in timelines(report(name)).items():
        for e in entries:
            by_frame[(e["frame"], part)] = e
    kinds: dict[int, str] = {}
    checked = 0
    for line in out.splitlines():
        frame, key, req_frame, replica, parts, offsets, lsos = (line.split("\t") + [""] * 7)[:7]
        frame_no = int(frame)
        kinds[frame_no] = key
        parts_l = [int(x) for x in parts.split(",") if x]
        if key == "1" and replica and int(replica) >= 0:  # a follower's Fetch request
            for part, off in zip(parts_l, [int(x) for x in offsets.split(",")], strict=True):
                e = by_frame[(frame_no, part)]
                assert (
                    e["event"] == "follower_fetch" and e["followers"][replica]["remote_leo"] == off
                )
                checked += 1
        elif req_frame and kinds.get(int(req_frame)) == "1" and lsos:  # a Fetch response
            for part, lso in zip(parts_l, [int(x) for x in lsos.split(",")], strict=True):
                assert by_frame[(frame_no, part)]["last_stable_offset"] == lso
                checked += 1
    assert checked >= 4


# ------------------------------------------------------------------ topic ids (mixed_ids.pcap)


def test_followers_by_name_and_by_id_share_one_timeline() -> None:
    """Follower 2 fetches repl-c by name (Fetch v11, kafka-python), follower 3 by id (Fetch v15,
    kio), no Metadata in the capture: one partition, the HWs the leader sent in order, every
    follower with its LEO, the id named from the record batches both got."""
    t = truth("mixed_ids")
    doc = report("mixed_ids")
    assert [(p["topic"], p["partition"]) for p in doc["replication"]] == [("repl-c", 0)]
    part = doc["replication"][0]
    (tid,) = t["topic_ids"]
    assert part["topic_id"] == tid and "topic_unresolved" not in part
    sent = [s["high_watermark"] for s in t["steps"] if s["event"].endswith("response")]
    shown = [e["high_watermark"] for e in part["timeline"] if e["event"].endswith("response")]
    assert shown == sent
    assert sorted(set(sent)) == [0, 1, 4, 6, 15, 17]
    hws = [e["high_watermark"] for e in part["timeline"]]
    assert hws == sorted(hws)  # never backwards
    want = t["final"]["repl-c-0"]
    assert (
        {f: v["leo"] for f, v in part["final"]["followers"].items()}
        == {f: v["leo"] for f, v in want["followers"].items()}
        == {"2": 17, "3": 17}
    )
    assert part["final"]["isr"] == [2, 3]
    assert not [f for f in doc["findings"] if f["severity"] != "info"]


def test_topic_ids_file_names_the_id_from_the_start(tmp_path: Path) -> None:
    """With the user's mapping the id is named before any batch: the same single timeline."""
    from kanalyze.bodies.names import load_topic_ids

    t = truth("mixed_ids")
    ((tid, name),) = t["topic_ids"].items()
    f = tmp_path / "ids.json"
    f.write_text(json.dumps({name: tid}))
    opts = EngineOptions(ports=frozenset({t["broker"]["port"]}))
    s = Session([str(REP / "mixed_ids.pcap")], opts)
    names = load_topic_ids(str(f))
    assert names.origin == {tid: "topic_ids_file"}
    doc = analyze(s.exchanges(), DecodeContext(strict=True, topic_names=names.mapping))
    assert [p["topic"] for p in doc["replication"]] == ["repl-c"]
    assert timelines(doc) == timelines(report("mixed_ids"))


# ------------------------------------------------------------------ KRaft (kraft.pcap)


def test_metadata_log_names_the_topic_and_states_the_isr() -> None:
    """The metadata log (Fetch v15 by the log's fixed id) names orders (TopicRecord) before
    follower 2 fetches it by id; the ISR the cluster stated (PartitionRecord, AlterPartition
    responses, PartitionChangeRecords) is the generator's, in order, beside the inferred one."""
    t = truth("kraft")
    doc = report("kraft")
    parts = {p["topic"]: p for p in doc["replication"]}
    assert set(parts) == {
        "__cluster_metadata",
        "orders",
        "__consumer_offsets",
        "__transaction_state",
    }
    (tid,) = t["topic_ids"]
    orders = parts["orders"]
    assert orders["topic_id"] == tid
    assert {"metadata_log", "alter_partition"} <= set(orders["sources"])
    stated = [
        (e["stated"]["source"], e["stated"]["isr"], e["stated"]["partition_epoch"])
        for e in orders["timeline"]
        if e["event"] == "isr_stated"
    ]
    assert stated == [(s["source"], s["isr"], s["partition_epoch"]) for s in t["stated"]]
    fin = orders["final"]
    assert fin["stated"]["isr"] == [1, 2, 3] and fin["stated"]["leader"] == 1
    assert fin["isr"] == [2, 3]
    assert {f: v["leo"] for f, v in fin["followers"].items()} == {
        f: v["leo"] for f, v in t["final"]["orders-0"]["followers"].items()
    }
    kinds = [f["kind"] for f in doc["findings"]]
    assert "isr_disagreement" not in kinds and "unresolved_topic_id" not in kinds
    assert kinds.count("topic_created") == 1  # the log is applied once however often it is fetched
    # the HWs the leader sent for orders, in order
    sent = [
        s["high_watermark"]
        for s in t["steps"]
        if s["topic"] == "orders" and s["event"].endswith("response")
    ]
    shown = [e["high_watermark"] for e in orders["timeline"] if e["event"].endswith("response")]
    assert shown == sent


def test_stated_and_inferred_isr_disagree_is_an_alert() -> None:
    """The cluster states ISR [1, 2] while follower 3 keeps fetching at the leader's end."""
    from kanalyze.analysis.events import Event
    from kanalyze.analysis.findings import Findings
    from kanalyze.analysis.replication import ReplicationAnalyzer
    from kanalyze.bodies import Bodies
    from kanalyze.correlation import ConnInfo, Exchange, Message
    from kanalyze.framing import Pdu

    def pair(api: int, req: dict, rsp: dict, frame: int) -> list[Event]:
        m = [Message(Pdu(b"", 0, 0, f, f, f, f), {}, 0) for f in (frame, frame + 1)]
        ex = Exchange(ConnInfo(1, "a:1", "b:2"), api, 0, frame, "c", "ok", m[0], m[1])
        bodies = Bodies.given(ex, None, req, rsp)  # type: ignore[arg-type]
        return [Event(True, bodies, frame, frame), Event(False, bodies, frame + 1, frame + 1)]

    f = Findings()
    ra = ReplicationAnalyzer(f)
    fetch = {
        "replica_id": 3,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0}]}],
    }
    committed = {
        "partition_index": 0,
        "error_code": 0,
        "leader_id": 1,
        "leader_epoch": 4,
        "isr": [1, 2],
        "partition_epoch": 7,
    }
    alter = {"topics": [{"topic_name": "t", "partitions": [committed]}]}
    for ev in [*pair(1, fetch, {"responses": []}, 1), *pair(56, {}, alter, 3)]:
        ra.feed(ev)
    ra.finish()
    (p,) = ra.to_json()
    assert p["final"]["stated"] == {
        "isr": [1, 2],
        "leader": 1,
        "leader_epoch": 4,
        "partition_epoch": 7,
        "source": "alter_partition",
        "frame": 4,
    }
    assert p["leader_epoch"] == 4
    (alert,) = [x for x in f.to_json() if x["kind"] == "isr_disagreement"]
    assert alert["replicas"] == [3] and alert["stated_isr"] == [1, 2]
    assert alert["inferred_isr"] == [3]


def test_groups_and_transactions_from_the_internal_topics() -> None:
    """__consumer_offsets and __transaction_state records a follower replicates drive the group
    and transaction analyses: commits, generation and members, transaction states."""
    t = truth("kraft")
    doc = report("kraft")
    (g,) = doc["groups"]
    want = t["groups"][0]
    assert g["group_id"] == want["group"] and g["protocol_type"] == "consumer"
    want_log = {f"{c['topic']}-{c['partition']}": c["offset"] for c in t["committed"]}
    assert g["committed_log"] == want_log
    (gen,) = g["generations"]
    assert (gen["generation_id"], gen["leader"], gen["protocol"]) == (
        want["generation"],
        want["leader"],
        want["protocol"],
    )
    assert {m["member_id"]: m["client_id"] for m in g["members"]} == want["members"]
    (txn,) = doc["transactions"]
    want = t["transactions"][0]
    assert (txn["transactional_id"], txn["producer_id"], txn["source"]) == (
        want["transactional_id"],
        want["producer_id"],
        "transaction_log",
    )
    assert txn["states"] == want["states"] and txn["outcome"] == "committed"
    assert txn["partitions"] == [f"{k}-{i}" for k, ids in want["partitions"].items() for i in ids]


def test_spark_rows_name_ids_from_topic_ids() -> None:
    """The Spark rows' registry is preloaded with --topic-ids, one copy per capture group."""
    from kanalyze.spark.rows import RowBuilder, row_context

    t = truth("mixed_ids")
    ((tid, name),) = t["topic_ids"].items()
    ctx = row_context({tid: name})

    def fetch_topics(builder: RowBuilder) -> list[list[str]]:
        opts = EngineOptions(ports=frozenset({t["broker"]["port"]}))
        s = Session([str(REP / "mixed_ids.pcap")], opts)
        rows = [(ex, builder.row(ex, "c")) for ex in s.exchanges()]  # every row, in capture order
        return [r["topics"] for ex, r in rows if ex.api_key == 1 and ex.api_version == 15]

    named = RowBuilder([str(REP / "mixed_ids.pcap")], ctx=ctx)
    assert fetch_topics(named) == [[name]] * 8
    assert named.bodies.names.mapping is not ctx.topic_names  # its own registry
    plain = fetch_topics(RowBuilder([str(REP / "mixed_ids.pcap")]))
    assert plain == [[tid]] * 8  # the record-batch links are the analysis's alone


def test_metrics_label_followers_by_id_with_the_topic_name() -> None:
    """Prometheus labels use the one identity: follower 3's by-id fetches count under repl-c
    from the first one on when --topic-ids names the id."""
    from prometheus_client import CollectorRegistry

    from kanalyze.export import ExchangeEncoder
    from kanalyze.metrics import Metrics

    t = truth("mixed_ids")
    ((tid, name),) = t["topic_ids"].items()
    metrics = Metrics(CollectorRegistry())
    enc = ExchangeEncoder(DecodeContext(topic_names={tid: name}))
    opts = EngineOptions(ports=frozenset({t["broker"]["port"]}))
    for ex in Session([str(REP / "mixed_ids.pcap")], opts).exchanges():
        metrics.observe(ex, enc.encode(ex))
    labels = {
        tuple(sorted(s.labels.items()))
        for m in metrics.registry.collect()
        if m.name == "kanalyze_follower_fetch_offset"
        for s in m.samples
    }
    assert labels == {(("partition", "0"), ("replica", r), ("topic", name)) for r in ("2", "3")}


def test_metadata_log_broker_records_and_topic_deletion_are_findings() -> None:
    """Registration, fencing and topic deletion in the log, each once however often fetched."""
    from kanalyze.analysis.events import Event
    from kanalyze.analysis.findings import Findings
    from kanalyze.analysis.replication import ReplicationAnalyzer
    from kanalyze.bodies import Bodies
    from kanalyze.correlation import ConnInfo, Exchange, Message
    from kanalyze.framing import Pdu

    def rec(offset: int, kind: str, **fields: object) -> dict:
        return {"offset": offset, "metadata_record": {"type": kind, "fields": fields}}

    records = [
        rec(0, "RegisterBrokerRecord", broker_id=2, broker_epoch=7),
        rec(1, "FenceBrokerRecord", id=2, epoch=7),
        rec(2, "RemoveTopicRecord", topic_id="7a3c9e21-54b8-4f0d-8e6a-1c2d3e4f5a6b"),
    ]
    rsp = {
        "responses": [
            {
                "topic": "__cluster_metadata",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "records": {
                            "batches": [
                                {"base_offset": 0, "last_offset_delta": 2, "records": records}
                            ]
                        },
                    }
                ],
            }
        ]
    }
    f = Findings()
    ra = ReplicationAnalyzer(f)
    for frame in (1, 3):  # two brokers fetch the same log
        m = Message(Pdu(b"", 0, 0, frame, frame, frame, frame), {}, 0)
        ex = Exchange(ConnInfo(frame, "a:1", "b:2"), 1, 12, frame, "c", "ok", None, m)
        ra.feed(Event(False, Bodies.given(ex, None, None, rsp), frame, frame))  # type: ignore[arg-type]
    ra.finish()
    got = [(x["kind"], x.get("broker"), x.get("broker_epoch")) for x in f.to_json()]
    assert got == [
        ("broker_registered", 2, 7),
        ("broker_fenced", 2, 7),
        ("topic_deleted", None, None),
    ]


def test_pending_batches_by_frame_follow_the_list() -> None:
    """`pending_at` is the first pending batch of a frame in list order, through removals,
    the HW passing batches and a partition absorbed from another label."""
    from kanalyze.analysis.partition_state import PartitionState, Pending

    st = PartitionState("t", 0, 10)
    spec = ((0, 5, 1), (1, 5, 1), (2, 6, -1))  # (start offset, request frame, acks)
    a, b, c = (Pending(s, s + 1, 1, 0, f, acks) for s, f, acks in spec)
    for p in (a, b, c):
        st.add_pending(p)
    assert st.pending_at(5) is a and st.pending_at(6) is c and st.pending_at(7) is None
    st.drop_pending(a)
    assert st.pending_at(5) is b
    st.set_hw(2, 100, 9)  # passes b (acks=1: dropped), not c (acks=all, unanswered)
    assert st.pending == [c] and st.pending_at(5) is None and st.pending_at(6) is c
    other = PartitionState("t", 0, 10)
    d = Pending(9, 10, 1, 0, 6, 1)
    other.add_pending(d)
    st.absorb(other)
    assert st.pending == [c, d] and st.pending_at(6) is c
    st.drop_pending(c)
    assert st.pending_at(6) is d
