"""Whole-schema round trip: every (api, version, direction) in the specs.

Random instances are encoded by an independent encoder -- kio's serializers and
kafka-python's protocol classes where they cover the version (their output is
checked byte-for-byte against the test-only spec encoder), the spec encoder
everywhere else -- then decoded by ours and compared value by value. Leaf
offsets/lengths must tile the body: children inside their parent, disjoint,
the root exactly the body. Every prefix of every sample decodes without raising
(strict context: an internal error would raise).
"""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
import random
import struct
import warnings

import pytest

from dissectors import apis, schemas
from dissectors.context import DecodeContext
from dissectors.decoder import decode_body, decode_message
from dissectors.node import PRIM, RAW, RECORDS, STRUCT, Node
from tests.support import spec_encoder as se

# bytes fields that embedded-protocol hooks may legitimately turn into structs
EMBEDDED = {"AuthBytes", "RequestData", "RequestPrincipal"}
API_KEYS = sorted(apis.API_NAMES)

# Documented disagreements with the independent encoders (checked exactly):
# - kio 0.6.5 maps ReadShareGroupStateSummary v0 to a later draft of that
#   unstable API (an extra LeaderEpoch field).
KIO_KNOWN = {(87, 0, False)}
# - kafka-python 3.0.12 special-cases ApiVersionsResponse (v1-2 drop the
#   throttle time on re-encode; v3-4 expect the v0 error fallback layout) and
#   DeleteTopicsRequest cannot re-encode a decoded instance.
KP_KNOWN = {(18, v, False) for v in range(1, 5)} | {(20, v, True) for v in range(1, 7)}


def assert_spans(node: Node, start: int, end: int, framing: int) -> None:
    """Children inside their parent and disjoint, the root exactly the body, and the
    leaves covering every non-framing byte: together, every byte exactly once."""
    assert (node.offset, node.offset + node.length) == (start, end), node.name
    _check_children(node)
    assert sum(n.length for n in _leaves(node)) == (end - start) - framing


def _leaves(node: Node):
    if node.kind in (PRIM, RAW, RECORDS) or node.name in EMBEDDED and node.kind == STRUCT:
        yield node
        return
    for c in node.children or ():
        yield from _leaves(c)


def _check_children(node: Node) -> None:
    pos = node.offset
    for c in node.children or ():
        assert c.offset >= pos, f"{c.name} overlaps its previous sibling in {node.name}"
        assert c.offset + c.length <= node.offset + node.length, f"{c.name} outside {node.name}"
        assert c.length >= 0
        pos = c.offset + c.length
        _check_children(c)


def values(node: Node, fields: tuple[se.Spec, ...]) -> dict:
    by_name = {c.name: c for c in node.children or ()}
    assert not [n for n in by_name if n.startswith("_")], by_name
    assert set(by_name) <= {s.name for s in fields}
    return {s.name: _value(by_name[s.name], s) for s in fields if s.name in by_name}


def _value(node: Node, s: se.Spec, element: bool = False):
    if s.array and not element:
        return None if node.children is None else [_value(c, s, True) for c in node.children]
    if s.type == "struct":
        return None if node.children is None else values(node, s.fields)
    if s.type == "records":
        return None if node.kind == PRIM else b""
    if s.name in EMBEDDED and node.kind == STRUCT:
        return "<embedded>"
    return node.value


def diagnostics_outside_embedded(node: Node) -> list:
    """Diagnostics of the tree, except inside embedded protocols decoded from random bytes (or
    kept as bytes with a diagnostic: random bytes are rarely a valid structure)."""
    out = list(node.diagnostics)
    for c in node.children or ():
        if not (c.name in EMBEDDED and c.kind in (STRUCT, PRIM)):
            out += diagnostics_outside_embedded(c)
    return out


def check(
    key: int,
    version: int,
    is_request: bool,
    data: bytes,
    expected: dict,
    layout: se.Layout,
    prefixes: bool = True,
) -> None:
    ctx = DecodeContext(strict=True)
    body = decode_body(key, version, is_request, data, 0, len(data), ctx)
    diags = diagnostics_outside_embedded(body)
    assert not diags, diags
    got = values(body, layout.fields)
    for name in EMBEDDED & set(got):
        if got[name] == "<embedded>":
            got[name] = expected[name]
    assert got == expected
    assert_spans(body, 0, len(data), se.framing_bytes(layout, expected))
    for cut in range(len(data) if prefixes else 0):
        part = decode_body(key, version, is_request, data, 0, cut, ctx)
        assert part.offset == 0


def versions(key: int, is_request: bool) -> range:
    lo, hi = (apis.REQUEST_VERSIONS if is_request else apis.RESPONSE_VERSIONS)[key]
    return range(lo, hi + 1)


@pytest.mark.parametrize("is_request", [True, False], ids=["request", "response"])
@pytest.mark.parametrize("key", API_KEYS)
def test_spec_encoder_round_trip(key: int, is_request: bool) -> None:
    for version in versions(key, is_request):
        layout = se.layout_of(se.api_defs(key, is_request), version)
        rng = random.Random(f"{key}/{version}/{is_request}")
        for _ in range(3):
            value = se.random_value(layout, rng)
            check(key, version, is_request, se.encode(layout, value), value, layout)


@pytest.mark.parametrize("name", sorted(schemas.MESSAGE_MODULES))
def test_message_round_trip(name: str) -> None:
    defs = se.message_defs(name)
    for version in range(defs[0]["valid"][0], defs[-1]["valid"][1] + 1):
        layout = se.layout_of(defs, version)
        rng = random.Random(f"{name}/{version}")
        for _ in range(3):
            value = se.random_value(layout, rng)
            data = se.encode(layout, value)
            node = decode_message(name, version, data, 0, len(data), DecodeContext(strict=True))
            assert not [d for n in node.walk() for d in n.diagnostics]
            assert values(node, layout.fields) == value
            assert_spans(node, 0, len(data), se.framing_bytes(layout, value))
            for cut in range(len(data)):
                decode_message(name, version, data, 0, cut, DecodeContext(strict=True))


# ------------------------------------------------------------------ kio


def _kio_entity(key: int, version: int, is_request: bool):
    from kio.index import KioIndexError, load_request_schema, load_response_schema

    try:
        return (load_request_schema if is_request else load_response_schema)(key, version)
    except KioIndexError:
        return None


def test_kio_encodes_what_we_decode() -> None:
    from kio.serial import entity_reader, entity_writer

    covered, disagree = 0, set()
    for key in API_KEYS:
        for is_request in (True, False):
            for version in versions(key, is_request):
                entity = _kio_entity(key, version, is_request)
                if entity is None:
                    continue
                layout = se.layout_of(se.api_defs(key, is_request), version)
                rng = random.Random(f"kio/{key}/{version}/{is_request}")
                for _ in range(2):
                    value = se.random_value(layout, rng, with_tags=False, tame=True)
                    ours = se.encode(layout, value)
                    try:
                        parsed, _ = entity_reader(entity)(ours, 0)
                        buf = io.BytesIO()
                        entity_writer(entity)(buf, parsed)
                    except (KeyError, ValueError):
                        disagree.add((key, version, is_request))
                        break
                    kio_bytes = buf.getvalue()
                    if kio_bytes != ours:
                        disagree.add((key, version, is_request))
                        break
                    check(key, version, is_request, kio_bytes, value, layout, prefixes=False)
                else:
                    covered += 1
    assert disagree == KIO_KNOWN
    assert covered >= 560  # kio 0.6.5 covers ~83% of the (api, version, direction) space


# ------------------------------------------------------------------ kafka-python


def _kafka_python_classes() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.protocol as kp
        from kafka.protocol.api_message import ApiMessage

    found = {}
    for info in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" in info.name or "generate" in info.name:
            continue
        with warnings.catch_warnings():  # kafka-python loads its JSON via a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            mod = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            spec = getattr(cls, "_json", None)
            if (
                issubclass(cls, ApiMessage)
                and cls is not ApiMessage
                and spec
                and spec.get("apiKey") is not None
            ):
                found[(spec["apiKey"], spec["type"] == "request")] = cls
    return found


def test_kafka_python_encodes_what_we_decode() -> None:
    covered, disagree = 0, set()
    for (key, is_request), cls in sorted(_kafka_python_classes().items()):
        lo, hi = cls._valid_versions
        for version in versions(key, is_request):
            if not lo <= version <= hi:
                continue
            layout = se.layout_of(se.api_defs(key, is_request), version)
            rng = random.Random(f"kp/{key}/{version}/{is_request}")
            for _ in range(2):
                value = se.random_value(layout, rng, with_tags=False, tame=True)
                ours = se.encode(layout, value)
                try:
                    obj = cls.decode(ours, version=version)
                    obj._version = version
                    kp_bytes = bytes(obj.encode())
                except (AttributeError, ValueError, TypeError, struct.error):
                    disagree.add((key, version, is_request))
                    break
                if kp_bytes != ours:
                    disagree.add((key, version, is_request))
                    break
                check(key, version, is_request, kp_bytes, value, layout, prefixes=False)
            else:
                covered += 1
    assert disagree == KP_KNOWN
    assert covered >= 460


def test_every_api_version_direction_decodes() -> None:
    total = sum(len(versions(k, r)) for k in API_KEYS for r in (True, False))
    assert total == 686
