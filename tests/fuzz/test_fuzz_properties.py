"""Structure-aware mutation of valid frames (hypothesis) and the byte-accounting property.

Valid material comes from the committed seed corpora (fuzz/corpus/): bodies of
every (api, version, direction) from real captures and the spec encoder, and
record batches of every codec. Mutations aim at the structure the decoder walks,
located through the decoded node tree of the valid input: length prefixes and
array counts (int16/int32 or unsigned varints), tagged-field sections, the
record-batch header (length, magic, codec bits, record count) and record varints.

Properties:
- decoding a mutated body/records field (strict context) never raises, and every
  node stays inside its buffer; the JSON conversion never raises;
- issue 9 item 4: for any segment sequence -- random, or valid conversations
  with mutated frames, reordered, duplicated and dropped segments -- each
  direction's stream bytes = frame bytes + skipped bytes + gap bytes.

Known, reported engine bugs are masked in the engine properties (see
fuzz/targets.py KNOWN_BUGS) so that these tests look for new ones; the known
bugs themselves fail in test_fuzz_corpus.py as strict xfails.
"""

from __future__ import annotations

import struct
from functools import cache, lru_cache

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dissectors.context import DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.jsonify import node_to_json
from dissectors.node import ARRAY, PRIM, RECORDS
from dissectors.records import decode_records
from fuzz import targets as T
from tests.fuzz.fuzzhelp import CORPUS, bounded
from tests.support import packets as P
from tests.support.spec_encoder import uvarint

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


# ---------------------------------------------------------------- valid material
@lru_cache(maxsize=1)
def bodies() -> tuple[tuple[int, int, bool, bytes], ...]:
    """(api, version, is_request, body) of every schema seed, largest variety first."""
    out = []
    for p in sorted((CORPUS / "schema").iterdir()):
        data = p.read_bytes()
        api, v, is_req = T.SCHEMA_TARGETS[int.from_bytes(data[:2], "big") % len(T.SCHEMA_TARGETS)]
        out.append((api, v, is_req, data[3:]))
    return tuple(out)


@lru_cache(maxsize=1)
def flexible_bodies() -> tuple[tuple[int, int, bool, bytes], ...]:
    from dissectors import apis

    def flex(api, v, is_req):
        table = apis.REQUEST_FLEXIBLE_FROM if is_req else apis.RESPONSE_FLEXIBLE_FROM
        first = table.get(api)
        return first is not None and v >= first

    return tuple(b for b in bodies() if flex(*b[:3]) and b[3])


@lru_cache(maxsize=1)
def batches() -> tuple[bytes, ...]:
    """Record batches / message sets (v2 batches and legacy sets of every codec)."""
    return tuple(p.read_bytes()[1:] for p in sorted((CORPUS / "records").iterdir()))


@cache
def prefix_offsets(i: int) -> tuple[int, ...]:
    """Where length prefixes and counts begin in body i: offsets of arrays and string/bytes."""
    api, v, is_req, body = bodies()[i]
    node = decode_body(api, v, is_req, body, 0, len(body), DecodeContext(decode_records=False))
    offs = {
        n.offset
        for n in node.walk()
        if n.kind == ARRAY
        or n.kind == RECORDS
        or (n.kind == PRIM and isinstance(n.value, (str, bytes)))
    }
    return tuple(sorted(o for o in offs if o < len(body)))


# mutations of a prefix: fixed-width extremes and varint shapes
INT_PATTERNS = [
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\x00\x00",
    b"\x00\x01",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x00\x00\x00\x00",
    b"\x00\xff\xff\xff",
    b"\x00\x00\x10\x00",
]
VARINT_PATTERNS = [
    b"\x00",
    b"\x01",
    b"\x7f",
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x7f",  # 2^32-1, overflow
    b"\x80\x80\x80\x80\x80\x80",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # too long
    b"\x80",
    b"\xfe\xff\xff\xff\x07",
    b"\x80\x80\x04",
]


def mutate_at(buf: bytes, off: int, pattern: bytes, insert: bool) -> bytes:
    if insert:  # a varint that got longer/shorter shifts what follows
        return buf[:off] + pattern + buf[off + 1 :]
    return buf[:off] + pattern + buf[off + len(pattern) :]


def decode_strict(api: int, v: int, is_req: bool, buf: bytes) -> None:
    ctx = DecodeContext(limits=Limits(max_decompressed_bytes=1 << 20), strict=True)
    node = decode_body(api, v, is_req, buf, 0, len(buf), ctx)
    node_to_json(node, ctx)
    T.check_node(node, ctx)


# ---------------------------------------------------------------- schema mutations
@SETTINGS
@given(st.data())
def test_mutated_lengths_and_counts_never_raise(data):
    i = data.draw(st.integers(0, len(bodies()) - 1), label="body")
    api, v, is_req, body = bodies()[i]
    offs = prefix_offsets(i)
    assume(offs)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        off = data.draw(st.sampled_from(offs), label="offset")
        if data.draw(st.booleans(), label="varint"):
            buf = mutate_at(body, off, data.draw(st.sampled_from(VARINT_PATTERNS)), insert=True)
        else:
            buf = mutate_at(body, off, data.draw(st.sampled_from(INT_PATTERNS)), insert=False)
        body = buf[: len(body) + 16]
    bounded(lambda b: decode_strict(api, v, is_req, b), body, 5.0)


@SETTINGS
@given(st.data())
def test_tagged_field_storms_never_raise(data):
    """Replace the top-level tag section (the body's last byte, an empty tag count in the
    valid input) with many tags: repeated, unordered, huge numbers, sizes past the end."""
    api, v, is_req, body = data.draw(st.sampled_from(flexible_bodies()), label="body")
    tags = data.draw(
        st.lists(
            st.tuples(
                st.one_of(st.integers(0, 5), st.integers(0, 2**31)),
                st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1)),
                st.binary(max_size=8),
            ),
            max_size=300,
        ),
        label="tags",
    )
    count = data.draw(st.one_of(st.just(len(tags)), st.integers(0, 2**32 - 1)), label="count")
    storm = uvarint(count) + b"".join(uvarint(t) + uvarint(s) + d for t, s, d in tags)
    bounded(lambda b: decode_strict(api, v, is_req, b), body[:-1] + storm, 5.0)


@SETTINGS
@given(st.data())
def test_random_bytes_in_every_schema_never_raise(data):
    api, v, is_req = data.draw(st.sampled_from(T.SCHEMA_TARGETS), label="schema")
    buf = data.draw(st.binary(max_size=200), label="body")
    bounded(lambda b: decode_strict(api, v, is_req, b), buf, 5.0)


# ---------------------------------------------------------------- records mutations
BATCH_FIELDS = {  # (offset, width) in a v2 batch header
    "base_offset": (0, 8),
    "batch_length": (8, 4),
    "magic": (16, 1),
    "attributes": (21, 2),
    "last_offset_delta": (23, 4),
    "records_count": (57, 4),
}


@SETTINGS
@given(st.data())
def test_mutated_record_batches_never_raise(data):
    buf = bytearray(data.draw(st.sampled_from(batches()), label="batch"))
    assume(len(buf) > 61)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        kind = data.draw(st.sampled_from(["codec", "field", "varint"]), label="kind")
        if kind == "codec":  # codec bits (0-2), timestamp type (3), transactional (4), control (5)
            buf[22] = data.draw(st.integers(0, 255))
        elif kind == "field":
            off, width = BATCH_FIELDS[data.draw(st.sampled_from(sorted(BATCH_FIELDS)))]
            val = data.draw(
                st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF])
            )
            buf[off : off + width] = (val & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
        elif kind == "varint":  # inside the records (uncompressed ones: lengths, deltas, counts)
            off = data.draw(st.integers(61, len(buf) - 1))
            buf[off : off + 1] = data.draw(st.sampled_from(VARINT_PATTERNS))
    if data.draw(st.booleans(), label="truncate"):
        del buf[data.draw(st.integers(0, len(buf))) :]
    ctx = DecodeContext(limits=Limits(max_decompressed_bytes=1 << 20), strict=True)

    def run(b):
        node = decode_records(b, 0, len(b), ctx)
        node_to_json(node, ctx)

    bounded(run, bytes(buf), 5.0)


# ---------------------------------------------------------------- byte accounting
def _accounting(data: bytes) -> None:
    with T.known_bugs_masked():
        bounded(T.run_stream, data, 10.0)  # run_stream asserts the accounting on close


@settings(SETTINGS, max_examples=100)
@given(st.binary(max_size=600))
def test_byte_accounting_random_inputs(data):
    _accounting(data)


def _frames() -> list[bytes]:
    out = []
    for i, (api, v, is_req, body) in enumerate(bodies()[:: max(1, len(bodies()) // 60)]):
        if is_req:
            out.append(P.request_frame(api, v, i, "fuzz", body[:300]))
        else:
            out.append(P.response_frame(i, body[:300]))
    return out


FRAMES = _frames()
SIZES = [
    0,
    1,
    3,
    4,
    7,
    8,
    9,
    100,
    511,
    512,
    513,
    0x7FFF,
    0xFFFFFF,
    0x0FFFFFFF,
    0x10000000,
    0x10000001,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
]


@st.composite
def conversations(draw):
    """A valid request/response conversation, then structure-aware damage: size prefixes
    replaced, segments split, reordered, duplicated (retransmitted, sometimes with other
    bytes), dropped (gaps), plus FIN/RST/port-reuse flags."""
    sel = draw(st.integers(0, 31), label="limits")
    segs: list[tuple[int, int, bytes]] = [(18, 0, b""), (3, 0, b"")]  # SYN, SYN-ACK
    for _ in range(draw(st.integers(1, 6), label="exchanges")):
        frame = bytearray(draw(st.sampled_from(FRAMES)))
        if draw(st.booleans()):
            frame[:4] = draw(st.sampled_from(SIZES)).to_bytes(4, "big")
        from_broker = draw(st.booleans())
        cut = draw(st.integers(0, len(frame)))
        segs.extend((1 if from_broker else 0, 0, bytes(p)) for p in (frame[:cut], frame[cut:]) if p)
    n = len(segs)
    for _ in range(draw(st.integers(0, 4), label="damage")):
        i = draw(st.integers(2, n - 1)) if n > 2 else 1
        flags, delta, payload = segs[i]
        what = draw(st.sampled_from(["drop", "swap", "dup", "conflict", "flag"]))
        if what == "drop":  # the next in-order segment then lands past a hole
            segs[i] = (flags, len(payload), b"")
        elif what == "swap" and i + 1 < n:
            segs[i], segs[i + 1] = segs[i + 1], segs[i]
        elif what == "dup":
            segs.insert(i + 1, (flags, -len(payload), payload))
        elif what == "conflict":
            segs.insert(i + 1, (flags, -len(payload), bytes(b ^ 0x55 for b in payload)))
        else:
            segs[i] = (flags | draw(st.sampled_from([4, 8, 16, 32, 64])), delta, payload)
    return T.encode_stream(sel, segs)


@settings(SETTINGS, max_examples=80)
@given(conversations())
def test_byte_accounting_mutated_conversations(data):
    _accounting(data)


@settings(SETTINGS, max_examples=40)
@given(st.data())
def test_byte_accounting_mutated_capture_seeds(data):
    """Real connections (stream seeds from captures/) with random byte damage."""
    seeds = sorted((CORPUS / "stream").iterdir())
    buf = bytearray(data.draw(st.sampled_from(seeds)).read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        off = data.draw(st.integers(0, len(buf) - 1))
        buf[off] = data.draw(st.integers(0, 255))
    _accounting(bytes(buf))


def test_accounting_helper_catches_a_mismatch():
    """The property is not vacuous: an engine whose numbers do not add up fails it."""
    engine = T.run_stream(T.encode_stream(0, [(0, 0, P.request_frame(18, 0, 1, "x"))]))
    assert engine.stats.client.frames > 0
    engine.stats.client.frames += 1
    try:
        T.check_accounting(engine)
    except AssertionError:
        return
    raise AssertionError("check_accounting accepted inconsistent totals")


def test_struct_sizes():  # guard the hard-coded batch header offsets against the v2 layout
    assert struct.calcsize(">qiibIhiqqqhii") == 61
