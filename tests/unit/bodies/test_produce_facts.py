"""The Produce shape read without the generic walk (`facts.produce_entries`,
`produce_error_codes`) against the walk (`topic_entries`, `error_codes`): on every Produce body
of every committed and public capture, decoded with batch headers only (the Spark rows) and
with full records, and on random bodies of every version, it gives None (the walk decides) or
exactly what the walk gives; and it takes the real clients' bodies."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dissectors import apis
from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.jsonify import JsonWalk, node_to_json_collect
from kanalyze.bodies import BodyDecoder
from kanalyze.bodies.facts import (
    error_codes,
    produce_entries,
    produce_error_codes,
    topic_entries,
)
from kanalyze.session import Session
from tests.support import spec_encoder as se

ROOT = Path(__file__).resolve().parents[3]
PUBLIC = ROOT.parent / "shared" / "captures-public"
PRODUCE = 0


def agree(body: object, is_req: bool) -> bool:
    """The fast reader == the walk, or None; True when it answered."""
    if not isinstance(body, dict):
        return False
    got = produce_entries(body, is_req)
    if got is None:
        return False
    assert got == list(topic_entries(body))
    if not is_req:
        assert produce_error_codes(body) == error_codes(body)
    return True


def _captures() -> list[Path]:
    found = sorted((ROOT / "captures").glob("*.pcap*"))
    if PUBLIC.is_dir():
        found += sorted(p for p in PUBLIC.iterdir() if p.suffix in (".pcap", ".pcapng"))
    return found


@pytest.mark.parametrize("headers_only", [True, False], ids=["batch-headers", "records"])
def test_every_captured_produce_body(headers_only: bool) -> None:
    taken = seen = 0
    for path in _captures():
        decoder = BodyDecoder(DecodeContext(record_headers=headers_only))
        try:
            exchanges = list(Session([str(path)]).exchanges())
        except Exception:  # noqa: BLE001 - not a capture this reader takes: nothing to compare
            continue
        for ex in exchanges:
            if ex.api_key != PRODUCE:
                continue
            for msg, is_req in ((ex.request, True), (ex.response, False)):
                if msg is not None:
                    seen += 1
                    taken += agree(decoder.json(ex, msg, is_req), is_req)
    assert seen > 100
    # the usual shape is the common one; with full records only the responses take it
    assert taken > (seen // 2 if headers_only else seen // 3)


def _reference(version: int, is_req: bool, data: bytes, ctx: DecodeContext) -> object:
    node = decode_body(PRODUCE, version, is_req, data, 0, len(data), ctx)
    return node_to_json_collect(node, ctx, JsonWalk())


@pytest.mark.parametrize("is_req", [True, False], ids=["request", "response"])
def test_random_bodies_of_every_version(is_req: bool) -> None:
    lo, hi = (apis.REQUEST_VERSIONS if is_req else apis.RESPONSE_VERSIONS)[PRODUCE]
    taken = 0
    for version in range(lo, hi + 1):
        layout = se.api_layout(PRODUCE, version, is_req)
        rng = random.Random(f"produce-facts/{version}/{is_req}")
        for i in range(60):
            value = se.random_value(layout, rng, with_tags=i % 3 == 0, tame=i % 2 == 0)
            data = se.encode(layout, value)
            for headers_only in (True, False):
                body = _reference(version, is_req, data, DecodeContext(record_headers=headers_only))
                taken += agree(body, is_req)
    assert taken > 0


def test_shapes_the_walk_reads_otherwise() -> None:
    """Names the walk skips or keeps, topic ids, repeated topics, errors in record_errors."""
    batch = {"base_offset": 0, "batch_length": 70, "magic": 2, "record_count": 3}
    req = {"transactional_id": None, "acks": -1, "timeout_ms": 5, "topic_data": [
        {"name": "", "partition_data": [{"index": 0, "records": {"batches": [batch]}}]},
        {"name": "a", "partition_data": []},
        {"name": "a", "partition_data": [{"index": 2, "records": None}]},
        {"topic_id": "0000-00", "partition_data": [{"index": 1, "records": None}]},
        {"topic_id": "5a1b", "partition_data": []},
    ]}  # fmt: skip
    rsp = {"responses": [
        {"name": "a", "partition_responses": [
            {"index": 2, "error_code": 6, "base_offset": -1, "record_errors": [
                {"batch_index": 0, "batch_index_error_message": "bad"}],
             "error_message": "x"}]},
        {"name": "b", "partition_responses": []},
        {"topic_id": "5a1b", "partition_responses": [{"index": 0, "error_code": 0}]},
    ], "throttle_time_ms": 0}  # fmt: skip
    assert agree(req, True) and agree(rsp, False)
    assert [e.name for e in produce_entries(req, True) or []] == [None, "a", "a", None, None]
    # what the walk must read: a topic id in a batch, full records, an unknown field
    for odd in ({**batch, "topic_id": "5a1b"}, {**batch, "records": [{"key": None}]},
                {**batch, "partition": 5}):  # a partition index makes the records an entry
        bad = {**req, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": {"batches": [odd]}}]}]}  # fmt: skip
        assert produce_entries(bad, True) is None
    assert produce_entries({**rsp, "node_endpoints": []}, False) is None
    assert produce_entries({"responses": [{"topic": "t", "partitions": []}]}, False) is None
