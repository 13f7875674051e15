"""The body and facts service: one decode per side, the records policy, the one topic-name
registry, the one error scanner and topic/partition reader, and the facts of real exchanges."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dissectors import ApiKey, DecodeContext
from kanalyze.bodies import (
    Bodies,
    BodyDecoder,
    ExchangeFacts,
    Records,
    TopicNames,
    error_codes,
    exchange_facts,
    topic_entries,
)
from kanalyze.correlation import ConnInfo, Exchange
from kanalyze.session import Session

CAPTURES = Path(__file__).resolve().parents[3] / "captures"


def exchanges(name: str) -> list:
    return list(Session([str(CAPTURES / name)]).exchanges())


def test_error_codes_every_nonzero_code_depth_first() -> None:
    body = {
        "error_code": 0,
        "throttle_time_ms": 5,
        "topics": [
            {
                "name": "a",
                "error_code": 3,
                "error_code_name": "UNKNOWN_TOPIC_OR_PARTITION",
                "partitions": [{"partition_index": 0, "error_code": 6}],
            },
            {"name": "b", "partitions": [{"partition_index": 1, "leader_error_code": 9}]},
        ],
        "flag": True,  # not an error code, whatever its name
        "other_error_code": True,
    }
    assert error_codes(body) == [3, 6, 9]
    assert error_codes(None) == [] and error_codes([{"error_code": 1}]) == [1]


def test_topic_entries_names_ids_partitions_and_list_keys() -> None:
    body = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 2}, {"partition_index": 0}]}],
        "responses": [{"topic_id": "00000000-0000-0000-0000-000000000000", "partitions": []}],
        "protocols": [{"name": "range"}],
        "groups": [{"group_id": "g", "topics": [{"name": "u", "partitions": [{"index": 7}]}]}],
    }
    got = [
        (e.name, e.topic_id, [i for i, _p in e.partitions], e.list_key) for e in topic_entries(body)
    ]
    # the null topic id names nothing; a struct that only names something is a topic in a
    # topic list (JoinGroup's protocols[].name is an assignor)
    assert got == [
        ("t", None, [2, 0], "topics"),
        ("u", None, [7], "topics"),
    ]


def test_each_side_is_decoded_once_and_only_when_asked() -> None:
    ex = next(e for e in exchanges("lib_group_rebalance.pcap") if e.api_key == ApiKey.PRODUCE)
    calls: list[bool] = []

    class Counting(BodyDecoder):
        def json(self, ex, msg, is_request, walk=None):  # type: ignore[no-untyped-def]
            calls.append(is_request)
            return super().json(ex, msg, is_request, walk)

    b = Bodies(ex, Counting())
    assert calls == []
    assert b.response is not None and b.response is b.response
    assert calls == [False]
    facts = b.facts
    assert facts is b.facts is exchange_facts(b) and calls == [False, True]


def test_records_policy() -> None:
    ex = next(e for e in exchanges("lib_group_rebalance.pcap") if e.api_key == ApiKey.PRODUCE)

    def records(dec: BodyDecoder) -> dict:
        body = Bodies(ex, dec).request
        assert body is not None
        return body["topic_data"][0]["partition_data"][0]["records"]

    assert "batches" in records(BodyDecoder(records=Records.DATA))
    assert "batches" in records(BodyDecoder())  # as the context says: records decoded
    assert "batches" not in records(BodyDecoder(records=Records.NONE))
    assert "batches" not in records(BodyDecoder(DecodeContext(decode_records=False)))


def test_facts_of_produce_and_metadata() -> None:
    dec = BodyDecoder(records=Records.DATA)
    facts = [Bodies(ex, dec).facts for ex in exchanges("lib_group_rebalance.pcap")]
    produce = [f for f in facts if f.partitions and f.partitions[0].record_count]
    assert produce and all(f.record_count == 6 for f in produce[:2])
    p = produce[0].partitions[0]
    assert (p.topic, p.base_offset, p.first_offset, p.last_offset) == ("lib-group", 0, 0, 5)
    assert any(f.topics == (("lib-group", frozenset({0, 1})),) for f in facts)
    assert dataclasses.is_dataclass(ExchangeFacts) and ExchangeFacts.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts[0].error_code = 1  # type: ignore[misc]


def test_error_facts_of_a_rebalance() -> None:
    dec = BodyDecoder(records=Records.NONE)
    codes = {
        c for ex in exchanges("lib_group_rebalance.pcap") for c in Bodies(ex, dec).facts.error_codes
    }
    assert 27 in codes  # REBALANCE_IN_PROGRESS in Heartbeat responses


def test_one_registry_names_topic_ids_for_every_decode() -> None:
    """Metadata teaches the registry; a later body that names the topic by id only (Fetch v13+)
    gets its name, in the JSON and in the facts; a second decoder sharing the registry too."""
    names = TopicNames()
    dec = BodyDecoder(names=names)
    other = BodyDecoder(DecodeContext(decode_records=False), Records.NONE, names)
    assert other.template.topic_names is names.mapping is dec.template.topic_names
    exs = exchanges("lib_group_rebalance.pcap")
    fetch = [e for e in exs if e.api_key == ApiKey.FETCH and (e.api_version or 0) >= 13]
    assert fetch, "the capture has Fetch v13+ (topics by id)"
    before = Bodies(fetch[-1], other).facts
    assert all(t != "lib-group" for t, _p in before.topics)  # nothing learned yet: the id's head
    for ex in exs:
        dec.learn(ex)
    assert len(names) >= 1 and "lib-group" in dict(names.items()).values()
    after = Bodies(fetch[-1], other).facts
    assert [t for t, _p in after.topics] == ["lib-group"]
    assert all(p.topic == "lib-group" for p in after.partitions)


def test_partitions_of_topics_nested_in_groups() -> None:
    """OffsetFetch v8+ lists topics per group: the one reader finds them at any depth (the
    Spark rows once read only top-level topic lists and left these rows without partitions)."""
    dec = BodyDecoder()
    fetches = [
        e
        for e in exchanges("kp_codecs.pcap")
        if e.api_key == ApiKey.OFFSET_FETCH and (e.api_version or 0) >= 8
    ]
    assert fetches
    topics = {p.topic for ex in fetches for p in Bodies(ex, dec).facts.partitions}
    assert {"kp-gzip", "kp-lz4", "kp-none", "kp-snappy", "kp-zstd"} <= topics


def test_topic_ids_files_in_every_accepted_form() -> None:
    import base64
    import uuid

    from kanalyze.bodies.names import TopicIdsError, canonical_topic_id, parse_topic_ids

    tid = "5d4f2a8e-1c3b-4e6f-9a7d-2b8c0e1f3a45"
    kafka_form = base64.urlsafe_b64encode(uuid.UUID(tid).bytes).decode().rstrip("=")
    assert len(kafka_form) == 22 and canonical_topic_id(kafka_form) == tid
    assert canonical_topic_id(tid.upper()) == tid and canonical_topic_id("orders") is None
    want = {tid: "orders"}
    assert parse_topic_ids(json.dumps({tid: "orders"})) == want
    assert parse_topic_ids(json.dumps({"orders": kafka_form})) == want
    assert parse_topic_ids(json.dumps([{"name": "orders", "topic_id": tid}])) == want
    assert parse_topic_ids(f"Topic: orders\tTopicId: {kafka_form}\tPartitionCount: 3\n") == want
    for bad in ("{", "nothing here", '{"a": "b"}', '{"a": 1}'):
        with pytest.raises(TopicIdsError):
            parse_topic_ids(bad)


def test_batch_links_name_an_id_only_from_the_same_broker() -> None:
    from kanalyze.bodies.names import BatchLinks

    def fetch(broker: str, topic: dict, base: int, crc: int) -> tuple[Exchange, dict]:
        ex = Exchange(ConnInfo(1, "c:1", broker), 1, 15, 1, "f", "ok", None, None)
        batch = {"base_offset": base, "crc": crc, "crc_ok": True}
        part = {"partition_index": 0, "records": {"batches": [batch]}}
        return ex, {"responses": [{**topic, "partitions": [part]}]}

    names = TopicNames()
    links = BatchLinks(names)
    tid = "5d4f2a8e-1c3b-4e6f-9a7d-2b8c0e1f3a45"
    links.observe(*fetch("b:1", {"topic": "orders"}, 0, 7))
    links.observe(*fetch("b:2", {"topic_id": tid}, 0, 7))  # another broker: another log
    links.observe(*fetch("b:1", {"topic_id": tid}, 0, 8))  # another batch
    assert names.get(tid) is None
    links.observe(*fetch("b:1", {"topic_id": tid}, 0, 7))
    assert names.get(tid) == "orders" and names.origin[tid] == "record_batches"


def test_a_fresh_context_is_copied_field_by_field():
    """`DecodeContext` gained a field (`judging`) and `_fresh` silently fell back to
    `dataclasses.replace` for every body (4 % of a Spark range's CPU, profiled): the fast
    copy must know every field, and copy what it keeps."""
    from dataclasses import fields

    from kanalyze.bodies import decode

    assert decode._PLAIN_CTX, [f.name for f in fields(DecodeContext)]
    t = DecodeContext(decode_records=False, strict=True, judging=True, topic_names={"a": "b"})
    got = decode._fresh(t)
    assert got == DecodeContext(
        decode_records=False, strict=True, judging=True, topic_names={"a": "b"}
    )
    assert got.buffers is not t.buffers and got.topic_names is t.topic_names
