"""Request and response headers: the one parser and the stream plausibility check agree."""

from __future__ import annotations

import struct

from dissectors import ApiKey, Code
from kanalyze.headers import plausible_request, read_request_header, read_response_header
from tests.support.packets import request_frame, response_frame


def test_request_header_v2_with_tagged_fields() -> None:
    frame = request_frame(ApiKey.METADATA, 12, 7, "cli", flexible=True)
    frame = frame[:-1] + b"\x01\x05\x02ab"  # one tagged field: tag 5, 2 bytes
    frame = struct.pack("!i", len(frame) - 4) + frame[4:]
    h = read_request_header(frame[4:])
    assert h is not None
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 7, "cli")
    assert h.fields == {
        "request_api_key": 3,
        "request_api_version": 12,
        "correlation_id": 7,
        "client_id": "cli",
        "tagged_fields": {"5": "6162"},
    }
    assert h.body_offset == len(frame) - 4 and h.diagnostics == ()
    assert plausible_request(frame, 0) == 1


def test_request_header_damage_is_a_diagnostic() -> None:
    h = read_request_header(request_frame(ApiKey.FETCH, 11, 1, "x" * 20)[4:14])
    assert h is not None and h.client_id is None and h.fields["client_id"] is None
    assert [d.code for d in h.diagnostics] == [Code.TRUNCATED]
    assert read_request_header(struct.pack("!hhi", 999, 0, 1)) is None  # unknown api key
    v0 = read_request_header(struct.pack("!hhi", ApiKey.CONTROLLED_SHUTDOWN, 0, 1) + b"body")
    assert v0 is not None and v0.client_id is None and "client_id" not in v0.fields
    assert v0.body_offset == 8  # header v0 has no client id


def test_a_client_id_run_over_sasl_tokens_is_withheld() -> None:
    """A damaged length made a SaslHandshake's client_id run on over the SASL tokens after it
    (mutation campaign seed 29 case 2761 printed a bearer token and a PLAIN password): a
    client_id with control bytes is withheld; without them it is shown as sent."""
    swallowed = "c\x00\x01PLAIN n,,\x01auth=Bearer eyJ.S3cr3t\x01\x01 \x00alice\x00S3cr3t"
    for api in (ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE):
        h = read_request_header(request_frame(api, 1, 5, swallowed)[4:])
        assert h is not None and h.diagnostics == ()
        n = len(swallowed.encode())
        assert h.client_id == h.fields["client_id"] == f"<redacted {n} bytes>"
        assert h.body_offset == 10 + n  # the body is still where the length says
        plain = read_request_header(request_frame(api, 1, 5, "app-1")[4:])
        assert plain is not None and plain.client_id == "app-1"
    # the api key may be damaged too (seeds 31 and 33: a DescribeConfigs v97, a
    # DescribeDelegationToken): any request's client_id with control bytes is withheld
    other = read_request_header(request_frame(ApiKey.METADATA, 1, 5, swallowed)[4:])
    assert other is not None and other.client_id == f"<redacted {len(swallowed)} bytes>"
    odd = read_request_header(request_frame(ApiKey.METADATA, 1, 5, "odd id ~{}|\\")[4:])
    assert odd is not None and odd.client_id == "odd id ~{}|\\"  # printable: shown


def test_plausible_request_waits_for_bytes() -> None:
    frame = request_frame(ApiKey.API_VERSIONS, 3, 1, "client", flexible=True)
    assert plausible_request(frame[:11], 0) == -1  # not even the fixed part
    assert plausible_request(frame[:16], 0) == -1  # the client id is cut
    assert plausible_request(frame, 0) == 1
    assert plausible_request(b"\0\0\0\x20" + struct.pack("!hhi", 18, 3, -1) + b"\0\0", 0) == 0


def test_response_header_follows_the_request() -> None:
    flex = response_frame(9, b"\0\0", flexible=True)[4:]
    assert read_response_header(flex, ApiKey.METADATA, 12)[1:3] == ({"correlation_id": 9}, 5)
    assert read_response_header(flex, ApiKey.API_VERSIONS, 3).body_offset == 4  # always v0
    orphan = read_response_header(b"\0\1", None, None)
    assert orphan.correlation_id is None and orphan.diagnostics[0].code == Code.TRUNCATED
