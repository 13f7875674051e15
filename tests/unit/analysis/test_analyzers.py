"""Analyzer rules on hand-made events: transactions, groups (classic and KIP-848), sequences,
ordering, bounded collections."""

from __future__ import annotations

import pytest

from kanalyze.analysis.consumers import _markers, aborted_batch
from kanalyze.analysis.events import Event, analysis_decoder, ordered_events
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.formats import RecordFormatAnalyzer
from kanalyze.analysis.groups import GroupAnalyzer, burrow_status
from kanalyze.analysis.offsets import ListOffsetsAnalyzer
from kanalyze.analysis.producers import ProducerAnalyzer
from kanalyze.analysis.transactions import TransactionAnalyzer
from kanalyze.bodies import Bodies
from kanalyze.correlation import ConnInfo, Exchange, Message
from kanalyze.framing import Pdu

DEC = analysis_decoder()


def msg(frame: int, ts: int) -> Message:
    return Message(Pdu(b"", 0, 0, frame, ts, frame, ts), {}, 0)


def exchange(
    api: int,
    req: dict | None,
    rsp: dict | None,
    frame: int,
    client: str = "c",
    conn: int = 1,
    acks: int | None = None,
    version: int = 0,
) -> tuple[Event, Event]:
    if api == 0 and acks is None:
        acks = (req or {}).get("acks")
    ex = Exchange(
        ConnInfo(conn, "10.0.0.1:5000", "10.0.0.2:9092"),
        api,
        version,
        frame,
        client,
        "ok",
        msg(frame, frame * 1000),
        msg(frame + 1, (frame + 1) * 1000),
        acks,
    )
    bodies = Bodies.given(ex, DEC, req, rsp)
    return Event(True, bodies, frame, frame * 1000), Event(
        False, bodies, frame + 1, (frame + 1) * 1000
    )


def feed(analyzer, *pairs: tuple[Event, Event]) -> None:
    for req, rsp in pairs:
        analyzer.feed(req)
        analyzer.feed(rsp)


def batch(pid: int, epoch: int, seq: int, n: int, txn: bool = False, crc: int = 1) -> dict:
    return {
        "base_offset": 0,
        "last_offset_delta": n - 1,
        "record_count": n,
        "producer_id": pid,
        "producer_epoch": epoch,
        "base_sequence": seq,
        "is_transactional": txn,
        "is_control": False,
        "crc": crc,
        "base_timestamp": 5,
    }


def produce(tid: str | None, topic: str, part: int, batches: list[dict]) -> dict:
    return {
        "transactional_id": tid,
        "acks": -1,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": part, "records": {"batches": batches}}]}
        ],
    }


def produce_ok(topic: str, part: int, base: int, err: int = 0) -> dict:
    return {
        "responses": [
            {
                "name": topic,
                "partition_responses": [{"index": part, "error_code": err, "base_offset": base}],
            }
        ]
    }


def test_transaction_state_machine_and_anomalies() -> None:
    f = Findings()
    ta = TransactionAnalyzer(f)
    feed(
        ta,
        exchange(10, {"key": "tx", "key_type": 1}, {"error_code": 0, "host": "b", "port": 9092}, 1),
        exchange(
            22,
            {"transactional_id": "tx"},
            {"error_code": 0, "producer_id": 7, "producer_epoch": 2},
            3,
        ),
        exchange(
            24,
            {
                "v3_and_below_transactional_id": "tx",
                "v3_and_below_producer_id": 7,
                "v3_and_below_producer_epoch": 2,
                "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
            },
            {"results_by_topic_v3_and_below": []},
            5,
        ),
        exchange(0, produce("tx", "t", 0, [batch(7, 2, 0, 3, True)]), produce_ok("t", 0, 0), 7),
        exchange(
            0, produce("tx", "t", 1, [batch(7, 2, 0, 1, True)]), produce_ok("t", 1, 0), 9
        ),  # not added
        exchange(
            25,
            {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "group_id": "g"},
            {"error_code": 0},
            11,
        ),
        exchange(
            28,
            {
                "transactional_id": "tx",
                "group_id": "g",
                "producer_id": 7,
                "producer_epoch": 2,
                "topics": [
                    {"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 42}]}
                ],
            },
            {"topics": []},
            13,
        ),
        exchange(
            26,
            {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True},
            {"error_code": 0},
            15,
        ),
        exchange(
            26,
            {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": False},
            {"error_code": 0},
            17,
        ),  # EndTxn with nothing added
        exchange(
            24,
            {
                "v3_and_below_transactional_id": "tx",
                "v3_and_below_producer_id": 7,
                "v3_and_below_producer_epoch": 1,
                "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
            },
            {
                "results_by_topic_v3_and_below": [
                    {
                        "name": "t",
                        "results_by_partition": [
                            {"partition_index": 0, "partition_error_code": 90}
                        ],
                    }
                ]
            },
            19,
        ),  # zombie epoch 1, fenced
    )
    txns = ta.to_json()
    assert [(t["outcome"], t["partitions"]) for t in txns[:2]] == [
        ("committed", ["t-0", "t-1"]),
        ("aborted", []),
    ]
    assert txns[0]["states"] == ["Ongoing", "PrepareCommit", "CompleteCommit"]
    assert txns[0]["groups"] == ["g"] and txns[0]["offsets"] == {"in-0": 42}
    assert txns[0]["producer_id"] == 7 and txns[0]["producer_epoch"] == 2
    assert txns[2]["outcome"] == "incomplete"
    kinds = [x["kind"] for x in f.to_json()]
    assert kinds.count("produce_to_unadded_partition") == 1
    assert kinds.count("end_txn_without_partitions") == 1
    assert kinds.count("fenced_epoch") == 2  # the stale epoch on the wire, and PRODUCER_FENCED


def test_sequences_duplicates_gaps_retries() -> None:
    f = Findings()
    pa = ProducerAnalyzer(f)
    feed(
        pa,
        exchange(0, produce(None, "t", 0, [batch(5, 0, 0, 2)]), produce_ok("t", 0, 0), 1),
        exchange(0, produce(None, "t", 0, [batch(5, 0, 2, 2)]), produce_ok("t", 0, 2), 3),
        exchange(
            0, produce(None, "t", 0, [batch(5, 0, 2, 2)]), produce_ok("t", 0, 2), 5
        ),  # duplicate
        exchange(
            0, produce(None, "t", 0, [batch(5, 0, 9, 1)]), produce_ok("t", 0, -1, 45), 7
        ),  # gap
        exchange(
            0,
            produce(None, "t", 1, [batch(-1, -1, -1, 3, crc=77)]),
            produce_ok("t", 1, 0),
            9,
            client="plain",
        ),
        exchange(
            0,
            produce(None, "t", 1, [batch(-1, -1, -1, 3, crc=77)]),
            produce_ok("t", 1, 3),
            11,
            client="plain",
        ),
    )
    idem, plain = pa.to_json()
    assert idem["partitions"]["t-0"] == {
        "first_sequence": 0,
        "last_sequence": 9,
        "batches": 4,
        "records": 7,
        "duplicates": 1,
        "gaps": 1,
        "overlaps": 0,
        "retries": 0,
    }
    assert idem["errors"] == {"OUT_OF_ORDER_SEQUENCE_NUMBER": 1} and idem["acks"] == -1
    assert not plain["idempotent"] and plain["partitions"]["t-1"]["retries"] == 1
    found = {(x["kind"], x["severity"]) for x in f.to_json()}
    assert {
        ("duplicate_sequence", "warning"),
        ("sequence_gap", "error"),
        ("produce_error", "error"),
        ("non_idempotent_retry", "warning"),
    } <= found


def test_refused_produce_counts_once_for_a_non_idempotent_producer() -> None:
    """A broker refusing a plain (producer id -1) produce is an error of that producer, counted
    once per partition result however many batches (legacy: messages) the request carried."""
    f = Findings()
    pa = ProducerAnalyzer(f)
    plain = [batch(-1, -1, -1, 1, crc=c) for c in (1, 2, 3, 4)]
    feed(
        pa,
        exchange(0, produce(None, "t", 0, plain), produce_ok("t", 0, -1, 59), 1, client="kn"),
        exchange(0, produce(None, "t", 0, [batch(-1, -1, -1, 4)]), produce_ok("t", 0, 8), 3),
    )
    refused, fine = pa.to_json()
    assert refused["errors"] == {"UNKNOWN_PRODUCER_ID": 1}
    assert refused["partitions"]["t-0"]["batches"] == 4 and fine["errors"] == {}
    assert [x["kind"] for x in f.to_json()] == ["produce_error"]


def test_record_formats_the_version_excludes() -> None:
    """zstd needs Produce v7 / Fetch v10, magic 2 Produce v3 / Fetch v4, magic 1 Fetch v2
    (the specs' version notes); each (client, api, version, format, partition) once."""

    def fetched(*bs: dict) -> dict:
        parts = [{"partition_index": 0, "records": {"batches": list(bs)}}]
        return {"responses": [{"topic": "t", "partitions": parts}]}

    zstd = {**batch(-1, -1, -1, 2), "magic": 2, "codec": "zstd"}
    plain = {**batch(-1, -1, -1, 2), "magic": 2, "codec": "none"}
    old = {"magic": 1, "codec": "gzip", "offset": 3, "records": [{"offset": 3}]}
    f = Findings()
    fa = RecordFormatAnalyzer(f)
    feed(
        fa,
        exchange(0, produce(None, "t", 0, [zstd]), produce_ok("t", 0, 0), 1, version=3),
        exchange(0, produce(None, "t", 0, [zstd]), produce_ok("t", 0, 2), 3, version=3),
        exchange(0, produce(None, "t", 0, [zstd]), produce_ok("t", 0, 4), 5, version=7),
        exchange(1, {}, fetched(plain), 7, version=0),
        exchange(1, {}, fetched(old), 9, version=2),
        exchange(1, {}, fetched(zstd), 11, version=10),
        exchange(1, {}, fetched(plain, old), 13, version=1),
    )
    got = [(x["api"], x["api_version"], x["records_format"]) for x in f.to_json()]
    assert got == [
        ("Produce", 3, "zstd-compressed records"),
        ("Fetch", 0, "magic 2 record batches"),
        ("Fetch", 1, "magic 1 messages"),
        ("Fetch", 1, "magic 2 record batches"),
    ]
    assert {x["frames"][0] for x in f.to_json()} == {1, 8, 14}


def test_latest_offset_below_a_known_high_watermark() -> None:
    """A latest-offset answer below the HW a Fetch reported (or an acks=all ack implies) is
    wrong; above it is new data; earliest answers and other partitions are not compared."""

    def listed(ts: int, offset: int, isolation: int = 0) -> tuple[dict, dict]:
        req = {
            "isolation_level": isolation,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": ts}]}],
        }
        rsp = {
            "topics": [
                {
                    "name": "t",
                    "partitions": [{"partition_index": 0, "error_code": 0, "offset": offset}],
                }
            ]
        }
        return req, rsp

    fetched = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 9,
                        "last_stable_offset": 7,
                    }
                ],
            }
        ]
    }
    f = Findings()
    oa = ListOffsetsAnalyzer(f)
    feed(
        oa,
        exchange(2, *listed(-1, 0), 1),  # nothing known yet
        exchange(0, produce(None, "t", 0, [batch(-1, -1, -1, 4)]), produce_ok("t", 0, 0), 3),
        exchange(2, *listed(-1, 1), 5),  # below the acks=all batch end 4
        exchange(1, {}, fetched, 7),
        exchange(2, *listed(-1, 9), 9),  # = HW: right
        exchange(2, *listed(-1, 7, isolation=1), 11),  # = LSO for read_committed: right
        exchange(2, *listed(-2, 0), 13),  # earliest: not compared
        exchange(2, *listed(-1, 8), 15),  # below HW 9
        exchange(2, *listed(-1, 8), 17),  # the same wrong answer again: once
    )
    got = [(x["offset"], x["reported"], x["frames"]) for x in f.to_json()]
    assert got == [(1, 4, [4, 6]), (8, 9, [8, 16])]


def test_classic_group_generations_and_heartbeat_errors() -> None:
    f = Findings()
    ga = GroupAnalyzer(f, hw_of=lambda t, p: 100)
    assignment = {
        "version": 0,
        "assigned_partitions": [{"topic": "t", "partitions": [1, 0]}],
        "user_data": None,
    }
    feed(
        ga,
        exchange(
            11,
            {"group_id": "g", "member_id": "", "protocol_type": "consumer"},
            {
                "error_code": 0,
                "generation_id": 4,
                "protocol_name": "range",
                "leader": "m1",
                "member_id": "m1",
                "members": [{"member_id": "m1"}],
            },
            1,
            client="c1",
        ),
        exchange(
            14,
            {
                "group_id": "g",
                "generation_id": 4,
                "member_id": "m1",
                "assignments": [{"member_id": "m1", "assignment": assignment}],
            },
            {"error_code": 0, "assignment": assignment},
            3,
            client="c1",
        ),
        exchange(
            12,
            {"group_id": "g", "generation_id": 4, "member_id": "m1"},
            {"error_code": 25},
            5,
            client="c1",
        ),
        exchange(
            8,
            {
                "group_id": "g",
                "topics": [
                    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 10}]}
                ],
            },
            {"topics": []},
            7,
            client="c1",
        ),
        exchange(
            8,
            {
                "group_id": "g",
                "topics": [
                    {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 4}]}
                ],
            },
            {"topics": []},
            9,
            client="c1",
        ),
        exchange(13, {"group_id": "g", "member_id": "m1"}, {"error_code": 0}, 11, client="c1"),
    )
    (g,) = ga.to_json()
    assert g["generations"][0]["assignments"] == {"m1": ["t-0", "t-1"]}
    assert g["rebalances"][0]["assignor"] == "range" and g["rebalances"][0]["duration_ms"] == 0.003
    (m,) = g["members"]
    assert (
        m["assignment"] == ["t-0", "t-1"]
        and m["left"]
        and m["heartbeat_errors"] == {"UNKNOWN_MEMBER_ID": 1}
    )
    assert (
        g["committed"] == {"t-0": 4}
        and g["lag"]["t-0"]["status"] == "REWIND"
        and g["lag"]["t-0"]["lag"] == 96
    )
    assert {x["kind"] for x in f.to_json()} == {"heartbeat_error", "commit_rewind"}


def test_kip848_consumer_group_heartbeat() -> None:
    f = Findings()
    ga = GroupAnalyzer(f)
    feed(
        ga,
        exchange(
            68,
            {"group_id": "g2", "member_id": "", "member_epoch": 0, "server_assignor": "uniform"},
            {
                "error_code": 0,
                "member_id": "x",
                "member_epoch": 1,
                "assignment": {
                    "topic_partitions": [
                        {"topic_id": "id-1", "topic_name": "t", "partitions": [0, 1]}
                    ]
                },
            },
            1,
            client="k",
        ),
        exchange(
            68,
            {"group_id": "g2", "member_id": "x", "member_epoch": 1},
            {
                "error_code": 0,
                "member_id": "x",
                "member_epoch": 2,
                "assignment": {
                    "topic_partitions": [{"topic_id": "id-1", "topic_name": "t", "partitions": [1]}]
                },
            },
            3,
            client="k",
        ),
        exchange(
            68,
            {"group_id": "g2", "member_id": "x", "member_epoch": -1},
            {"error_code": 0, "member_id": "x", "member_epoch": -1, "assignment": None},
            5,
            client="k",
        ),
    )
    (g,) = ga.to_json()
    assert g["protocol"] == "consumer"
    (m,) = g["members"]
    assert m["generations"] == [1, 2] and m["assignment"] == ["t-1"] and m["left"]
    assert [a["partitions"] for a in m["assignments"]] == [["t-0", "t-1"], ["t-1"]]
    assert [r["assignor"] for r in g["rebalances"]] == ["uniform", None]


def test_burrow_status() -> None:
    assert burrow_status([], 0, 60) == "OK"
    assert burrow_status([(0, 5, 5), (1, 9, 9)], 2, 60) == "OK"
    assert burrow_status([(0, 5, 9), (1, 4, 9)], 2, 60) == "REWIND"
    assert burrow_status([(0, 5, 9), (1, 5, 12)], 2, 60) == "STALL"
    assert burrow_status([(0, 5, 9)], 100, 60) == "STOP"
    assert burrow_status([(0, 1, 3), (1, 2, 6), (2, 3, 9)], 3, 60) == "WARN"
    assert burrow_status([(0, 1, 9), (1, 5, 9), (2, 8, 9)], 3, 60) == "OK"


def test_aborted_batches_follow_their_marker() -> None:
    ctl = [
        {
            "base_offset": 3,
            "is_control": True,
            "producer_id": 1,
            "records": [{"control": {"type": "COMMIT"}}],
        },
        {
            "base_offset": 7,
            "is_control": True,
            "producer_id": 1,
            "records": [{"control": {"type": "ABORT"}}],
        },
    ]
    m = _markers(ctl)
    assert [aborted_batch(m, 1, b) for b in (0, 4, 8)] == [False, True, False]
    assert not aborted_batch(m, 2, 4)


def test_events_come_out_in_wire_order() -> None:
    # a fetch waits (frames 1 -> 6) while a produce is answered (2 -> 3): exchanges arrive in
    # start order
    a = Exchange(ConnInfo(1, "a:1", "b:2"), 1, 4, 1, "f", "ok", msg(1, 10), msg(6, 60))
    b = Exchange(ConnInfo(2, "a:3", "b:2"), 0, 3, 1, "p", "ok", msg(2, 20), msg(3, 30))
    c = Exchange(ConnInfo(2, "a:3", "b:2"), 0, 3, 2, "p", "ok", msg(4, 40), None)
    order = [(e.frame, e.is_request) for e in ordered_events([a, b, c], DEC)]
    assert order == [(1, True), (2, True), (3, False), (4, True), (6, False)]


def test_findings_are_bounded() -> None:
    f = Findings(cap_per_kind=3)
    for i in range(10):
        f.add("warning", "x", "m", [i + 1])
    out = f.to_json()
    assert len(out) == 4 and out[-1]["kind"] == "findings_dropped" and out[-1]["count"] == 7


def test_hw_stalled_while_the_leo_moves() -> None:
    from kanalyze.analysis.replication import ReplicationAnalyzer

    f = Findings()
    ra = ReplicationAnalyzer(f, stall_ms=1000)
    fetch = {
        "replica_id": 2,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0}]}],
    }
    empty = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 0,
                        "last_stable_offset": 0,
                        "log_start_offset": 0,
                    }
                ],
            }
        ]
    }
    consumer = {"replica_id": -1, "topics": fetch["topics"]}
    events = [
        *exchange(1, fetch, empty, 1),
        *exchange(0, produce(None, "t", 0, [batch(-1, -1, -1, 1)]), produce_ok("t", 0, 0), 3),
        *exchange(1, consumer, empty, 1_000_000),  # 1 s later, HW still 0, LEO 1
        *exchange(1, consumer, empty, 2_000_000),  # 2 s: stalled (reported once)
        *exchange(1, consumer, empty, 3_000_000),
    ]
    for ev in sorted(events, key=lambda e: e.frame):
        ra.feed(ev)
    stalls = [x for x in f.to_json() if x["kind"] == "hw_stalled"]
    assert len(stalls) == 1 and stalls[0]["high_watermark"] == 0 and stalls[0]["leader_leo"] == 1


def _by_id_fetch(tid: str, off: int, hw: int, batches: list[dict]) -> tuple[dict, dict]:
    req = {
        "replica_state": {"replica_id": 3},
        "topics": [{"topic_id": tid, "partitions": [{"partition": 0, "fetch_offset": off}]}],
    }
    part = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": hw,
        "records": {"batches": batches},
    }
    rsp = {"responses": [{"topic_id": tid, "partitions": [part]}]}
    return req, rsp


def test_an_id_nobody_names_is_one_partition_with_one_hint() -> None:
    from kanalyze.analysis.replication import ReplicationAnalyzer
    from kanalyze.bodies import TopicNames

    f = Findings()
    ra = ReplicationAnalyzer(f, names=TopicNames())
    tid = "11111111-2222-3333-4444-555555555555"
    for i in range(3):
        for ev in exchange(1, *_by_id_fetch(tid, i, i, []), 10 * i + 1):
            ra.feed(ev)
    ra.finish()
    out = ra.to_json()
    got = [(p["topic"], p["topic_id"], p.get("topic_unresolved")) for p in out]
    assert got == [(tid, tid, True)]
    assert len(out[0]["timeline"]) == 6
    hints = [x for x in f.to_json() if x["kind"] == "unresolved_topic_id"]
    assert len(hints) == 1 and "--topic-ids" in hints[0]["message"] and hints[0]["topic_id"] == tid


@pytest.mark.parametrize("bound", ["HOLD_CAP", "HOLD_BYTES"])
def test_an_id_named_after_the_hold_cap_merges_into_the_name(bound: str) -> None:
    """Past HOLD_CAP events (or HOLD_BYTES of frames) the held events go on under the id; a
    name learned later merges them."""
    import kanalyze.analysis.replication as rep
    from kanalyze.bodies import TopicNames

    names = TopicNames()
    ra = rep.ReplicationAnalyzer(Findings(), names=names)
    tid = "11111111-2222-3333-4444-555555555555"
    old = getattr(rep, bound)
    setattr(rep, bound, 1 if bound == "HOLD_CAP" else -1)
    try:
        for ev in exchange(1, *_by_id_fetch(tid, 0, 0, []), 1):
            ra.feed(ev)
    finally:
        setattr(rep, bound, old)
    assert list(ra.parts) == [(tid, 0)]
    parts = [{"partition": 0, "fetch_offset": 0}]
    name_fetch = {"replica_id": 2, "topics": [{"topic": "t", "partitions": parts}]}
    names.learn(tid, "t", "test")
    for ev in exchange(1, name_fetch, None, 5):
        ra.feed(ev)
    ra.finish()
    (p,) = ra.to_json()
    assert (p["topic"], p["topic_id"]) == ("t", tid)
    assert [e["frame"] for e in p["timeline"]] == [1, 2, 5] and p["final"]["isr"] == [2, 3]


def test_acks_outside_minus_one_zero_one_is_reported_as_sent() -> None:
    """A client that sends acks=30000 (found by the mutation campaign: one flipped bit) is
    shown as it sent it, and the report still validates (docs/report.schema.json)."""
    import json
    from pathlib import Path

    import jsonschema

    pa = ProducerAnalyzer(Findings())
    req = {**produce(None, "t", 0, [batch(-1, -1, -1, 1)]), "acks": 30000}
    feed(pa, exchange(0, req, produce_ok("t", 0, 0, err=21), 1))  # INVALID_REQUIRED_ACKS
    (prod,) = pa.to_json()
    assert prod["acks"] == 30000
    schema = json.loads((Path(__file__).parents[3] / "docs" / "report.schema.json").read_text())
    check = jsonschema.Draft202012Validator({"$defs": schema["$defs"],
                                             "$ref": "#/$defs/producer"})
    assert list(check.iter_errors(prod)) == []
    assert list(check.iter_errors({**prod, "acks": 70000}))  # not an int16: still refused
