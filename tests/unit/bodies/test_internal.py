"""Kafka's own records decoded by name: the KRaft metadata log and the internal topics.

The bytes come from outside kanalyze: literal byte strings laid out as Kafka documents the
metadata record framing (unsigned varint frame version, record type, record version, then the
flexible body) and captures/replication/kraft.pcap, whose records make_replication.py encoded
with its own small encoder inside batches built by kafka-python."""

from __future__ import annotations

import json
import struct
import uuid
from functools import cache
from pathlib import Path

from dissectors import DecodeContext
from kanalyze.bodies import TopicNames
from kanalyze.bodies.internal import internal_key, internal_value, metadata_record, raw_bytes
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.session import Session

REP = Path(__file__).resolve().parents[3] / "captures" / "replication"
TID = uuid.UUID("7a3c9e21-54b8-4f0d-8e6a-1c2d3e4f5a6b")


def test_topic_record_by_the_documented_layout() -> None:
    # frame version 1, type 2 (TopicRecord), version 0 | compact string "orders" (length + 1 = 7)
    # | 16-byte uuid | no tagged fields
    data = bytes([1, 2, 0, 7]) + b"orders" + TID.bytes + bytes([0])
    rec = metadata_record(data, DecodeContext(strict=True))
    assert rec == {
        "type": "TopicRecord",
        "version": 0,
        "type_id": 2,
        "frame_version": 1,
        "fields": {"name": "orders", "topic_id": str(TID)},
    }


def test_partition_change_record_reads_its_tagged_isr() -> None:
    # type 5 v0: PartitionId int32, TopicId, tagged fields: 1 field, tag 0 (Isr), 13 bytes:
    # compact array of 3 int32 (length + 1 = 4)
    isr = bytes([4]) + struct.pack(">iii", 1, 2, 3)
    data = bytes([1, 5, 0]) + struct.pack(">i", 2) + TID.bytes + bytes([1, 0, len(isr)]) + isr
    names = TopicNames({str(TID): "orders"})
    rec = metadata_record(data, DecodeContext(strict=True, topic_names=names.mapping))
    assert rec["type"] == "PartitionChangeRecord" and "diagnostics" not in rec
    assert rec["fields"] == {
        "partition_id": 2,
        "topic_id": str(TID),
        "isr": [1, 2, 3],
        "topic_name": "orders",
    }


def test_internal_keys_and_values_by_their_versions() -> None:
    ctx = DecodeContext(strict=True)
    key = internal_key("__consumer_offsets", struct.pack(">hh", 2, 2) + b"g1", ctx)
    assert key == {"type": "GroupMetadataKey", "version": 2, "fields": {"group": "g1"}}
    assert internal_key("__consumer_offsets", struct.pack(">h", 99), ctx)["type"] is None
    value = internal_value({"type": "OffsetCommitKey"}, struct.pack(">hqhqq", 1, 42, 0, 7, 9), ctx)
    assert value["fields"] == {
        "offset": 42,
        "metadata": "",
        "commit_timestamp": 7,
        "expire_timestamp": 9,
    }
    assert (
        raw_bytes({"text": "x", "truncated": True, "size": 9}) is None
    )  # cut values stay as they are


@cache
def exported() -> list[dict]:
    truth = json.loads((REP / "kraft.truth.json").read_text())
    s = Session(
        [str(REP / "kraft.pcap")], EngineOptions(ports=frozenset({truth["broker"]["port"]}))
    )
    enc = ExchangeEncoder(DecodeContext(strict=True))
    return [enc.encode(ex) for ex in s.exchanges()]


def records_of(topic: str) -> list[dict]:
    out = []
    for row in exported():
        if row["api"] != "Fetch" or row["response"] is None:
            continue
        for t in row["response"]["body"]["responses"]:
            if (
                TopicNames().get(t.get("topic_id")) == topic
                or (t.get("topic") or t.get("topic_name")) == topic
            ):
                for p in t["partitions"]:
                    out += [r for b in p["records"]["batches"] for r in b["records"]]
    return out


def test_export_names_the_metadata_log_records() -> None:
    recs = [r["metadata_record"] for r in records_of("__cluster_metadata")]
    assert [(r["type"], r["fields"].get("isr")) for r in recs] == [
        ("TopicRecord", None),
        ("PartitionRecord", [1, 2, 3]),
        ("PartitionChangeRecord", [1, 2]),
        ("PartitionChangeRecord", [1, 2, 3]),
    ]
    assert recs[0]["fields"] == {"name": "orders", "topic_id": str(TID)}
    part = recs[1]["fields"]
    assert (part["leader"], part["leader_epoch"], part["partition_epoch"], part["replicas"]) == (
        1,
        0,
        0,
        [1, 2, 3],
    )


def test_export_names_consumer_offsets_and_transaction_state() -> None:
    truth = json.loads((REP / "kraft.truth.json").read_text())
    group, commit = records_of("__consumer_offsets")
    assert group["key_decoded"] == {
        "type": "GroupMetadataKey",
        "version": 2,
        "fields": {"group": "g-orders"},
    }
    gv = group["value_decoded"]["fields"]
    assert (gv["generation"], gv["leader"], [m["client_id"] for m in gv["members"]]) == (
        3,
        "c-1",
        ["app-1", "app-2"],
    )
    assert commit["key_decoded"]["type"] == "OffsetCommitKey"
    want = truth["committed"][0]
    k, v = commit["key_decoded"]["fields"], commit["value_decoded"]["fields"]
    assert (k["group"], k["topic"], k["partition"], v["offset"]) == (
        want["group"],
        want["topic"],
        want["partition"],
        want["offset"],
    )
    *_, txn = records_of("__transaction_state")
    want = truth["transactions"][0]
    assert txn["key_decoded"]["fields"] == {"transactional_id": want["transactional_id"]}
    v = txn["value_decoded"]["fields"]
    assert (v["producer_id"], v["producer_epoch"], v["transaction_status"]) == (
        want["producer_id"],
        want["producer_epoch"],
        want["status"],
    )
    assert {p["topic"]: p["partition_ids"] for p in v["transaction_partitions"]} == want[
        "partitions"
    ]


def test_random_bytes_never_crash_the_record_decoders() -> None:
    """Damaged records give diagnostics, never an exception (the house rule on input)."""
    import random

    rng = random.Random(14)
    ctx = DecodeContext()
    for _ in range(2000):
        head = bytes([1, rng.randrange(0, 30), rng.randrange(0, 4)])
        rec = metadata_record(head + rng.randbytes(rng.randrange(0, 40)), ctx)
        assert "type" in rec
        kd = rng.randrange(0, 16).to_bytes(2, "big") + rng.randbytes(rng.randrange(0, 30))
        key = internal_key("__consumer_offsets", kd, ctx)
        vd = rng.randrange(0, 5).to_bytes(2, "big") + rng.randbytes(rng.randrange(0, 40))
        internal_value(key, vd, ctx)
    assert metadata_record(b"\x81", ctx)["type"] is None  # a cut varint
