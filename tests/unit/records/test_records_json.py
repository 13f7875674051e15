"""records_json (the export's fast path) against decode_records (the reference).

Whenever records_json answers, its value is exactly the reference node's value and the
reference found no diagnostic; whenever the reference has a diagnostic, records_json
raises NotClean. Inputs: the committed adversarial inputs, clean batches of every codec,
every prefix of them (Fetch responses cut at max_bytes), bit flips and random bytes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_inputs import DATA, MAKER

from dissectors.context import DecodeContext, Limits
from dissectors.records import decode_records
from dissectors.records_json import NotClean, records_json


def _diagnostics(node) -> list:
    out = []
    for n in node.walk():
        out += n.diagnostics
    return out


def agree(buf: bytes, length: int | None = None, **kw) -> bool:
    """True when records_json answered (and agreed); False when it declined (rightly)."""
    length = len(buf) if length is None else length
    ref = decode_records(buf, 0, length, DecodeContext(**kw))
    try:
        got = records_json(buf, memoryview(buf), 0, length, DecodeContext(**kw))
    except NotClean:
        assert (
            _diagnostics(ref)
            or ref.value["batches"]
            and any(b.get("is_control") for b in ref.value["batches"])
            # a legacy message set entry (its magic unknown when cut before it)
            or any(b.get("magic") in (0, 1) or "message_size" in b for b in ref.value["batches"])
        ), ref.value
        return False
    assert not _diagnostics(ref)
    assert got == ref.value
    return True


def clean_inputs() -> list[bytes]:
    out = [MAKER.builder_batch(n, codec) for n in (1, 3, 40) for codec in (0, 1, 2, 3, 4)]
    out.append(
        MAKER.builder_batch(5, 0, base_offset=1000) + MAKER.builder_batch(2, 4, base_offset=1005)
    )
    out.append(MAKER.batch(MAKER.record(0, None, None) + MAKER.record(1, b"k", "é".encode()), 2))
    out.append(MAKER.batch(MAKER.record(0, b"\xff\xfe", b"\x80binary"), 1))
    return out


@pytest.mark.parametrize("max_value", [None, 3])
def test_clean_batches_agree(max_value: int | None) -> None:
    for buf in clean_inputs():
        assert agree(buf, limits=Limits(max_value_bytes=max_value))


def test_cut_batches_agree() -> None:
    """Every prefix: a Fetch trimmed at max_bytes is clean (partial); other cuts are not."""
    answered = 0
    for buf in clean_inputs():
        for cut in range(len(buf)):
            answered += agree(buf, cut)
    assert answered


def test_committed_adversarial_inputs_decline_or_agree() -> None:
    for path in sorted(DATA.glob("*.bin")):
        agree(path.read_bytes())


def test_bit_flips() -> None:
    rng = random.Random(7)
    for buf in clean_inputs():
        for _ in range(40):
            bad = bytearray(buf)
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            agree(bytes(bad))


def test_without_record_decoding() -> None:
    buf = clean_inputs()[0]
    assert records_json(buf, memoryview(buf), 0, len(buf), DecodeContext(decode_records=False)) == {
        "size": len(buf)
    }


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes(buf: bytes) -> None:
    agree(buf)
