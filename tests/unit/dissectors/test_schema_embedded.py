"""Embedded protocols: consumer protocol, DefaultPrincipalData, SASL, secrets."""

from __future__ import annotations

import json

from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.embedded import decode_raw_sasl
from dissectors.jsonify import node_to_json
from dissectors.node import PRIM, STRUCT, Node
from tests.support import spec_encoder as se

SUB = {
    "Topics": ["orders", "audit"],
    "UserData": None,
    "OwnedPartitions": [{"Topic": "orders", "Partitions": [0, 2]}],
    "GenerationId": 7,
    "RackId": "r1",
}
ASSIGN = {"AssignedPartitions": [{"Topic": "orders", "Partitions": [1]}], "UserData": b"\x01"}


def decode(
    key: int, version: int, is_request: bool, data: bytes, ctx: DecodeContext | None = None
) -> Node:
    return decode_body(
        key, version, is_request, data, 0, len(data), ctx or DecodeContext(strict=True)
    )


def diags(node: Node) -> list:
    return [d for n in node.walk() for d in n.diagnostics]


def _join_group(protocol_type: str, metadata: bytes) -> bytes:
    layout = se.api_layout(11, 6, True)
    proto = {"Name": "range", "Metadata": metadata}
    value = se.random_struct(
        layout.fields, ProtocolType=protocol_type, Protocols=[proto], GroupInstanceId=None
    )
    return se.encode(layout, value)


def test_join_group_consumer_metadata_is_decoded_in_place() -> None:
    meta = se.encode_message("ConsumerProtocolSubscription", 3, SUB)
    data = _join_group("consumer", meta)
    body = decode(11, 6, True, data)
    assert diags(body) == []
    node = body.child("Protocols").children[0].child("Metadata")
    assert node.kind == STRUCT
    # the struct keeps the bytes field's location: compact length prefix + data
    assert node.offset + node.length == data.index(meta) + len(meta)
    assert node.child("Version").offset == data.index(meta)
    j = node_to_json(body, DecodeContext())["protocols"][0]["metadata"]
    assert j == {
        "version": 3,
        "topics": ["orders", "audit"],
        "user_data": None,
        "owned_partitions": [{"topic": "orders", "partitions": [0, 2]}],
        "generation_id": 7,
        "rack_id": "r1",
    }


def test_other_protocol_types_stay_bytes() -> None:
    meta = se.encode_message("ConsumerProtocolSubscription", 0, {"Topics": ["t"], "UserData": None})
    body = decode(11, 6, True, _join_group("connect", meta))
    node = body.child("Protocols").children[0].child("Metadata")
    assert node.kind == PRIM and node.value == meta


def test_newer_subscription_version_stays_bytes_with_a_diagnostic() -> None:
    """Issue 20: a version the schema does not know is not decoded as the newest known one."""
    meta = se.encode_message("ConsumerProtocolSubscription", 3, SUB)
    meta = b"\x00\x05" + meta[2:] + b"\x00\x00\x00\x09"  # v5 from the future, one extra int32
    node = (
        decode(11, 6, True, _join_group("consumer", meta))
        .child("Protocols")
        .children[0]
        .child("Metadata")
    )
    assert node.kind == PRIM and node.value == meta
    assert [(str(d.code), d.message) for d in diags(node)] == [
        (
            "unsupported_version",
            "ConsumerProtocolSubscription version 5 is not one the schema knows: kept as bytes",
        )
    ]


def test_short_embedded_structures_are_never_half_decoded() -> None:
    """Issue 20: bytes that run short keep their raw bytes beside a diagnostic."""
    meta = se.encode_message("ConsumerProtocolSubscription", 3, SUB)[:-5]  # cut inside RackId
    node = (
        decode(11, 6, True, _join_group("consumer", meta))
        .child("Protocols")
        .children[0]
        .child("Metadata")
    )
    assert node.kind == PRIM and node.value == meta
    (d,) = diags(node)
    assert str(d.code) == "truncated" and d.message.startswith(
        "ConsumerProtocolSubscription v3 does not decode"
    )
    one = (
        decode(11, 6, True, _join_group("consumer", b"\x00"))
        .child("Protocols")
        .children[0]
        .child("Metadata")
    )
    assert one.kind == PRIM and [str(d.code) for d in diags(one)] == ["truncated"]


def test_envelope_principal_of_two_random_bytes_is_not_a_principal() -> None:
    """The audit's case: two random bytes used to show as {"version": 7256}."""
    inner = b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x02id" + b"\xff\xff\xff\xff"
    value = {
        "RequestData": inner,
        "RequestPrincipal": b"\x1c\x58",
        "ClientHostAddress": b"\x7f\x00\x00\x01",
    }
    body = decode(58, 0, True, se.encode_api(58, 0, True, value))
    j = node_to_json(body, DecodeContext())
    assert j["request_principal"] == {"b64": "HFg="}
    assert [str(d.code) for d in diags(body)] == ["unsupported_version"]
    assert j["request_data"]["header"]["correlation_id"] == 7  # the rest decodes as before


def test_sync_group_response_without_protocol_type_decodes_only_clean_assignments() -> None:
    good = se.encode_message("ConsumerProtocolAssignment", 1, ASSIGN)
    body = decode(
        14,
        3,
        False,
        se.encode_api(14, 3, False, {"ThrottleTimeMs": 0, "ErrorCode": 0, "Assignment": good}),
    )
    j = node_to_json(body, DecodeContext())
    assert j["assignment"] == {
        "version": 1,
        "assigned_partitions": [{"topic": "orders", "partitions": [1]}],
        "user_data": {"b64": "AQ=="},
    }
    junk = b"\x00\x01garbage!!"
    body = decode(
        14,
        3,
        False,
        se.encode_api(14, 3, False, {"ThrottleTimeMs": 0, "ErrorCode": 0, "Assignment": junk}),
    )
    assert body.child("Assignment").value == junk and diags(body) == []


def test_describe_groups_members_decoded_for_consumer_groups() -> None:
    layout = se.api_layout(15, 5, False)
    group_spec = se.field(layout.fields, "Groups")
    member_spec = se.field(group_spec.fields, "Members")
    member = se.random_struct(
        member_spec.fields,
        GroupInstanceId=None,
        MemberMetadata=se.encode_message(
            "ConsumerProtocolSubscription", 1, {**SUB, "GenerationId": 0, "RackId": None}
        ),
        MemberAssignment=se.encode_message("ConsumerProtocolAssignment", 0, ASSIGN),
    )
    group = se.random_struct(group_spec.fields, ProtocolType="consumer", Members=[member])
    body = decode(15, 5, False, se.encode(layout, {"ThrottleTimeMs": 0, "Groups": [group]}))
    m = node_to_json(body, DecodeContext())["groups"][0]["members"][0]
    assert m["member_metadata"]["topics"] == ["orders", "audit"]
    assert "generation_id" not in m["member_metadata"]  # v1 has no generation id
    assert m["member_assignment"]["assigned_partitions"][0]["partitions"] == [1]


def test_envelope_principal_and_inner_request() -> None:
    principal = se.encode_message(
        "DefaultPrincipalData", 0, {"Type": "User", "Name": "alice", "TokenAuthenticated": False}
    )
    inner_header = b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x02id"  # Metadata v1, corr 7, client "id"
    inner = inner_header + b"\xff\xff\xff\xff"  # null topics
    value = {
        "RequestData": inner,
        "RequestPrincipal": principal,
        "ClientHostAddress": b"\x7f\x00\x00\x01",
    }
    body = decode(58, 0, True, se.encode_api(58, 0, True, value))
    j = node_to_json(body, DecodeContext())
    assert j["request_principal"] == {
        "version": 0,
        "type": "User",
        "name": "alice",
        "token_authenticated": False,
    }
    assert j["request_data"]["header"]["correlation_id"] == 7
    assert j["request_data"]["body"] == {"topics": None}


# ------------------------------------------------------------------ SASL and secrets


def _auth_request(token: bytes, version: int = 1) -> Node:
    return decode(36, version, True, se.encode_api(36, version, True, {"AuthBytes": token}))


def test_sasl_plain_password_is_redacted() -> None:
    body = _auth_request(b"\x00alice\x00s3cret-pw")
    shown = node_to_json(body, DecodeContext())
    assert shown["auth_bytes"] == {
        "mechanism": "PLAIN",
        "authorization_id": "",
        "username": "alice",
        "password": "<redacted 9 bytes>",
    }
    assert "s3cret" not in json.dumps(shown)
    revealed = node_to_json(body, DecodeContext(show_secrets=True))
    assert revealed["auth_bytes"]["password"] == "s3cret-pw"
    pw = body.child("AuthBytes").child("Password")
    assert pw.length == 9 and pw.offset == 4 + 1 + 5 + 1  # int32 length prefix + "\0alice\0"


def test_scram_client_proof_and_server_signature_are_redacted() -> None:
    first = node_to_json(_auth_request(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"), DecodeContext())
    assert first["auth_bytes"]["mechanism"] == "SCRAM"
    assert first["auth_bytes"]["username"] == "alice"
    final = _auth_request(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    j = node_to_json(final, DecodeContext())
    assert j["auth_bytes"]["client_proof"] == "<redacted 28 bytes>"
    assert "v0X8v3Bz2T0CJGbJQyF0X" not in json.dumps(j)
    assert j["auth_bytes"]["channel_binding"] == "biws"
    resp = se.encode_api(
        36,
        1,
        False,
        {
            "ErrorCode": 0,
            "ErrorMessage": None,
            "AuthBytes": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
            "SessionLifetimeMs": 0,
        },
    )
    j = node_to_json(decode(36, 1, False, resp), DecodeContext())
    assert j["auth_bytes"]["server_signature"] == "<redacted 28 bytes>"
    assert j["error_code_name"] == "NONE"


def test_unrecognized_auth_bytes_are_secret_as_a_whole() -> None:
    j = node_to_json(_auth_request(b"\x60\x82\x01\x00binary-gssapi"), DecodeContext())
    assert j["auth_bytes"] == "<redacted 17 bytes>"


def test_oauthbearer_token_is_redacted() -> None:
    j = node_to_json(
        _auth_request(b"n,,\x01auth=Bearer eyJhbGciOi.secret\x01\x01"), DecodeContext()
    )
    assert j["auth_bytes"]["mechanism"] == "OAUTHBEARER"
    assert j["auth_bytes"]["auth"].startswith("<redacted")


def test_a_damaged_gs2_header_is_secret() -> None:
    """A flipped separator leaves the token in the GS2 header (mutation seed 55, case 2837):
    only a header of the GS2 form is shown; SCRAM's and OAUTHBEARER's usual ones stay."""
    for raw in (b"n,,\x11auth=Beaper eyJhbGciOi.secret\x01\x01",
                b"n,,\x11aut_=Bearer eyJhbGciOi.secret\x01\x01"):
        j = node_to_json(_auth_request(raw), DecodeContext())
        assert "secret" not in repr(j), j
        assert j["auth_bytes"]["gs2_header"].startswith("<redacted")
    for raw, head in ((b"n,,\x01auth=Bearer x\x01\x01", "n,,"),
                      (b"n,a=alice,\x01auth=Bearer x\x01\x01", "n,a=alice,"),
                      (b"n,,n=user,r=nonce", "n,"), (b"y,a=bob,n=bob,r=abc", "y,a=bob")):
        assert node_to_json(_auth_request(raw), DecodeContext())["auth_bytes"]["gs2_header"] == head


def test_raw_sasl_frames_from_v0_handshake_clients() -> None:
    frame = b"xxxx\x00bob\x00hunter2"
    node = decode_raw_sasl(frame, 4, len(frame), DecodeContext())
    j = node_to_json(node, DecodeContext())
    assert j == {
        "auth_bytes": {
            "mechanism": "PLAIN",
            "authorization_id": "",
            "username": "bob",
            "password": "<redacted 7 bytes>",
        }
    }
    assert node.offset == 4 and node.length == len(frame) - 4


def test_sasl_handshake_decodes() -> None:
    body = decode(17, 1, True, se.encode_api(17, 1, True, {"Mechanism": "SCRAM-SHA-512"}))
    assert node_to_json(body, DecodeContext()) == {"mechanism": "SCRAM-SHA-512"}


def test_delegation_token_hmacs_are_redacted() -> None:
    layout = se.api_layout(38, 2, False)
    value = se.random_struct(layout.fields, Hmac=b"\x01\x02\x03\x04", TokenId="tok-1")
    body = decode(38, 2, False, se.encode(layout, value))
    j = node_to_json(body, DecodeContext())
    assert j["hmac"] == "<redacted 4 bytes>" and j["token_id"] == "tok-1"
    assert node_to_json(body, DecodeContext(show_secrets=True))["hmac"] == {"b64": "AQIDBA=="}
    for key, version, req in ((39, 2, True), (40, 2, True)):  # Renew / Expire requests
        layout = se.api_layout(key, version, req)
        body = decode(
            key, version, req, se.encode(layout, se.random_struct(layout.fields, Hmac=b"\xaa"))
        )
        assert node_to_json(body, DecodeContext())["hmac"] == "<redacted 1 bytes>"


def test_nested_envelopes_are_not_unwrapped() -> None:
    inner = b"\x00\x3a\x00\x00\x00\x00\x00\x01\x00\x00" + b"\x00" * 8  # an Envelope request header
    value = {"RequestData": inner, "RequestPrincipal": None, "ClientHostAddress": b""}
    body = decode(58, 0, True, se.encode_api(58, 0, True, value))
    assert body.child("RequestData").value == inner


def test_empty_auth_bytes_stay_empty() -> None:
    j = node_to_json(_auth_request(b""), DecodeContext())
    assert j == {"auth_bytes": {"b64": ""}}
