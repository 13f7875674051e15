"""The facts walks skip lists of plain decoded records whole (`facts.plain_records`), and must
find exactly what a walk of every record finds: records that hold more than scalars (a
decoded object as a value, an odd key) go through the walk."""

from __future__ import annotations

from kanalyze.bodies import error_codes, topic_entries
from kanalyze.bodies.facts import plain_records


def _record(value: object = "v", key: object = None, **extra: object) -> dict:
    rec = {
        "offset": 7, "offset_delta": 0, "timestamp": "2024-01-01T00:00:00Z",
        "timestamp_ms": 1, "timestamp_type": "create_time", "attributes": 0,
        "key": key, "value": value, "headers": [{"key": "h", "value": {"b64": "AA=="}}],
    }  # fmt: skip
    rec.update(extra)
    return rec


def _body(records: list) -> dict:
    batch = {"base_offset": 0, "record_count": len(records), "records": records}
    part = {"partition_index": 3, "error_code": 0, "records": {"batches": [batch]}}
    return {"responses": [{"name": "t", "partitions": [part]}]}


def _entries(body: dict) -> list[tuple]:
    return [(e.name, e.topic_id, [i for i, _p in e.partitions], e.list_key)
            for e in topic_entries(body)]


def test_plain_records_are_skipped_and_find_nothing() -> None:
    recs = [_record(), _record(key={"b64": "AQ==", "size": 1})]
    assert plain_records(recs)
    assert _entries(_body(recs)) == [("t", None, [3], "responses")]
    assert error_codes(_body(recs)) == []


def test_records_with_more_than_scalars_are_walked() -> None:
    # a record value decoded to an object (a metadata record naming a topic by id)
    tid = "AAAAAAAAAAAAAAAAAAAAAQ"
    odd = [_record(), _record(value={"topics": [{"topic_id": tid, "error_code": 5}]})]
    assert not plain_records(odd)
    assert ("t", None, [3], "responses") in _entries(_body(odd))
    assert (None, tid, [], "topics") in _entries(_body(odd))
    assert error_codes(_body(odd)) == [5]
    # an extra key, or a partition index in a record, is not a plain record either
    extra = [_record(partition=4, error_code=9)]
    assert not plain_records(extra)
    assert error_codes(_body(extra)) == [9]
    # the batch holding that record is then a struct with a partition (list key "batches")
    assert (None, None, [4], "batches") in _entries(_body(extra))
