"""Which side of a connection is the Kafka client, decided from what the bytes say.

A capture that starts mid-stream has no SYN to tell who connected to whom, and brokers listen on
any port (NodePorts, 36333, ports above the ephemeral range), so "the lower port is the broker"
is wrong as often as it is right. The bytes decide instead:

* a direction whose frames chain as plausible request headers (known api key, version in range,
  correlation id >= 0, printable client id; each frame's size leads to the next request) is a
  client;
* a direction whose frames carry correlation ids that the other direction's requests announced
  is the broker (a response can look like a request when its correlation id is small, so this
  test comes first);
* when only one direction has spoken, its first frame must also name a client (non-empty
  client id): a response's body often reads as an empty one.

`judge` returns None when the bytes cannot tell; the engine then falls back to the port.
"""

from __future__ import annotations

from kanalyze.headers import plausible_request
from kanalyze.resync import request_candidates

MAX_CHAIN = 32  # frames followed per direction; enough evidence, bounded work


def request_ids(data: bytes, max_frame: int) -> list[int]:
    """Correlation ids of the plausible requests chained from the first place one starts.

    At offset 0 one plausible header is enough (a capture usually starts on a packet
    boundary). Further in (the capture began inside a frame), the start must be confirmed: a
    second request chained after it, or the frame ending exactly where the data ends."""
    first = _chain(data, 0, max_frame)
    if first:
        return first
    top = max_frame >> 24
    for m in request_candidates(top).finditer(data, 1):
        got = _chain(data, m.start(), max_frame)
        if len(got) >= 2 or (got and _ends_at(data, m.start(), len(got))):
            return got
    return []


def _chain(data: bytes, p: int, max_frame: int) -> list[int]:
    ids: list[int] = []
    n = len(data)
    while p < n and len(ids) < MAX_CHAIN:
        if plausible_request(data, p, max_frame) != 1:
            break
        ids.append(int.from_bytes(data[p + 8 : p + 12], "big", signed=True))
        p += 4 + int.from_bytes(data[p : p + 4], "big")
    return ids


def _ends_at(data: bytes, p: int, frames: int) -> bool:
    for _ in range(frames):
        p += 4 + int.from_bytes(data[p : p + 4], "big")
    return p == len(data)


def answers(data: bytes, announced: set[int], max_frame: int) -> bool:
    """Whether frames chained from offset 0 of `data` carry a correlation id in `announced`."""
    p, n = 0, len(data)
    for _ in range(MAX_CHAIN):
        if n - p < 8:
            return False
        size = int.from_bytes(data[p : p + 4], "big")
        if size < 4 or size > max_frame:
            return False
        if int.from_bytes(data[p + 4 : p + 8], "big", signed=True) in announced:
            return True
        p += 4 + size
    return False


def judge(a: bytes, b: bytes, max_frame: int) -> bool | None:
    """True when direction `a` is the client, False when `b` is, None when the bytes cannot tell.

    `a` and `b` are the first bytes each direction sent (in arrival order; either may be empty)."""
    ra, rb = request_ids(a, max_frame), request_ids(b, max_frame)
    a_answered = bool(ra) and answers(b, set(ra), max_frame)
    b_answered = bool(rb) and answers(a, set(rb), max_frame)
    if a_answered != b_answered:
        return a_answered
    if bool(ra) != bool(rb):
        # one direction alone: a response's body often reads as an empty client id (a 0
        # throttle time), so a lone "request" must name its client to count
        if not (a and b) and not _names_client(a if ra else b, max_frame):
            return None
        return bool(ra)
    return None


def _names_client(data: bytes, max_frame: int) -> bool:
    """Whether a plausible request at the start of `data` carries a non-empty client id."""
    if plausible_request(data, 0, max_frame) != 1 or len(data) < 14:
        return False
    return int.from_bytes(data[12:14], "big", signed=True) > 0
