"""Differential tests: batches encoded by kafka-python's builders, decoded by ours.

kafka-python is the independent encoder (and, via its readers, a second
opinion on offsets and timestamps); every header and record field is compared.
"""

from __future__ import annotations

import base64
import struct
import warnings
import zlib
from datetime import UTC, datetime

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissectors.context import DecodeContext
from dissectors.node import RECORDS
from dissectors.records import decode_records

with warnings.catch_warnings():  # kafka-python 3.0.12 warns at import (importlib.resources)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def decode(buf: bytes, **kw):
    ctx = DecodeContext(strict=True, **kw)
    node = decode_records(buf, 0, len(buf), ctx)
    assert node.kind == RECORDS
    return node, ctx


def as_bytes(v):
    """Our JSON value back to bytes (text or b64)."""
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    return base64.b64decode(v["b64"])


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def build_v2(records, codec=0, transactional=False, pid=-1, epoch=-1, seq=-1, base_offset=0):
    b = DefaultRecordBatchBuilder(2, codec, transactional, pid, epoch, seq, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, headers)
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)  # what a broker does; outside the CRC
    return bytes(out)


def set_attr_bits(buf: bytes, bits: int) -> bytes:
    b = bytearray(buf)
    (attrs,) = struct.unpack_from(">h", b, 21)
    struct.pack_into(">h", b, 21, attrs | bits)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def compare_v2(ours: dict, theirs: DefaultRecordBatch) -> None:
    assert ours["magic"] == 2
    assert ours["base_offset"] == theirs.base_offset
    assert ours["partition_leader_epoch"] == theirs.leader_epoch
    assert ours["crc"] == theirs.crc
    assert ours["crc_ok"] is True and theirs.validate_crc()
    assert ours["attributes"] == theirs.attributes
    assert ours["codec"] == CODECS[theirs.compression_type]
    assert ours["timestamp_type"] == ("log_append" if theirs.timestamp_type else "create")
    assert ours["is_transactional"] == theirs.is_transactional
    assert ours["is_control"] == theirs.is_control_batch
    assert ours["last_offset_delta"] == theirs.last_offset_delta
    assert ours["base_timestamp"] == theirs.first_timestamp
    assert ours["max_timestamp"] == theirs.max_timestamp
    assert ours["producer_id"] == theirs.producer_id
    assert ours["producer_epoch"] == theirs.producer_epoch
    assert ours["base_sequence"] == theirs.base_sequence
    assert ours["record_count"] == theirs.records_count
    assert ours["partial"] is False
    assert ours["diagnostics"] == []
    theirs_records = list(theirs)
    assert len(ours["records"]) == len(theirs_records)
    for mine, ref in zip(ours["records"], theirs_records, strict=True):
        assert mine["offset"] == ref.offset
        assert mine["timestamp_ms"] == ref.timestamp
        assert mine["timestamp"] == iso(ref.timestamp)
        assert mine["timestamp_type"] == ("log_append" if ref.timestamp_type else "create")
        assert as_bytes(mine["key"]) == ref.key
        assert as_bytes(mine["value"]) == ref.value
        assert [(h["key"], as_bytes(h["value"])) for h in mine["headers"]] == list(ref.headers)


SAMPLE = [
    (1_700_000_000_000, b"k0", b"plain text value", [("trace", b"abc"), ("null", None)]),
    (1_700_000_000_005, None, b"\xff\xfe binary", []),
    (1_700_000_000_001, b"\x00\x80", None, [("bin", b"\xc3\x28")]),
    (1_700_000_000_009, "ключ".encode(), "значение ✓".encode() * 30, [("h", b"")]),
]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_v2_every_codec_matches_kafka_python(codec):
    buf = build_v2(SAMPLE * 10, codec=codec, base_offset=1234)
    node, ctx = decode(buf)
    (batch,) = node.value["batches"]
    compare_v2(batch, DefaultRecordBatch(buf))
    assert batch["codec"] == CODECS[codec]
    bnode = node.children[0]
    assert (bnode.offset, bnode.length, bnode.source) == (0, len(buf), 0)
    recs = bnode.children
    assert len(recs) == 40
    if codec:  # records live in a registered decompressed buffer
        src = recs[0].source
        assert src >= 1 and all(r.source == src for r in recs)
        data = ctx.buffers[src - 1]
        assert recs[-1].offset + recs[-1].length == len(data)
    else:
        assert recs[0].offset == 61 and recs[-1].offset + recs[-1].length == len(buf)
    # record nodes tile their buffer without gaps
    assert all(a.offset + a.length == b.offset for a, b in zip(recs, recs[1:], strict=False))


def test_v2_transactional_producer_fields_and_several_batches():
    a = build_v2(SAMPLE, codec=1, transactional=True, pid=4242, epoch=7, seq=100, base_offset=10)
    b = build_v2(SAMPLE[:2], codec=4, pid=4242, epoch=7, seq=104, base_offset=14)
    node, _ = decode(a + b)
    first, second = node.value["batches"]
    compare_v2(first, DefaultRecordBatch(a))
    compare_v2(second, DefaultRecordBatch(b))
    assert (first["producer_id"], first["producer_epoch"], first["base_sequence"]) == (4242, 7, 100)
    assert first["is_transactional"] is True and second["is_transactional"] is False
    assert [r["offset"] for r in second["records"]] == [14, 15]
    assert [c.offset for c in node.children] == [0, len(a)]


def test_v2_log_append_time_stamps_every_record_with_max_timestamp():
    buf = set_attr_bits(build_v2(SAMPLE, codec=2), 0x08)
    node, _ = decode(buf)
    (batch,) = node.value["batches"]
    compare_v2(batch, DefaultRecordBatch(buf))
    assert {r["timestamp_ms"] for r in batch["records"]} == {batch["max_timestamp"]}
    assert {r["timestamp_type"] for r in batch["records"]} == {"log_append"}


def test_v2_delete_horizon_bit():
    buf = set_attr_bits(build_v2(SAMPLE[:1]), 0x40)
    (batch,) = decode(buf)[0].value["batches"]
    assert batch["has_delete_horizon"] is True and batch["crc_ok"] is True


def test_max_value_bytes_truncates_and_says_so():
    buf = build_v2([(1, b"k", "é".encode() * 10, [("h", b"\xff" * 20)]), (2, b"k", b"ab", [])])
    (batch,) = decode(buf, limits=_limits(max_value_bytes=5))[0].value["batches"]
    first, second = batch["records"]
    assert first["value"] == {"text": "éé", "truncated": True, "size": 20}  # split char dropped
    assert first["headers"][0]["value"] == {
        "b64": base64.b64encode(b"\xff" * 5).decode(),
        "truncated": True,
        "size": 20,
    }
    assert second["value"] == "ab" and first["key"] == "k"


def _limits(**kw):
    from dissectors.context import Limits

    return Limits(**kw)


def test_header_only_mode_reports_size_without_parsing():
    buf = build_v2(SAMPLE)
    node = decode_records(b"xx" + buf, 2, len(buf), DecodeContext(decode_records=False))
    assert node.value == {"size": len(buf)} and not node.children
    assert (node.offset, node.length) == (2, len(buf))


def test_offset_into_a_larger_frame():
    buf = build_v2(SAMPLE)
    frame = b"\x01" * 37 + buf + b"\x02" * 5
    node = decode_records(memoryview(frame), 37, len(buf), DecodeContext(strict=True))
    (batch,) = node.value["batches"]
    compare_v2(batch, DefaultRecordBatch(buf))
    assert node.children[0].offset == 37 and node.children[0].children[0].offset == 37 + 61


# ---- magic 0 and 1 ----
def build_legacy(magic, codec, n=3):
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i in range(n):
        b.append(i, 1_600_000_000_000 + i if magic else None, b"k%d" % i, b"value %d" % i)
    return bytes(b.build())


def kafka_python_records(buf):
    mr = MemoryRecords(buf)
    out = []
    while (batch := mr.next_batch()) is not None:
        out.extend(batch)
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_legacy_matches_kafka_python(magic, codec):
    if magic == 0 and codec == 3:
        pytest.skip(
            "kafka-python needs xxhash for KafkaLZ4; "
            "covered by tests/data/records/legacy_lz4_v0.bin"
        )
    buf = build_legacy(magic, codec)
    node, _ = decode(buf)
    batches = node.value["batches"]
    assert len(batches) == (3 if codec == 0 else 1)
    ours = [r for b in batches for r in b["records"]]
    ref = kafka_python_records(buf)
    assert len(ours) == len(ref) == 3
    for mine, theirs in zip(ours, ref, strict=True):
        assert mine["offset"] == theirs.offset
        assert mine["timestamp_ms"] == theirs.timestamp
        assert as_bytes(mine["key"]) == theirs.key
        assert as_bytes(mine["value"]) == theirs.value
        assert mine["headers"] == []
        assert mine["timestamp_type"] == (None if magic == 0 else "create")
    for b in batches:
        assert b["magic"] == magic and b["crc_ok"] is True and b["diagnostics"] == []
        assert b["codec"] == CODECS[codec]
        assert (b["producer_id"], b["is_control"], b["partial"]) == (-1, False, False)


def _set_wrapper(buf: bytes, offset: int, log_append: bool = False) -> bytes:
    b = bytearray(buf)
    struct.pack_into(">q", b, 0, offset)  # the log offset sits outside the CRC
    if log_append:
        b[17] |= 0x08
        struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:])) & 0xFFFFFFFF)
    return bytes(b)


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_magic1_inner_offsets_are_relative_to_the_wrapper(codec):
    buf = _set_wrapper(build_legacy(1, codec, n=4), 103)  # a broker stores the LAST offset
    node, ctx = decode(buf)
    (batch,) = node.value["batches"]
    assert [r["offset"] for r in batch["records"]] == [100, 101, 102, 103]
    assert [r.offset for r in kafka_python_records(buf)] == [100, 101, 102, 103]
    assert batch["offset"] == 103 and batch["base_offset"] == 100
    inner = node.children[0].children
    assert all(n.source == 1 for n in inner) and len(ctx.buffers) == 1


def test_magic1_log_append_wrapper_stamps_inner_messages():
    buf = _set_wrapper(build_legacy(1, 1, n=2), 1, log_append=True)
    (batch,) = decode(buf)[0].value["batches"]
    assert batch["crc_ok"] is True and batch["timestamp_type"] == "log_append"
    assert {r["timestamp_ms"] for r in batch["records"]} == {batch["timestamp_ms"]}
    assert {r["timestamp_type"] for r in batch["records"]} == {"log_append"}
    assert [r.timestamp for r in kafka_python_records(buf)] == [batch["timestamp_ms"]] * 2


def test_magic0_inner_offsets_are_absolute():
    (batch,) = decode(build_legacy(0, 1))[0].value["batches"]
    assert [r["offset"] for r in batch["records"]] == [0, 1, 2]
    assert all(r["crc_ok"] for r in batch["records"])


def test_mixed_magics_in_one_records_field():
    v0, v1, v2 = build_legacy(0, 0, 1), build_legacy(1, 2, 2), build_v2(SAMPLE[:2], codec=3)
    batches = decode(v0 + v1 + v2)[0].value["batches"]
    assert [b["magic"] for b in batches] == [0, 1, 2]
    assert [len(b["records"]) for b in batches] == [1, 2, 2]
    assert all(b["diagnostics"] == [] for b in batches)


# ---- generated record sets ----
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
rec = st.tuples(
    st.integers(min_value=0, max_value=4_000_000_000_000),
    st.one_of(st.none(), st.binary(max_size=24), st.text(max_size=12).map(str.encode)),
    st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=60).map(str.encode)),
    st.lists(header, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(rec, min_size=1, max_size=20),
    codec=st.sampled_from(sorted(CODECS)),
    base=st.integers(min_value=0, max_value=2**62),
    pid=st.integers(min_value=-1, max_value=2**40),
)
def test_generated_record_sets_roundtrip(records, codec, base, pid):
    producer = (pid, 3, 17) if pid >= 0 else (-1, -1, -1)
    buf = build_v2(records, codec, False, *producer, base_offset=base)
    (batch,) = decode(buf)[0].value["batches"]
    compare_v2(batch, DefaultRecordBatch(buf))
    for i, (mine, (ts, key, value, headers)) in enumerate(
        zip(batch["records"], records, strict=True)
    ):
        assert mine["offset"] == base + i
        assert mine["timestamp_ms"] == ts
        assert (as_bytes(mine["key"]), as_bytes(mine["value"])) == (key, value)
        assert [(h["key"], as_bytes(h["value"])) for h in mine["headers"]] == headers


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=24)),
            st.one_of(st.none(), st.binary(max_size=200)),
        ),
        min_size=1,
        max_size=15,
    ),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([0, 1, 2]),
    last=st.integers(min_value=0, max_value=2**40),
)
def test_generated_legacy_sets_match_kafka_python(msgs, magic, codec, last):
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, (key, value) in enumerate(msgs):
        b.append(i, 1_600_000_000_000 + i if magic else None, key, value)
    buf = bytes(b.build())
    if codec:
        buf = _set_wrapper(buf, last + len(msgs) - 1)  # as a broker stores it
    ours = [r for batch in decode(buf)[0].value["batches"] for r in batch["records"]]
    ref = kafka_python_records(buf)
    assert [(r["offset"], r["timestamp_ms"]) for r in ours] == [
        (r.offset, r.timestamp) for r in ref
    ]
    assert [(as_bytes(r["key"]), as_bytes(r["value"])) for r in ours] == msgs
