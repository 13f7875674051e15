"""Kafka request and response headers: the one parser, and the quick plausibility check.

`read_request_header` and `read_response_header` parse a frame's header into a record (the
correlator, and whoever rebuilds an exchange from its frames, use them);
`plausible_request` judges whether a request starts at a position of a byte stream that may
end too early to say (the framer's search and the engine's Kafka detection). Both read the
same layout: int16 api key, int16 api version, int32 correlation id, then from header v1 a
nullable int16-length client id (never compact), then from v2 tagged fields. Header versions
follow `dissectors.quirks`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from dissectors import (
    API_NAMES,
    REQUEST_VERSIONS,
    Code,
    DecodeError,
    Diagnostic,
    read_uvarint,
    request_header_version,
    response_header_version,
)

MIN_REQUEST = 8  # api_key + api_version + correlation_id (+ client id in v1+)
VERSION_SLACK = 0  # versions accepted above the newest known, when searching
REQUEST_FIXED = struct.Struct(">hhi")  # api key, api version, correlation id
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
# Records built once per frame are NamedTuples (immutable, no __dict__), made with `_new`:
# tuple.__new__ is C, while a NamedTuple's own __new__ is a Python function (2x the cost)
_new = tuple.__new__
# header versions by api key and version (`_header_version`): the quirks' rules cost two
# Python calls a message; bounded, as versions come off the wire
_REQUEST_HV: dict[int, int] = {}
_RESPONSE_HV: dict[int, int] = {}
HV_CACHED = 4096


class RequestHeader(NamedTuple):
    """A parsed request header. `fields` is the header as the outputs show it (wire names, in
    wire order: request_api_key, request_api_version, correlation_id, client_id from v1,
    tagged_fields when any); `body_offset` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None  # None: null, or absent (header v0), or unreadable
    fields: dict[str, object]
    body_offset: int
    diagnostics: tuple[Diagnostic, ...] = ()


class ResponseHeader(NamedTuple):
    """A parsed response header (`correlation_id` None when the frame is shorter than one)."""

    correlation_id: int | None
    fields: dict[str, object]
    body_offset: int
    diagnostics: tuple[Diagnostic, ...] = ()


# A damaged length (of the frame, or of the client_id itself) can make a client_id run on over
# the frames after it, SASL tokens among them (a password, a bearer token: found by the
# mutation campaign, with the api key damaged too). A client id never holds control bytes; the
# frames' length fields and a PLAIN or OAUTHBEARER token do: such a client_id is withheld.
def _has_control(text: str) -> bool:
    return any(c < " " for c in text)


def _skip_tagged(buf: bytes, pos: int, header: dict[str, object]) -> int:
    """Skip a tagged-field section, keeping the raw fields in header['tagged_fields'];
    -1 if malformed."""
    end = len(buf)
    if pos < end and buf[pos] == 0:
        return pos + 1  # no tagged fields: nearly every header
    tags: dict[str, str] = {}
    try:
        count, pos = read_uvarint(buf, pos, end)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos, end)
            size, pos = read_uvarint(buf, pos, end)
            if pos + size > end:
                return -1
            tags[str(tag)] = buf[pos : pos + size].hex()
            pos += size
    except DecodeError:
        return -1
    if tags:
        header["tagged_fields"] = tags
    return pos


def read_request_header(data: bytes) -> RequestHeader | None:
    """The header of a request frame, or None if it is not a request (unknown api key or
    shorter than the fixed part). The one request-header parser of kanalyze."""
    if len(data) < 8:
        return None
    api, ver, corr = REQUEST_FIXED.unpack_from(data, 0)
    if api not in API_NAMES:
        return None
    header: dict[str, object] = {
        "request_api_key": api,
        "request_api_version": ver,
        "correlation_id": corr,
    }
    hv = _request_hv(api, ver)
    pos = 8
    client_id: str | None = None
    if hv >= 1:
        if len(data) < 10:
            header["client_id"] = None
            return RequestHeader(
                api,
                ver,
                corr,
                None,
                header,
                len(data),
                (Diagnostic(Code.TRUNCATED, 8, "request header ends before client_id"),),
            )
        clen = INT16.unpack_from(data, 8)[0]
        pos = 10
        if clen >= 0:
            if pos + clen > len(data):
                header["client_id"] = None
                return RequestHeader(
                    api,
                    ver,
                    corr,
                    None,
                    header,
                    len(data),
                    (
                        Diagnostic(
                            Code.TRUNCATED, 8, f"client_id of {clen} bytes runs past the frame"
                        ),
                    ),
                )
            client_id = header["client_id"] = data[pos : pos + clen].decode("utf-8", "replace")
            if _has_control(client_id):
                client_id = header["client_id"] = f"<redacted {clen} bytes>"
            pos += clen
        elif clen == -1:
            header["client_id"] = None
        else:
            header["client_id"] = None
            return RequestHeader(
                api,
                ver,
                corr,
                None,
                header,
                len(data),
                (Diagnostic(Code.BAD_LENGTH, 8, f"client_id length {clen}"),),
            )
    if hv >= 2:
        end = _skip_tagged(data, pos, header)
        if end < 0:
            return RequestHeader(
                api,
                ver,
                corr,
                client_id,
                header,
                len(data),
                (Diagnostic(Code.BAD_HEADER, pos, "malformed tagged fields in request header"),),
            )
        pos = end
    rng = REQUEST_VERSIONS.get(api)
    if rng and not rng[0] <= ver <= rng[1]:
        return RequestHeader(
            api,
            ver,
            corr,
            client_id,
            header,
            pos,
            (
                Diagnostic(
                    Code.UNSUPPORTED_VERSION,
                    2,
                    f"{API_NAMES[api]} v{ver} is outside the known versions {rng[0]}-{rng[1]}",
                ),
            ),
        )
    return _new(RequestHeader, (api, ver, corr, client_id, header, pos, ()))


def read_response_header(data: bytes, api: int | None, ver: int | None) -> ResponseHeader:
    """The header of a response frame to a request of `api` v`ver`; with `api` None (the
    request was not captured) only the correlation id is read."""
    if len(data) < 4:
        return ResponseHeader(
            None,
            {},
            len(data),
            (Diagnostic(Code.TRUNCATED, 0, "response shorter than a correlation id"),),
        )
    corr = INT32.unpack_from(data, 0)[0]
    header: dict[str, object] = {"correlation_id": corr}
    pos = 4
    if api is not None and ver is not None and _response_hv(api, ver) >= 1:
        end = _skip_tagged(data, pos, header)
        if end < 0:
            return ResponseHeader(
                corr,
                header,
                len(data),
                (Diagnostic(Code.BAD_HEADER, pos, "malformed tagged fields in response header"),),
            )
        pos = end
    return _new(ResponseHeader, (corr, header, pos, ()))


def plausible_request(
    buf: bytes | bytearray | memoryview, p: int, max_frame: int = 0x7FFFFFFF
) -> int:
    """Whether a request header starts at buf[p]: 1 yes, 0 no, -1 not enough bytes to say."""
    n = len(buf)
    if n - p < 12:
        return -1
    size = UINT32.unpack_from(buf, p)[0]
    if size < MIN_REQUEST or size > max_frame:
        return 0
    api, ver, corr = REQUEST_FIXED.unpack_from(buf, p + 4)
    rng = REQUEST_VERSIONS.get(api)
    if rng is None or ver < rng[0] or ver > rng[1] + VERSION_SLACK:
        return 0
    if corr < 0:
        return 0
    if _request_hv(api, ver) == 0:
        return 1
    if n - p < 14:
        return -1
    clen = INT16.unpack_from(buf, p + 12)[0]
    if clen == -1:
        return 1
    if clen < 0 or 10 + clen > size:
        return 0
    cid = buf[p + 14 : p + 14 + clen]
    if len(cid) < clen:
        return -1
    if any(b < 0x20 or b > 0x7E for b in cid):
        return 0
    return 1


def _request_hv(api: int, ver: int) -> int:
    """`request_header_version`, remembered."""
    return _remembered(_REQUEST_HV, request_header_version, api, ver)


def _response_hv(api: int, ver: int) -> int:
    """`response_header_version`, remembered."""
    return _remembered(_RESPONSE_HV, response_header_version, api, ver)


def _remembered(
    cache: dict[int, int], rule: Callable[[int, int], int], api: int, ver: int
) -> int:
    """`rule(api, ver)` through `cache` (the key is unique for int16 pairs)."""
    key = api * 65536 + ver
    hv = cache.get(key)
    if hv is None:
        hv = rule(api, ver)
        if len(cache) < HV_CACHED:
            cache[key] = hv
    return hv
