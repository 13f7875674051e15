"""Control batches: transaction markers and KRaft control records."""

from __future__ import annotations

import struct
import warnings

import pytest
from records_inputs import MAKER

from dissectors import control_records
from dissectors.context import DecodeContext
from dissectors.records import decode_records

with warnings.catch_warnings():  # kafka-python 3.0.12 warns at import (importlib.resources)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

CONTROL = 0x30  # transactional + control


def control_batch(*records: tuple[bytes, bytes]) -> bytes:
    body = b"".join(MAKER.record(i, k, v) for i, (k, v) in enumerate(records))
    return MAKER.batch(body, len(records), attributes=CONTROL, base_offset=500)


def decode(buf: bytes):
    return decode_records(buf, 0, len(buf), DecodeContext(strict=True))


@pytest.mark.parametrize(("type_id", "name"), [(0, "ABORT"), (1, "COMMIT")])
def test_transaction_markers_match_kafka_python(type_id, name):
    buf = control_batch((struct.pack(">hh", 0, type_id), struct.pack(">hi", 0, 77)))
    (batch,) = decode(buf).value["batches"]
    assert batch["is_control"] is True and batch["is_transactional"] is True
    assert batch["crc_ok"] is True and batch["diagnostics"] == []
    (rec,) = batch["records"]
    assert rec["control"] == {
        "type": name,
        "type_id": type_id,
        "key_version": 0,
        "version": 0,
        "coordinator_epoch": 77,
    }
    (ref,) = list(DefaultRecordBatch(buf))
    assert ref.type == type_id and ref.version == 0 and ref.offset == rec["offset"] == 500
    assert DefaultRecordBatch(buf).is_control_batch


def test_short_marker_value_is_a_bad_record():
    buf = control_batch((struct.pack(">hh", 0, 1), b"\x00"))
    (batch,) = decode(buf).value["batches"]
    assert [d["code"] for d in batch["diagnostics"]] == ["bad_record"]
    assert batch["records"][0]["control"]["type"] == "COMMIT"


def leader_change_v0(leader: int, voters: list[int], granting: list[int]) -> bytes:
    def voter_array(ids):  # compact array of Voter {VoterId int32, no tagged fields}
        return bytes([len(ids) + 1]) + b"".join(struct.pack(">i", v) + b"\x00" for v in ids)

    return struct.pack(">hi", 0, leader) + voter_array(voters) + voter_array(granting) + b"\x00"


KRAFT = [
    (2, "LEADER_CHANGE", "LeaderChangeMessage", leader_change_v0(3, [1, 2, 3], [1, 3])),
    (
        3,
        "SNAPSHOT_HEADER",
        "SnapshotHeaderRecord",
        struct.pack(">hq", 0, 1_700_000_000_000) + b"\0",
    ),
    (4, "SNAPSHOT_FOOTER", "SnapshotFooterRecord", struct.pack(">h", 0) + b"\0"),
    (5, "KRAFT_VERSION", "KRaftVersionRecord", struct.pack(">hh", 0, 1) + b"\0"),
]


@pytest.mark.parametrize(("type_id", "name", "message", "value"), KRAFT)
def test_kraft_control_records_call_the_schema_decoder(monkeypatch, type_id, name, message, value):
    calls = []

    def fake_decode_message(msg, version, buf, offset, end, ctx):
        calls.append((msg, version, bytes(buf[offset:end])))
        from dissectors.node import STRUCT, Node

        return Node("body", STRUCT, offset, end - offset, None, [])

    monkeypatch.setattr(control_records, "decode_message", fake_decode_message)
    monkeypatch.setattr(control_records, "node_to_json", lambda n, ctx: {"ok": n.length})
    (batch,) = decode(control_batch((struct.pack(">hh", 0, type_id), value))).value["batches"]
    (rec,) = batch["records"]
    assert rec["control"]["type"] == name and rec["control"]["message"] == message
    assert rec["control"]["data"] == {"ok": len(value)}
    assert calls == [(message, 0, value)]


def test_kraft_with_the_real_schema_decoder():
    buf = control_batch(
        (struct.pack(">hh", 0, 2), KRAFT[0][3]),
        (struct.pack(">hh", 0, 5), KRAFT[3][3]),
    )
    (batch,) = decode(buf).value["batches"]
    assert batch["diagnostics"] == []
    leader, version = (r["control"]["data"] for r in batch["records"])
    assert leader["leader_id"] == 3
    assert [v["voter_id"] for v in leader["voters"]] == [1, 2, 3]
    assert [v["voter_id"] for v in leader["granting_voters"]] == [1, 3]
    assert version == {"version": 0, "kraft_version": 1}
