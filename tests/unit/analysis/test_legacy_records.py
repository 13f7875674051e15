"""Records of magic 0/1 message sets count in the report like magic-2 batches (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.analysis.report import analyze
from kanalyze.analysis.wire import batch_count, batch_end
from kanalyze.session import Session
from tests.support.public import PUBLIC

ROOT = Path(__file__).resolve().parents[3]


def test_legacy_message_counts() -> None:
    plain = {"magic": 1, "offset": 7, "codec": "none", "records": [{"offset": 7}]}
    wrapper = {
        "magic": 0,
        "offset": 12,
        "codec": "gzip",
        "records": [{"offset": o} for o in (9, 10, 11, 12)],
    }
    assert (batch_count(plain), batch_end(plain)) == (1, 8)
    assert (batch_count(wrapper), batch_end(wrapper)) == (4, 13)
    # records not decoded (no list): one message, its own offset
    assert (
        batch_count({"magic": 1, "offset": 3, "records": {"size": 40}}),
        batch_end({"magic": 0, "offset": 3}),
    ) == (1, 4)
    assert batch_count({"magic": 2}) == 0  # a v2 batch without counts stays unknown


def test_kp_legacy_producers_count_records() -> None:
    doc = analyze(Session([str(ROOT / "captures" / "kp_legacy.pcap")]).exchanges())
    counts = {p["client_id"]: p["partitions"]["kp-legacy-0"]["records"] for p in doc["producers"]}
    assert len(counts) == 8
    # every legacy producer sent 4 records (plain: 4 messages; compressed: one wrapper of 4)
    assert set(counts.values()) == {4}, counts


@pytest.mark.skipif(not PUBLIC.is_dir(), reason="../shared/captures-public is not here")
def test_console_producer_v2_moves_the_leo() -> None:
    doc = analyze(Session([str(PUBLIC / "deepflow-produce-v2-console-producer.pcap")]).exchanges())
    (part,) = doc["replication"]
    assert part["final"]["leader_leo"] == 1  # base offset 0 + one magic-1 record
    assert doc["producers"][0]["partitions"]["topic2-0"]["records"] == 1


def test_legacy_records_count_in_the_exchange_facts() -> None:
    """The `records` filter field, `stats` and the event export count magic 0/1 messages too:
    kafka-node's Produce v2 requests carry 4 plain messages, then one gzip wrapper of 4."""
    from kanalyze.bodies import facts_of
    from kanalyze.bodies.names import TopicNames
    from kanalyze.export import ExchangeEncoder

    enc = ExchangeEncoder()
    produces = [
        enc.encode(ex)
        for ex in Session([str(ROOT / "captures" / "kn_legacy.pcap")]).exchanges()
        if ex.api == "Produce"
    ]
    facts = [
        facts_of(p["request"]["body"], p["response"]["body"], TopicNames()) for p in produces
    ]
    assert [f.record_count for f in facts] == [4, 4]
    (plain,), (gzip,) = (f.partitions for f in facts)
    # 12 bytes of offset and size before each message
    assert (plain.record_batches, plain.records_bytes) == (4, 4 * 12 + 52 + 53 + 54 + 55)
    assert (gzip.record_batches, gzip.first_offset, gzip.last_offset) == (1, 0, 0)
