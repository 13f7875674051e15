"""Finding the next frame start in bytes that are out of sync (a mid-stream start, after a
gap or an implausible size).

The client side looks for a plausible request header, the broker side for a size followed
by a correlation id a pending request waits for (or a chain of sizes leading to one). Both
first skip, in C, the positions a regular expression rules out, so a search judges only
candidates in Python, not every byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from dissectors import REQUEST_VERSIONS
from kanalyze.headers import INT32, UINT32, VERSION_SLACK, plausible_request

MIN_RESPONSE = 4  # correlation_id


def _request_candidates(top: int) -> re.Pattern[bytes]:
    """Positions that could start a request header: size's first byte <= `top` (max_frame >> 24)
    and size >= MIN_REQUEST, api key and version of a known request, correlation id >= 0 (a
    necessary condition of `plausible_request`). Scanning with it runs in C, so a client-side
    search judges only candidates in Python, not every byte."""
    alts = []
    for api, (lo, hi) in sorted(REQUEST_VERSIONS.items()):
        hi += VERSION_SLACK
        assert 0 <= api < 256 and 0 <= lo <= hi < 256
        alts.append(
            re.escape(bytes([api]))
            + b"\\x00["
            + re.escape(bytes([lo]))
            + b"-"
            + re.escape(bytes([hi]))
            + b"]"
        )
    return re.compile(
        b"(?=[\\x00-" + re.escape(bytes([top])) + b"])(?!\\x00\\x00\\x00[\\x00-\\x07])"
        b"(?=.{4}\\x00(?:" + b"|".join(alts) + b")[\\x00-\\x7f])",
        re.S,
    )


_REQUEST_CANDIDATE: dict[int, re.Pattern[bytes]] = {}


def request_candidates(top: int) -> re.Pattern[bytes]:
    pat = _REQUEST_CANDIDATE.get(top)
    if pat is None:
        pat = _REQUEST_CANDIDATE[top] = _request_candidates(top)
    return pat


_SIZE_CANDIDATE: dict[int, re.Pattern[bytes]] = {}


def size_candidates(top: int) -> re.Pattern[bytes]:
    """Positions whose 4 bytes could be a response size: first byte <= `top` (max_frame >> 24),
    value >= MIN_RESPONSE (a necessary condition of `response_chain`)."""
    pat = _SIZE_CANDIDATE.get(top)
    if pat is None:
        first = re.escape(bytes([top]))
        pat = _SIZE_CANDIDATE[top] = re.compile(
            b"(?=[\\x00-" + first + b"].{3})(?!\\x00\\x00\\x00[\\x00-\\x03])", re.S
        )
    return pat


def find_frame_start(
    buf: bytearray,
    client_side: bool,
    max_frame: int,
    expects: Callable[[int], bool],
    awaited: Collection[int] | None,
    at_start: bool = False,
) -> tuple[int, int]:
    """(where a frame starts, -1 when nowhere yet; the first position not ruled out for good).

    `expects` says whether a correlation id is awaited; `awaited` (optional, broker side) is
    the live collection of awaited ids, which lets the search pass over the bytes after the
    last place one of them occurs. `at_start`: the buffer begins at the direction's first
    captured byte (see `response_chain`)."""
    n = len(buf)
    p = 0
    found = -1
    top = max_frame >> 24
    if client_side:
        # a position up to n - 12 that is no regex candidate is no request (judged in C);
        # the last 11 positions go through the byte loop below, which may wait for more bytes
        p = max(n - 11, 0)
        # the pattern is 9 bytes long: q <= n - 12
        for m in request_candidates(top).finditer(buf, 0, max(n - 3, 0)):
            q = m.start()
            if buf[q] <= top and plausible_request(buf, q, max_frame) != 0:
                p = q
                break
    else:
        limit = last_awaited(buf, awaited)
        sizes = size_candidates(top)
    while p + 4 <= n:
        if buf[p] > top:  # the size's first byte alone rules this position out
            p += 1
            continue
        if client_side:
            v = plausible_request(buf, p, max_frame)
            if v == 1:
                found = p
                break
            if v == -1:
                break  # wait for more bytes before judging this position
        else:
            if p and p < n - 7:
                # below n - 7 only a sure "yes" counts (an undecided chain only at 0): skip
                # the positions after the last awaited id (chains only go forward) and, in
                # C, those whose 4 bytes are no frame size; the tail still loops
                if limit < p:
                    p = n - 7
                    continue
                found_size = sizes.search(buf, p)
                q = found_size.start() if found_size else n
                if q > p:
                    p = min(q, n - 7)
                    continue
            if n - p < 8:
                break
            v = response_chain(buf, p, max_frame, expects, at_start=at_start and p == 0)
            if v == 1:
                found = p
                break
            if v == -1 and p == 0:
                break  # the buffer may start on a frame whose successor has not arrived yet
        p += 1
    return found, p


def last_awaited(buf: bytearray, ids: Collection[int] | None) -> int:
    """The last position whose correlation-id bytes (4 on) hold an awaited id; -1 when
    none does; len(buf) when unknown (no `awaited`, or too many ids to look for)."""
    if ids is None or len(ids) > 32:
        return len(buf)
    last = -1
    for corr in ids:
        at = buf.rfind(corr.to_bytes(4, "big", signed=True), 4)
        if at - 4 > last:
            last = at - 4
    return last


def response_chain(
    buf: bytearray,
    p: int,
    max_frame: int,
    expects: Callable[[int], bool],
    hops: int = 8,
    at_start: bool = False,
) -> int:
    """Whether a response starts at buf[p]: 1 when it, or a frame reached by following
    sizes from it, carries a correlation id a pending request awaits; 0 no; -1 undecided.
    The chain lets a mid-stream start keep the responses before the first awaited one
    (reported as request_missing) instead of skipping them.

    `at_start` (buf[p] is the direction's first captured byte): at the very start of a
    mid-stream capture the first responses answer requests sent before it, so frames that
    chain exactly to the end of what arrived (or 3 in a row) with correlation ids >= 0 are
    accepted as responses (orphans) too."""
    n = len(buf)
    q = p
    for hop in range(hops):
        if at_start and q == n and hop:
            return 1
        if n - q < 8:
            return -1
        size = UINT32.unpack_from(buf, q)[0]
        if size < MIN_RESPONSE or size > max_frame:
            return 0
        corr = INT32.unpack_from(buf, q + 4)[0]
        if expects(corr):
            return 1
        if corr < 0:
            at_start = False
        q += 4 + size
        if at_start and hop >= 2 and q <= n:
            return 1
    return 0
