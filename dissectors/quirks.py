"""Every protocol special case, in one place.

The schemas describe bodies; the few rules the JSON definitions do not carry
(or carry only in Kafka's Java generator) live here so that no other module
hard-codes an API key.
"""

from __future__ import annotations

from dissectors.apis import REQUEST_FLEXIBLE_FROM, RESPONSE_FLEXIBLE_FROM, ApiKey
from dissectors.errors import ErrorCode

# the special cases' APIs (kept under these names: the engine imports them)
API_PRODUCE = ApiKey.PRODUCE  # acks=0 produce requests get no response
API_CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN
API_SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE  # v0: raw SASL frames follow
API_API_VERSIONS = ApiKey.API_VERSIONS
API_SASL_AUTHENTICATE = ApiKey.SASL_AUTHENTICATE
API_ENVELOPE = ApiKey.ENVELOPE  # never nested in an Envelope: we do not decode one that is

# ClientId in the request header is a classic (int16-length) string even in
# header v2: the spec marks the field "flexibleVersions": "none", which the
# generated RequestHeader schema carries (a field-level "flexible" range).

# Group APIs whose member metadata / assignment bytes embed the consumer
# protocol when the protocol type is "consumer".
CONSUMER_PROTOCOL_TYPE = "consumer"


def _flexible(table: dict[int, int | None], api_key: int, api_version: int) -> bool:
    first = table.get(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 0 for ControlledShutdown v0, 2 when the request is flexible,
    else 1."""
    if api_key == API_CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if _flexible(REQUEST_FLEXIBLE_FROM, api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: ApiVersions is always 0 (clients must read it before knowing
    the broker's versions); otherwise 1 when the response is flexible, else 0."""
    if api_key == API_API_VERSIONS:
        return 0
    return 1 if _flexible(RESPONSE_FLEXIBLE_FROM, api_key, api_version) else 0


UNSUPPORTED_VERSION_ERROR = ErrorCode.UNSUPPORTED_VERSION


def response_body_version(api_key: int, api_version: int, buf, offset: int, end: int) -> int:
    """The version a response body is actually encoded in.

    A broker that cannot serve the requested ApiVersions version answers with an
    ApiVersions *v0* body carrying UNSUPPORTED_VERSION (35) and its own version
    ranges, so that the client can retry with a version both understand."""
    if (
        api_key == API_API_VERSIONS
        and api_version > 0
        and end - offset >= 2
        and buf[offset] == 0
        and buf[offset + 1] == UNSUPPORTED_VERSION_ERROR
    ):
        return 0
    return api_version
