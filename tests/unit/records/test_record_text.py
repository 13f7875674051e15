"""The compiled record encoder (`dissectors/record_text.pyx`) against the dict path.

Where it is built (`python tools/compile.py`), random batches -- random header fields (both
timestamp types, every codec name, crc_ok true/false/null, partial or not) around random
record streams: null keys and values, headers, control characters, quotes, invalid and edge
UTF-8, big and negative varints, sums past 64 bits, the record limit and decode budget, cut
and damaged bytes -- go through the encoder and through `read_records` + `to_json`: whenever
the encoder answers, the reference found no diagnostic, the counts and the budget agree, and
its text is what orjson and json write for the reference's dicts. Whole records fields
(every codec, every prefix, bit flips, the committed adversarial inputs) go through
`records_json` with and without batch text and must give the same NDJSON bytes. Skipped
where nothing is built; the switch, the json fallback and the reading back of batch text are
tested everywhere.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_inputs import DATA
from test_records_json import clean_inputs

from dissectors import native
from dissectors.batch_header import HEADER, read_header
from dissectors.context import DecodeContext, Limits
from dissectors.record_batch import record_args
from dissectors.record_fragments import ENCODE, JsonText, as_json, as_value, batches_of
from dissectors.record_reader import read_records
from dissectors.records_json import NotClean, batch_text, records_json
from kanalyze.jsontext import dumps

ROOT = Path(__file__).resolve().parents[3]
built = pytest.mark.skipif(ENCODE is None, reason="record encoder not built (tools/compile.py)")


# ------------------------------------------------------------------ record bytes


def _uvarint(u: int) -> bytes:
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varint(n: int) -> bytes:
    return _uvarint(n << 1 if n >= 0 else ((-n) << 1) - 1)


def _field(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


EDGES = [
    b"",
    b'\x00\x01\x08\t\n\x0b\x0c\r\x1f"\\/\x7f',  # every escape json and orjson write
    "é€\U0010ffff\u2028".encode(),  # 2, 3 and 4 bytes, the highest code point, U+2028
    b"\xed\xa0\x80",  # a surrogate: not UTF-8 for Python
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xc0\x80",  # overlong
    b"\xe0\x80\x80",  # overlong
    b"\xf0\x80\x80\x80",  # overlong
    b"\xe2\x82",  # cut sequence
    b"\x80abc",  # stray continuation byte
    b"\xff",
]

byte_values = st.one_of(
    st.binary(max_size=24),
    st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from(EDGES),
)
nullable = st.one_of(st.none(), byte_values)
I64 = st.integers(-(2**63), 2**63 - 1)
deltas = st.one_of(st.integers(-300, 300), st.integers(-(2**31), 2**31 - 1))
ts_deltas = st.one_of(st.integers(-300, 300), I64)


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, int]]]:
    """A record stream and, per record, its (offset delta, timestamp delta, body length)."""
    out, meta = bytearray(), []
    for _ in range(draw(st.integers(0, 6))):
        ts, off = draw(ts_deltas), draw(deltas)
        body = bytes([draw(st.integers(0, 255))]) + _varint(ts) + _varint(off)
        body += _field(draw(nullable)) + _field(draw(nullable))
        headers = draw(st.lists(st.tuples(byte_values, nullable), max_size=3))
        body += _varint(len(headers))
        for hk, hv in headers:
            body += _field(hk) + _field(hv)
        out += _varint(len(body)) + body
        meta.append((off, ts, len(body)))
    return bytes(out), meta


def _damage(data: bytes, how: int, where: int, byte: int) -> bytes:
    if not data or how == 0:
        return data
    i = where % len(data)
    if how == 1:
        return data[:i]  # cut
    if how == 2:
        return data[:i] + bytes([byte]) + data[i + 1 :]  # one byte changed
    return data + bytes([byte, byte ^ 0x5A])  # trailing bytes


def _fits(value: int) -> bool:
    return -(2**63) <= value < 2**63


# ------------------------------------------------------------------ the encoder


@built
@settings(max_examples=600, deadline=None)
@given(
    stream=records(),
    base_offset=st.one_of(st.integers(0, 10**6), I64),
    base_ts=st.one_of(st.just(1_700_000_000_000), st.just(-1), I64),
    max_ts=st.one_of(st.just(1_700_000_000_123), st.just(-1), I64),
    attributes=st.integers(0, 0x7FFF).map(lambda a: a & ~0x20),  # not a control batch
    fields=st.tuples(
        st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 2**32 - 1), st.integers(-(2**31), 2**31 - 1), I64,
        st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1),
    ),
    count=st.one_of(st.integers(0, 8), st.integers(-(2**31), 2**31 - 1)),
    crc_ok=st.sampled_from([True, False, None]),
    most=st.one_of(st.just(250_000), st.integers(0, 6)),
    budget=st.one_of(st.none(), st.integers(0, 8 * 1024)),
    cut=st.booleans(),
    damage=st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.integers(0, 255)),
)
def test_encoder_writes_what_the_dicts_give(
    stream: tuple[bytes, list[tuple[int, int, int]]],
    base_offset: int,
    base_ts: int,
    max_ts: int,
    attributes: int,
    fields: tuple[int, int, int, int, int, int, int],
    count: int,
    crc_ok: bool | None,
    most: int,
    budget: int | None,
    cut: bool,
    damage: tuple[int, int, int],
) -> None:
    clean, meta = stream
    length, leader_epoch, crc, last_delta, producer, epoch, sequence = fields
    head = HEADER.pack(
        base_offset, length, leader_epoch, 2, crc, attributes, last_delta, base_ts, max_ts,
        producer, epoch, sequence, count,
    )
    header = read_header(head, 0)
    data = _damage(clean, *damage)
    limits = Limits(max_records_per_batch=most)
    mine = DecodeContext(limits=limits, budget=budget)
    ref = DecodeContext(limits=limits, budget=budget)
    got = batch_text(head, 0, crc_ok, cut, data, 0, len(data), header, mine)
    diags: list = []
    recs, spans, _ = read_records(data, 0, len(data), record_args(header, ref), diags, cut=cut)
    if header.codec not in (0, 1, 2, 3, 4):
        assert got is None  # not a codec the batch object names
        return
    if got is None:
        # it may decline only what it leaves to the reference: damage, limits, odd varints
        # (longer than 4 bytes, 9 for the timestamp delta) or sums beyond 64 bits
        log_append = attributes & 0x08
        ordinary = all(
            abs(off) < 2**27
            and abs(ts) < 2**62
            and size < 2**27
            and _fits(base_offset + off)
            and (log_append or _fits(base_ts + ts))
            for off, ts, size in meta
        )
        limit = header.record_limit(limits)
        afford = limit if budget is None else min(limit, budget // 1024)
        assert damage[0] != 0 or not ordinary or len(meta) > afford, (data, diags)
        assert mine.budget == budget  # nothing spent: the reference spends
        return
    text, n = got
    assert isinstance(text, JsonText)
    assert not diags, diags
    assert n == len(spans) - 1 == len(recs)
    assert mine.budget == ref.budget
    want = header.to_json(crc_ok, cut, recs)
    assert text.text == orjson.dumps(want)
    assert text.text == dumps(want).encode()


# a byte (or sequence) of each kind the scan stops at, and one it must not stop at
SPECIALS = [b'"', b"\\", b"\x00", b"\x1f", b"\n", b"\x7f", b"\xc3\xa9", "€".encode(),
            "\U0001f600".encode(), b"\xff", b"\x80", b"\xe2\x82"]


@built
def test_every_special_at_every_offset() -> None:
    """Values of 0-40 bytes with one or two specials at each offset: both scans (16 bytes, 8
    bytes) and the bytes between them, across their boundaries, give what the dicts give."""
    head = HEADER.pack(0, 0, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)
    header = read_header(head, 0)
    for size in range(41):
        for at in range(size + 1):
            for i, special in enumerate(SPECIALS):
                second = SPECIALS[(i + 5) % len(SPECIALS)]
                for value in (
                    b"a" * at + special + b"b" * (size - at),
                    b"a" * at + special + b"b" * (size // 2) + second + b"c" * (size - at),
                ):
                    body = b"\x00" + _varint(0) + _varint(0) + _field(b"k") + _field(value)
                    body += _varint(1) + _field(value) + _field(value)
                    data = _varint(len(body)) + body
                    got = batch_text(head, 0, True, False, data, 0, len(data), header,
                                     DecodeContext())
                    recs, _, _ = read_records(data, 0, len(data),
                                              record_args(header, DecodeContext()), [], cut=False)
                    assert got is not None and got[1] == 1
                    assert got[0].text == orjson.dumps(header.to_json(True, False, recs)), value


EDGE_TIMES = [0, -1, -2, -999, -1000, -1001, 999, 1000, 1001, 1_700_000_000_123,
              1_700_000_000_999, 1_700_000_001_000, 253_402_300_799_999, 253_402_300_800_000,
              -62_135_596_800_000, -62_135_596_800_001, 2**62 - 1, -(2**62), -1, 5, -1]


@built
def test_record_times_at_the_edges() -> None:
    """Record timestamps around -1 (null), second and millisecond boundaries, year 1 and year
    9999 and far past both (the longest varint the encoder takes), one after another in a
    batch (the encoder keeps the last second's text) and across batches, give what the dicts
    give."""
    for times in (EDGE_TIMES, EDGE_TIMES[::-1], [t + 1 for t in EDGE_TIMES[:-6]]):
        head = HEADER.pack(0, 0, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, len(times))
        header = read_header(head, 0)
        data = b""
        for i, ts in enumerate(times):
            body = b"\x00" + _varint(ts) + _varint(i) + _field(None) + _field(b"v") + _varint(0)
            data += _varint(len(body)) + body
        got = batch_text(head, 0, True, False, data, 0, len(data), header, DecodeContext())
        recs, _, _ = read_records(data, 0, len(data), record_args(header, DecodeContext()), [],
                                  cut=False)
        assert got is not None and got[1] == len(times)
        assert got[0].text == orjson.dumps(header.to_json(True, False, recs))
        if -62_135_596_800_000 in times:  # year 1's first millisecond, and -1
            assert b'"timestamp":null' in got[0].text
            assert b'"0001-01-01T00:00:00.000Z"' in got[0].text


@built
def test_encoder_declines_values_to_truncate_and_control_batches() -> None:
    data = _varint(8) + b"\x00\x00\x00" + _field(b"k") + _field(b"v") + b"\x00"

    def text(attributes: int, ctx: DecodeContext, records: object = data) -> object:
        head = HEADER.pack(0, 0, 0, 2, 0, attributes, 0, 0, 0, 0, 0, 0, 1)
        return batch_text(head, 0, True, False, records, 0, 9, read_header(head, 0), ctx)

    assert text(0, DecodeContext()) is not None
    assert text(0, DecodeContext(limits=Limits(max_value_bytes=3))) is None
    assert text(0x20, DecodeContext()) is None  # control
    assert text(0, DecodeContext(), bytearray(data)) is None


# ------------------------------------------------------------------ whole batches


_dumps_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=as_value).encode


def _line(value: object) -> bytes:
    return orjson.dumps({"records": value}, default=as_json)


def _both(buf: bytes, length: int | None = None, **kw: object) -> bool:
    """records_json with record text gives the line the dicts give; True when it answered."""
    length = len(buf) if length is None else length
    outcome = []
    for text in (False, True):
        ctx = DecodeContext(**kw)  # type: ignore[arg-type]
        ctx.record_fragments = text
        try:
            value = records_json(buf, memoryview(buf), 0, length, ctx)
        except NotClean:
            outcome.append(None)
            continue
        outcome.append((_line(value), _dumps_text({"records": value})))
    dicts, texts = outcome
    assert dicts == texts
    assert dicts is None or dicts[0] == dicts[1].encode()
    return dicts is not None


@built
@pytest.mark.parametrize("max_value", [None, 3])
def test_batches_and_their_prefixes(max_value: int | None) -> None:
    answered = 0
    for buf in clean_inputs():
        answered += _both(buf, limits=Limits(max_value_bytes=max_value))
        for cut in range(0, len(buf), 7):
            answered += _both(buf, cut, limits=Limits(max_value_bytes=max_value))
    assert answered > 100


@built
def test_damaged_and_adversarial_batches() -> None:
    rng = random.Random(11)
    for buf in clean_inputs():
        for _ in range(30):
            bad = bytearray(buf)
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            _both(bytes(bad))
    for path in sorted(DATA.glob("*.bin")):
        _both(path.read_bytes())


@built
def test_the_export_uses_the_encoder() -> None:
    buf = clean_inputs()[0]
    ctx = DecodeContext()
    ctx.record_fragments = True
    value = records_json(buf, memoryview(buf), 0, len(buf), ctx)
    assert type(value["batches"][0]) is JsonText


# ------------------------------------------------------------------ everywhere


RECS = [
    {"offset": 2**40, "key": None, "value": 'a"\n\x01é', "headers": [{"key": "h", "value": None}]},
    {"offset": -1, "key": {"b64": "/w=="}, "value": "", "headers": []},
]
BATCH = {"base_offset": 0, "is_control": False, "records": RECS, "diagnostics": []}


def test_json_text_splices_and_reads_back_as_the_dicts() -> None:
    text = JsonText(orjson.dumps(BATCH))
    doc = {"batches": [text], "ratio": 1e-7}  # a float json spells
    assert _dumps_text(doc) == dumps({"batches": [BATCH], "ratio": 1e-7})
    both = orjson.dumps({"batches": [text, BATCH]}, default=as_json)
    assert both == orjson.dumps({"batches": [BATCH, BATCH]})
    assert as_value(text) == BATCH
    field = {"batches": [text, {"base_offset": 1}]}
    assert batches_of(field) == [BATCH, {"base_offset": 1}]
    assert field["batches"][0] == BATCH  # kept as a dict
    assert batches_of({"size": 3}) == [] and batches_of(None) == []
    with pytest.raises(TypeError):
        as_json(object())
    with pytest.raises(TypeError):
        _dumps_text({"x": object()})


def test_the_encoder_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.delenv("KANALYZE_PURE", raising=False)
    (tmp_path / "pkg").mkdir()
    src, ext = native.pyx_source("pkg.enc"), native.extension("pkg.enc")
    src.write_text("")
    assert not native.cython_usable("pkg.enc")  # not built
    ext.write_bytes(b"")
    os.utime(src, (1000, 1000))
    os.utime(ext, (2000, 2000))
    assert native.cython_usable("pkg.enc")
    monkeypatch.setenv("KANALYZE_PURE", "1")
    assert not native.cython_usable("pkg.enc")
    monkeypatch.setenv("KANALYZE_PURE", "0")
    os.utime(src, (3000, 3000))  # edited after the build
    assert not native.cython_usable("pkg.enc")


def test_no_encoder_no_text() -> None:
    """Without the encoder (pure Python) the fast path builds the dicts, as before."""
    if ENCODE is not None:
        pytest.skip("the encoder is built here")
    buf = clean_inputs()[0]
    ctx = DecodeContext()
    ctx.record_fragments = True
    value = records_json(buf, memoryview(buf), 0, len(buf), ctx)
    assert isinstance(value["batches"][0], dict)
    assert isinstance(value["batches"][0]["records"], list)


@pytest.mark.parametrize("name", ["lib_codecs.pcap", "replication/textbook.pcap"])
def test_text_only_in_the_line(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the line asks for batch text: `encode` (metrics, filters, views) gets dicts, and
    the line is the text of what `encode` gives, also when json writes it (floats orjson
    spells differently)."""
    import sys

    from kanalyze.export import ExchangeEncoder
    from kanalyze.session import Session

    enc = ExchangeEncoder(DecodeContext(strict=True))
    seen = 0
    exchanges = list(Session([str(ROOT / "captures" / name)]).exchanges())
    for ex in exchanges:
        d = enc.encode(ex)
        assert "JsonText" not in repr(d)
        line = enc.line(ex)
        assert line == dumps(d)
        seen += '"records":[{' in line
    assert seen  # some exchanges carry records
    # the json fallback: as if every line had a float orjson spells differently
    monkeypatch.setattr(sys.modules[ExchangeEncoder.__module__], "_plain_times", lambda d: False)
    for ex in exchanges:
        assert enc.line(ex) == dumps(enc.encode(ex))
