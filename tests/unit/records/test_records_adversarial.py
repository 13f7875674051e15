"""Committed adversarial inputs (tests/data/records, made by make_inputs.py) and robustness."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_inputs import DATA, MAKER

import dissectors.record_batch as record_batch
from dissectors.context import DecodeContext, Limits
from dissectors.diagnostics import Code, Diagnostic
from dissectors.records import decode_records

CASES = MAKER.CASES


def decode(buf: bytes, **kw):
    return decode_records(buf, 0, len(buf), DecodeContext(strict=True, **kw))


def test_committed_inputs_are_what_the_script_makes():
    fresh = MAKER.build_all()
    assert sorted(fresh) == sorted(p.stem for p in DATA.glob("*.bin"))
    for name, data in fresh.items():
        assert (DATA / f"{name}.bin").read_bytes() == data, (
            f"{name}.bin is stale: rerun make_inputs.py"
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_input_gives_its_diagnostic_and_the_rest_decodes(name):
    _maker, codes, counts, partials = CASES[name]
    buf = (DATA / f"{name}.bin").read_bytes()
    node = decode(buf)
    batches = node.value["batches"]
    assert [[d["code"] for d in b["diagnostics"]] for b in batches] == codes
    assert [len(b["records"]) for b in batches] == counts
    assert [b["partial"] for b in batches] == partials
    # the Diagnostic objects on the batch nodes are the ones in the JSON
    for bnode, b in zip(node.children, batches, strict=True):
        assert [d.to_json() for d in bnode.diagnostics] == b["diagnostics"]
        assert all(isinstance(d, Diagnostic) for d in bnode.diagnostics)
    assert not node.diagnostics  # nothing escaped the batches
    # batch nodes tile the records bytes they could frame
    ends = [c.offset + c.length for c in node.children]
    assert [c.offset for c in node.children[1:]] == ends[:-1]


def test_crc_mismatch_still_decodes_the_damaged_record():
    batches = decode((DATA / "crc_mismatch.bin").read_bytes()).value["batches"]
    assert batches[0]["crc_ok"] is False and batches[1]["crc_ok"] is True
    assert batches[0]["records"][2]["value"] != "value2"  # the flipped bit is visible
    assert batches[1]["records"][0]["offset"] == 3


def test_partial_batch_is_labelled_not_reported():
    (full, cut) = decode((DATA / "partial_trailing_batch.bin").read_bytes()).value["batches"]
    assert full["partial"] is False and cut["partial"] is True
    assert cut["crc_ok"] is None and cut["diagnostics"] == []
    assert [r["offset"] for r in cut["records"]] == [3, 4]


def test_bad_varint_skips_only_that_record():
    (b,) = decode((DATA / "bad_varint.bin").read_bytes()).value["batches"]
    assert [r["key"] for r in b["records"]] == ["k0", "k2"]
    assert b["crc_ok"] is True
    bad = b["diagnostics"][0]
    assert bad["code"] == "bad_varint" and 61 < bad["offset"] < 105


@pytest.mark.parametrize("name", ["gzip_bomb", "zstd_bomb"])
def test_bombs_are_stopped_at_the_cap(name):
    buf = (DATA / f"{name}.bin").read_bytes()
    ctx = DecodeContext(strict=True)
    node = decode_records(buf, 0, len(buf), ctx)
    first = node.value["batches"][0]
    assert first["diagnostics"][0]["code"] == "decompression_limit"
    compressed = first["batch_length"] - 49
    cap = min(ctx.limits.max_decompressed_bytes, ctx.limits.max_decompression_ratio * compressed)
    assert all(len(b) <= cap for b in ctx.buffers) and cap < 10_000_000
    # a tighter byte cap wins over the ratio
    small = DecodeContext(strict=True, limits=Limits(max_decompressed_bytes=4096))
    decode_records(buf, 0, len(buf), small)
    assert all(len(b) <= 4096 for b in small.buffers)
    # with generous caps the same bomb is a valid 10 MB record
    roomy = DecodeContext(strict=True, limits=Limits(max_decompression_ratio=10**6))
    ok = decode_records(buf, 0, len(buf), roomy).value["batches"][0]
    assert ok["diagnostics"] == [] and ok["records"][0]["value"] == "\0" * 10_000_000


def test_unknown_codec_keeps_raw_records():
    b = decode((DATA / "unknown_codec.bin").read_bytes()).value["batches"][0]
    assert b["codec"] == "unknown(5)" and b["crc_ok"] is True and "b64" in b["raw_records"]


def test_legacy_lz4_and_xerial_snappy_values():
    (lz,) = decode((DATA / "legacy_lz4_v0.bin").read_bytes()).value["batches"]
    assert [r["value"] for r in lz["records"]] == [f"legacy lz4 {i}" for i in range(3)]
    (sn,) = decode((DATA / "xerial_snappy.bin").read_bytes()).value["batches"]
    assert sn["codec"] == "snappy"
    assert [r["value"] for r in sn["records"]] == ["x" * 3000 + str(i) for i in range(40)]


def _valid_multi_batch() -> bytes:
    m = MAKER
    return (
        m.builder_batch(3)
        + m.builder_batch(2, codec=1, base_offset=3)
        + m.legacy_set(1, 2, codec=2)
        + m.legacy_set(0, 2)
        + m.builder_batch(2, codec=4, base_offset=7)
        + m.legacy_lz4_v0()
    )


def test_every_prefix_decodes_without_raising():
    buf = _valid_multi_batch()
    full = decode(buf).value["batches"]
    assert all(b["diagnostics"] == [] for b in full)
    for n in range(len(buf) + 1):
        node = decode(buf[:n])
        batches = node.value["batches"]
        # a prefix only ever loses the tail: a cut is labelled partial, never diagnosed
        assert all(b["diagnostics"] == [] for b in batches), n
        assert all(not b["partial"] for b in batches[:-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_prefix_of_every_adversarial_input_decodes(name):
    buf = (DATA / f"{name}.bin").read_bytes()
    step = max(1, len(buf) // 400)
    for n in range(0, len(buf) + 1, step):
        decode(buf[:n])


def test_field_longer_than_the_frame_is_reported():
    buf = MAKER.builder_batch(2)
    node = decode_records(buf, 0, len(buf) + 10, DecodeContext(strict=True))
    assert [d.code for d in node.diagnostics] == [Code.TRUNCATED]
    assert len(node.value["batches"][0]["records"]) == 2


def test_one_exception_boundary(monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("bug")

    monkeypatch.setattr("dissectors.records.decode_batch_v2", boom)
    buf = MAKER.builder_batch(1)
    node = decode_records(buf, 0, len(buf), DecodeContext())
    assert [d.code for d in node.diagnostics] == [Code.INTERNAL_ERROR]
    assert node.value["batches"] == [] and node.value["diagnostics"][0]["code"] == "internal_error"
    with pytest.raises(RuntimeError):
        decode_records(buf, 0, len(buf), DecodeContext(strict=True))
    assert record_batch.decode_batch_v2 is not boom  # only the entry point's name was patched


VALID = _valid_multi_batch()


@settings(max_examples=400, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6
    ),
    cut=st.integers(0, len(VALID)),
)
def test_mutated_input_never_raises_and_stays_json(edits, cut):
    buf = bytearray(VALID)
    for pos, byte in edits:
        buf[pos] = byte
    ctx = DecodeContext(strict=True)
    node = decode_records(bytes(buf[:cut]), 0, cut, ctx)
    json.dumps(node.value)  # JSON-ready whatever the damage
    for n in node.walk():
        limit = cut if n.source == 0 else len(ctx.buffers[n.source - 1])
        assert n.offset >= 0 and n.offset + n.length <= limit


def test_legacy_inner_crc_mismatch_marks_that_message():
    (b,) = decode((DATA / "legacy_inner_crc_mismatch.bin").read_bytes()).value["batches"]
    assert b["crc_ok"] is True  # the wrapper is intact
    assert [r["crc_ok"] for r in b["records"]] == [True, True, False]
    assert [r["offset"] for r in b["records"]] == [0, 1, 2]
    assert "decompressed buffer 1" in b["diagnostics"][0]["message"]


def test_legacy_nesting_and_null_wrapper():
    m = MAKER
    inner = m.legacy_message(0, 0, 0, b"k", b"v")
    lvl2 = m.legacy_message(0, 0, 1, None, m.gzip.compress(inner, mtime=0))
    lvl3 = m.legacy_message(0, 0, 1, None, m.gzip.compress(lvl2, mtime=0))
    lvl4 = m.legacy_message(0, 0, 1, None, m.gzip.compress(lvl3, mtime=0))
    (two,) = decode(lvl3).value["batches"]  # one nested level more than Kafka allows: tolerated
    assert two["diagnostics"] == [] and [r["value"] for r in two["records"]] == ["v"]
    (three,) = decode(lvl4).value["batches"]
    assert [d["code"] for d in three["diagnostics"]] == ["nesting_too_deep"]
    (null,) = decode(m.legacy_message(0, 1, 2, None, None)).value["batches"]
    assert [d["code"] for d in null["diagnostics"]] == ["bad_record"]
