"""Tagged fields by name, unknown tags, truncation, count bombs, unknown versions, the boundary."""

from __future__ import annotations

import struct
import time

import pytest

from dissectors import decode_body, decode_message, decoder
from dissectors.context import DecodeContext
from dissectors.jsonify import node_to_json
from dissectors.node import ARRAY, PRIM, RAW, STRUCT, Node
from tests.support import spec_encoder as se


def codes(node: Node) -> list[tuple[str, int]]:
    return [(str(d.code), d.offset) for n in node.walk() for d in n.diagnostics]


def decode(key: int, version: int, is_request: bool, data: bytes, **kw) -> Node:
    return decode_body(key, version, is_request, data, 0, len(data), DecodeContext(**kw))


def test_fetch_request_v15_replica_state_is_a_named_tagged_field() -> None:
    layout = se.api_layout(1, 15, True)
    assert se.field(layout.fields, "ReplicaState").tag == 1
    state = {"ReplicaId": 7, "ReplicaEpoch": 99}
    value = se.random_struct(layout.fields, Topics=[], ForgottenTopicsData=[], ReplicaState=state)
    data = se.encode(layout, value)
    body = decode(1, 15, True, data)
    assert codes(body) == []
    rs = body.child("ReplicaState")
    assert rs is not None and rs.kind == STRUCT
    assert rs.child("ReplicaId").value == 7 and rs.child("ReplicaEpoch").value == 99
    assert body.child("ReplicaId") is None  # v0-14 only
    j = node_to_json(body, DecodeContext())
    assert j["replica_state"] == {"replica_id": 7, "replica_epoch": 99}
    assert "cluster_id" not in j  # tagged and absent: not emitted


def test_fetch_response_v12_current_leader_and_diverging_epoch() -> None:
    layout = se.api_layout(1, 12, False)
    topic = se.field(layout.fields, "Responses")
    part_spec = se.field(topic.fields, "Partitions")
    part = se.random_struct(
        part_spec.fields,
        ErrorCode=6,
        AbortedTransactions=None,
        Records=None,
        CurrentLeader={"LeaderId": 3, "LeaderEpoch": 12},
        DivergingEpoch={"Epoch": 4, "EndOffset": 1234},
    )
    value = se.random_struct(
        layout.fields, Responses=[se.random_struct(topic.fields, Partitions=[part])]
    )
    data = se.encode(layout, value)
    body = decode(1, 12, False, data)
    assert codes(body) == []
    j = node_to_json(body, DecodeContext())
    p = j["responses"][0]["partitions"][0]
    assert p["current_leader"] == {"leader_id": 3, "leader_epoch": 12}
    assert p["diverging_epoch"] == {"epoch": 4, "end_offset": 1234}
    assert p["error_code"] == 6 and p["error_code_name"] == "NOT_LEADER_OR_FOLLOWER"
    assert p["aborted_transactions"] is None and p["records"] is None


def _heartbeat_with_tags(tail: bytes) -> bytes:
    value = {"GroupId": "g", "GenerationId": 5, "MemberId": "m", "GroupInstanceId": None}
    data = se.encode_api(12, 4, True, value)
    assert data.endswith(b"\x00")
    return data[:-1] + tail


def test_unknown_tags_are_kept_raw_with_their_number() -> None:
    data = _heartbeat_with_tags(b"\x02" + b"\x05\x03abc" + b"\x63\x00")
    body = decode(12, 4, True, data)
    raw = [c for c in body.children if c.kind == RAW]
    assert [(c.name, c.value, c.offset, c.length) for c in raw] == [
        ("_tag_5", b"abc", len(data) - 5, 3),
        ("_tag_99", b"", len(data), 0),
    ]
    assert [str(d.code) for c in raw for d in c.diagnostics] == ["unknown_tag", "unknown_tag"]
    j = node_to_json(body, DecodeContext())
    assert j["_unknown_tags"] == {"5": {"b64": "YWJj"}, "99": {"b64": ""}}
    assert j["generation_id"] == 5


def test_a_trial_decode_stops_at_the_first_unknown_tag() -> None:
    """Orphan inference and role judging try hundreds of layouts on a frame and keep only the
    clean ones: a wrong layout that reads a large count of tags must not build a node each."""
    tags = b"".join(bytes([t, 0]) for t in range(100, 120))  # 20 unknown tags, empty
    data = _heartbeat_with_tags(bytes([len(tags) // 2]) + tags)
    kept = decode(12, 4, True, data)
    raw = [c.name for c in kept.children if c.kind == RAW]
    assert raw == [f"_tag_{t}" for t in range(100, 120)]
    judged = decode(12, 4, True, data, judging=True)
    assert not [c for c in judged.children if c.kind == RAW]
    assert codes(judged) == [("unknown_tag", len(data) - len(tags))]  # still not clean


def test_tag_section_overrunning_the_body_is_truncated() -> None:
    data = _heartbeat_with_tags(b"\x01\x05\x09abc")
    body = decode(12, 4, True, data)
    assert ("truncated", len(data) - 3) in codes(body)
    assert body.child("MemberId").value == "m"  # siblings kept


def test_truncated_body_keeps_decoded_siblings_and_says_where() -> None:
    layout = se.api_layout(1, 4, True)
    topic = se.field(layout.fields, "Topics")
    value = se.random_struct(layout.fields, Topics=[se.random_struct(topic.fields, Topic="orders")])
    data = se.encode(layout, value)
    cut = len(data) - 5
    body = decode_body(1, 4, True, data, 0, cut, DecodeContext())
    assert body.kind == STRUCT
    assert body.child("MaxWaitMs").value == value["MaxWaitMs"]
    topics = body.child("Topics")
    assert topics.children[0].child("Topic").value == "orders"
    assert [c for c, _ in codes(body)] == ["truncated"]
    assert all(0 <= off <= cut for _, off in codes(body))


def test_array_count_bomb_is_refused_before_allocating() -> None:
    data = struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a"  # Metadata v0: Topics count
    t0 = time.perf_counter()
    body = decode(3, 0, True, data)
    assert time.perf_counter() - t0 < 0.5
    assert codes(body) == [("array_too_large", 0)]
    compact = b"\xff\xff\xff\xff\x0f" + b"\x00" * 8  # Metadata v9: compact count 2^32-2
    assert [c for c, _ in codes(decode(3, 9, True, compact))] == ["array_too_large"]


def test_overlong_varint_and_negative_lengths() -> None:
    assert [c for c, _ in codes(decode(3, 9, True, b"\x80\x80\x80\x80\x80\x01"))] == ["bad_varint"]
    bad_len = struct.pack(">i", 1) + struct.pack(">h", -5)  # Metadata v1: one topic, name length -5
    assert codes(decode(3, 1, True, bad_len)) == [("bad_length", 4)]


def test_null_in_non_nullable_string_is_flagged_not_fatal() -> None:
    data = (
        struct.pack(">h", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"m"
    )  # Heartbeat v0
    body = decode(12, 0, True, data)
    assert body.child("GroupId").value is None
    assert codes(body) == [("bad_length", 0)]
    assert body.child("MemberId").value == "m"


def test_invalid_utf8_is_replaced_and_flagged() -> None:
    data = struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", 1) + struct.pack(">h", 0)
    body = decode(12, 0, True, data)
    assert codes(body) == [("invalid_utf8", 2)]
    assert body.child("GroupId").value == "\ufffd\ufffd"


def test_trailing_bytes_are_reported_and_kept() -> None:
    data = se.encode_api(12, 0, True, {"GroupId": "g", "GenerationId": 1, "MemberId": "m"}) + b"zz"
    body = decode(12, 0, True, data)
    assert codes(body) == [("trailing_bytes", len(data) - 2)]
    assert body.children[-1].name == "_trailing" and body.children[-1].value == b"zz"
    assert body.length == len(data)


def test_version_above_known_range_keeps_body_raw() -> None:
    body = decode(0, 99, True, b"\x01\x02\x03")
    assert body.kind == RAW and body.value == b"\x01\x02\x03" and body.name == "body"
    assert codes(body) == [("unsupported_version", 0)]
    body = decode(999, 0, False, b"\x01")
    assert codes(body) == [("unknown_api", 0)]
    assert codes(decode_message("NoSuchThing", 0, b"", 0, 0, DecodeContext())) == [
        ("unknown_api", 0)
    ]
    assert codes(decode_message("LeaderChangeMessage", 9, b"", 0, 0, DecodeContext())) == [
        ("unsupported_version", 0)
    ]


def test_internal_error_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> int:
        raise RuntimeError("bug")

    monkeypatch.setattr(decoder, "body_reader", lambda *a: broken)
    body = decode(3, 0, True, b"\x00\x00\x00\x00")
    assert body.kind == RAW and codes(body) == [("internal_error", 0)]
    with pytest.raises(RuntimeError):
        decode(3, 0, True, b"\x00\x00\x00\x00", strict=True)


def test_offset_and_end_inside_a_larger_buffer() -> None:
    inner = se.encode_api(12, 0, True, {"GroupId": "g", "GenerationId": 1, "MemberId": "m"})
    buf = memoryview(b"HEADER" + inner + b"NEXTFRAME")
    body = decode_body(12, 0, True, buf, 6, 6 + len(inner), DecodeContext())
    assert codes(body) == []
    assert body.offset == 6 and body.length == len(inner)
    assert body.child("GroupId").offset == 6 and body.child("GroupId").length == 3


def test_plans_are_compiled_once() -> None:
    assert decoder.body_reader(1, 12, True) is decoder.body_reader(1, 12, True)
    assert decoder.body_reader(1, 12, True) is not decoder.body_reader(1, 11, True)


def test_null_arrays_and_nullable_structs() -> None:
    layout = se.api_layout(3, 1, True)  # Metadata v1+: null Topics = all topics
    body = decode(3, 1, True, se.encode(layout, {"Topics": None}))
    topics = body.child("Topics")
    assert topics.kind == ARRAY and topics.children is None
    assert node_to_json(body, DecodeContext()) == {"topics": None}
    layout = se.api_layout(68, 0, False)  # ConsumerGroupHeartbeat response: nullable Assignment
    value = se.random_struct(layout.fields, Assignment=None)
    body = decode(68, 0, False, se.encode(layout, value))
    a = body.child("Assignment")
    assert a.kind == STRUCT and a.children is None and a.length == 1
    assert node_to_json(body, DecodeContext())["assignment"] is None


def test_request_header_client_id_is_never_compact() -> None:
    data = struct.pack(">hhih", 1, 12, 42, 3) + b"cli" + b"\x00"
    hdr = decode_message("RequestHeader", 2, data, 0, len(data), DecodeContext())
    assert codes(hdr) == []
    assert hdr.child("ClientId").value == "cli"
    assert hdr.child("ClientId").kind == PRIM


def test_api_versions_unsupported_version_answer_is_a_v0_body() -> None:
    v0 = se.encode_api(
        18,
        0,
        False,
        {"ErrorCode": 35, "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 2}]},
    )
    for asked in (3, 4, 9):  # flexible versions, and one above the known range
        body = decode(18, asked, False, v0)
        assert codes(body) == [], asked
        j = node_to_json(body, DecodeContext())
        assert j == {
            "error_code": 35,
            "error_code_name": "UNSUPPORTED_VERSION",
            "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}],
        }
    ok = se.encode_api(
        18, 3, False, se.random_struct(se.api_layout(18, 3, False).fields, ErrorCode=0)
    )
    assert codes(decode(18, 3, False, ok)) == []


def test_corrupted_bodies_never_raise() -> None:
    """Bit-flipped samples of every (api, version, direction), strict: no exception escapes
    the walker, the hooks (embedded protocols, SASL, topic learning) or jsonify."""
    import random

    from dissectors import apis

    for key in apis.API_NAMES:
        for is_request, table in ((True, apis.REQUEST_VERSIONS), (False, apis.RESPONSE_VERSIONS)):
            lo, hi = table[key]
            for version in range(lo, hi + 1):
                layout = se.api_layout(key, version, is_request)
                rng = random.Random(f"corrupt/{key}/{version}/{is_request}")
                for _ in range(4):
                    data = bytearray(se.encode(layout, se.random_value(layout, rng)))
                    for _ in range(rng.randint(1, 4)):
                        if data:
                            data[rng.randrange(len(data))] = rng.randrange(256)
                    ctx = DecodeContext(strict=True)
                    body = decode_body(key, version, is_request, bytes(data), 0, len(data), ctx)
                    node_to_json(body, ctx)
                    for n in body.walk():
                        assert n.offset >= 0 and n.offset + n.length <= len(data)


def test_raw_sasl_on_arbitrary_tokens_never_raises() -> None:
    import random

    from dissectors.embedded import decode_raw_sasl

    rng = random.Random(7)
    for _ in range(3000):
        token = bytes(rng.choice(b"nyp=,\x00\x01acr\xc3\xa9") for _ in range(rng.randint(0, 12)))
        node = decode_raw_sasl(token, 0, len(token), DecodeContext(strict=True))
        node_to_json(node, DecodeContext())
        assert all(n.offset >= 0 and n.offset + n.length <= len(token) for n in node.walk())
