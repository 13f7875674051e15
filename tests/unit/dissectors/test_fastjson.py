"""The straight-to-JSON fast path against the reference path (Node tree + jsonify).

For every (api, version, direction) the fast path compiles: random bodies (with
and without tagged fields), every prefix of them, bit flips, and every body of
every committed capture give either FALLBACK or exactly what the reference path
gives: the same value, the same diagnostics, the same float flag, and no trace
left in the walk or the context when it falls back.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dissectors import apis, fastjson
from dissectors.context import DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.embedded import HOOKS
from dissectors.fastjson import FALLBACK, decode_body_json, json_reader, json_source
from dissectors.jsonify import JsonWalk, node_to_json_collect
from tests.support import spec_encoder as se

ROOT = Path(__file__).resolve().parents[3]
API_KEYS = sorted(apis.API_NAMES)


def reference(key: int, version: int, is_request: bool, data: bytes, end: int, ctx: DecodeContext):
    walk = JsonWalk()
    node = decode_body(key, version, is_request, data, 0, end, ctx)
    return node_to_json_collect(node, ctx, walk), walk.diagnostics, walk.odd_float


def fast(key: int, version: int, is_request: bool, data: bytes, end: int, ctx: DecodeContext):
    walk = JsonWalk()
    walk.diagnostics.append({"code": "earlier"})  # what was there before must stay
    before = len(ctx.buffers)
    value = decode_body_json(key, version, is_request, data, 0, end, ctx, walk)
    if value is FALLBACK:
        assert walk.diagnostics == [{"code": "earlier"}] and not walk.odd_float
        assert len(ctx.buffers) == before
        return FALLBACK
    return value, walk.diagnostics[1:], walk.odd_float


def agree(
    key: int, version: int, is_request: bool, data: bytes, end: int | None = None, **ctx_args
) -> bool:
    """Fast path == reference path (or FALLBACK); True when the fast path answered."""
    end = len(data) if end is None else end
    got = fast(key, version, is_request, data, end, DecodeContext(strict=True, **ctx_args))
    if got is FALLBACK:
        return False
    assert got == reference(
        key, version, is_request, data, end, DecodeContext(strict=True, **ctx_args)
    )
    return True


def versions(key: int, is_request: bool) -> range:
    lo, hi = (apis.REQUEST_VERSIONS if is_request else apis.RESPONSE_VERSIONS)[key]
    return range(lo, hi + 1)


@pytest.mark.parametrize("is_request", [True, False], ids=["request", "response"])
@pytest.mark.parametrize("key", API_KEYS)
def test_random_bodies_agree(key: int, is_request: bool) -> None:
    answered = 0
    for version in versions(key, is_request):
        layout = se.layout_of(se.api_defs(key, is_request), version)
        rng = random.Random(f"fastjson/{key}/{version}/{is_request}")
        for with_tags in (False, True):
            value = se.random_value(layout, rng, with_tags=with_tags)
            data = se.encode(layout, value)
            answered += agree(key, version, is_request, data)
            for cut in range(len(data)):
                agree(key, version, is_request, data, cut)
            for _ in range(20):  # damaged bytes: a diagnostic somewhere, or a different value
                bad = bytearray(data)
                if bad:
                    bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
                agree(key, version, is_request, bytes(bad))
    if (key, is_request) not in HOOKS and json_reader(
        key, versions(key, is_request)[-1], is_request
    ):
        assert answered  # clean bodies without tags are the fast path's job


def test_plans_compile_where_expected() -> None:
    """Only hooked APIs (and bodies with secrets) are left to the reference path."""
    missing = [
        (key, version, is_request)
        for key in API_KEYS
        for is_request in (True, False)
        for version in versions(key, is_request)
        if json_reader(key, version, is_request) is None and (key, is_request) not in HOOKS
    ]
    secret_apis = {38, 39, 40, 41, 50, 51}  # delegation tokens, SCRAM credentials
    assert {k for k, _, _ in missing} <= secret_apis, missing


def test_source_is_readable_python() -> None:
    src = json_source(0, 8, True)
    assert src is not None and src.startswith(
        "def _s0(buf, pos, end, ctx, walk):  # api 0 v8 request"
    )
    assert "'partition_data'" in src and "records(buf, pos" in src
    assert json_source(3, 9, False) is None  # Metadata responses teach topic names: reference path


def test_a_bug_in_the_fast_path_is_raised_when_strict(monkeypatch) -> None:
    def buggy(*args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(fastjson, "json_reader", lambda *key: buggy)
    data = b"\0" * 16
    with pytest.raises(ZeroDivisionError):
        decode_body_json(18, 0, True, data, 0, len(data), DecodeContext(strict=True), JsonWalk())
    walk = JsonWalk()
    assert decode_body_json(18, 0, True, data, 0, len(data), DecodeContext(), walk) is FALLBACK
    assert walk.diagnostics == []


def test_array_limit_sends_to_the_reference_path() -> None:
    layout = se.layout_of(se.api_defs(0, False), 8)
    rng = random.Random(0)
    value = se.random_value(layout, rng, with_tags=False)
    while not value["Responses"]:
        value = se.random_value(layout, rng, with_tags=False)
    data = se.encode(layout, value)
    assert agree(0, 8, False, data)
    assert not agree(0, 8, False, data, limits=Limits(max_array_count=0))


CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "captures" / "replication").glob("*.pcap")
)


@pytest.mark.skipif(not CAPTURES, reason="no captures in the checkout")
@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
@pytest.mark.parametrize(
    "settings",
    [{}, {"limits": Limits(max_value_bytes=16)}, {"decode_records": False}],
    ids=["default", "max-value-bytes", "no-records"],
)
def test_capture_bodies_agree(path: Path, settings: dict) -> None:
    from kanalyze.session import Session

    answered = 0
    for ex in Session([str(path)]).exchanges():
        if ex.api_key is None or ex.api_version is None:
            continue
        for msg, is_request in ex.messages():
            data = msg.pdu.data
            end = len(data)
            ctx = DecodeContext(strict=True, **settings)
            got = fast_at(ex.api_key, ex.api_version, is_request, data, msg.body_offset, end, ctx)
            if got is FALLBACK:
                continue
            answered += 1
            walk = JsonWalk()
            ref_ctx = DecodeContext(strict=True, **settings)
            node = decode_body(
                ex.api_key, ex.api_version, is_request, data, msg.body_offset, end, ref_ctx
            )
            assert got == (
                node_to_json_collect(node, ref_ctx, walk),
                walk.diagnostics,
                walk.odd_float,
            )
            assert not got[1]  # records with diagnostics go to the reference path
    assert answered


def fast_at(
    key: int, version: int, is_request: bool, data: bytes, offset: int, end: int, ctx: DecodeContext
):
    walk = JsonWalk()
    value = decode_body_json(key, version, is_request, data, offset, end, ctx, walk)
    return FALLBACK if value is FALLBACK else (value, walk.diagnostics, walk.odd_float)


@pytest.mark.skipif(not CAPTURES, reason="no captures in the checkout")
def test_export_lines_as_bytes_and_text_agree() -> None:
    """ExchangeEncoder.line_bytes (binary outputs) is line() in UTF-8, with and without bodies."""
    from kanalyze.export import ExchangeEncoder, dumps
    from kanalyze.session import Session

    for path in CAPTURES[:6]:
        for decode in (True, False):
            enc = ExchangeEncoder(DecodeContext(), decode=decode)
            ref = ExchangeEncoder(DecodeContext(), decode=decode)
            for ex in Session([str(path)]).exchanges():
                line = enc.line(ex)
                assert enc.line_bytes(ex) == line.encode()
                assert line == dumps(ref.encode(ex))
