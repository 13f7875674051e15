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

When the headers cannot tell (one direction alone, or both or neither reading as requests) and
the engine must decide now, the bodies are asked (`judge(..., final=True)`): a frame that
decodes exactly as a request (header and body, nothing left over, no diagnostic) and fits no
response layout is a client's; one that fits a response layout and does not decode as a
request is a broker's. A broker-only capture whose small correlation ids read as "Produce vN"
request headers is told apart this way.

`judge` returns None when the bytes cannot tell. The engine then holds the connection longer
(its packets are copied, within bounds) and asks `judge_later` on every packet: a direction
whose frames, chained from its first byte, answer the correlation ids the other direction's
requests announced is the broker. Only when that bound is reached does the port decide, so a
long first frame (a large Fetch response, more packets than the first hold) no longer hands the
roles to the port.
"""

from __future__ import annotations

from dissectors.context import DecodeContext
from kanalyze.headers import plausible_request, read_request_header
from kanalyze.inference import LayoutBudget, response_fits
from kanalyze.resync import request_candidates

MAX_CHAIN = 32  # frames followed per direction; enough evidence, bounded work
BODY_FRAMES = 4  # whole frames per direction whose bodies are asked, when the headers cannot tell


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


def _chain(data: bytes | bytearray, p: int, max_frame: int) -> list[int]:
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


def answers(data: bytes | bytearray, announced: set[int], max_frame: int) -> bool:
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


def judge(
    a: bytes,
    b: bytes,
    max_frame: int,
    final: bool = False,
    budget: LayoutBudget | None = None,
) -> bool | None:
    """True when direction `a` is the client, False when `b` is, None when the bytes cannot tell.

    `a` and `b` are the first bytes each direction sent (in arrival order; either may be empty).
    `final`: the roles must be settled now; when the headers cannot tell, the bodies are asked."""
    by_headers = _by_headers(a, b, max_frame, budget)
    if by_headers is not None or not final:
        return by_headers
    return _by_bodies(a, b, max_frame, budget)


def judge_later(a: bytes | bytearray, b: bytes | bytearray, max_frame: int) -> bool | None:
    """The cheap test of a connection held past its first hold, asked on every packet: frames
    chained from offset 0 only (O(frames), no search), so its many bytes cost nothing."""
    ra, rb = _chain(a, 0, max_frame), _chain(b, 0, max_frame)
    a_answered = bool(ra) and answers(b, set(ra), max_frame)
    b_answered = bool(rb) and answers(a, set(rb), max_frame)
    return a_answered if a_answered != b_answered else None


def _by_headers(a: bytes, b: bytes, max_frame: int, budget: LayoutBudget | None) -> bool | None:
    ra, rb = request_ids(a, max_frame), request_ids(b, max_frame)
    a_answered = bool(ra) and answers(b, set(ra), max_frame)
    b_answered = bool(rb) and answers(a, set(rb), max_frame)
    if a_answered != b_answered:
        return a_answered
    if bool(ra) != bool(rb):
        if not (a and b):
            # one direction alone: a response with a small correlation id reads as a request
            # header (api 0, version = the id), its body often as an empty client id (a 0
            # throttle time) or a topic name: the bodies are asked first, and a lone
            # "request" must then name its client to count
            said = _side(a or b, max_frame, budget)
            if said is not None:
                return said if a else not said
            if not _names_client(a if ra else b, max_frame):
                return None
        return bool(ra)
    return None


def _names_client(data: bytes, max_frame: int) -> bool:
    """Whether a plausible request at the start of `data` carries a non-empty client id."""
    if plausible_request(data, 0, max_frame) != 1 or len(data) < 14:
        return False
    return int.from_bytes(data[12:14], "big", signed=True) > 0


def _by_bodies(a: bytes, b: bytes, max_frame: int, budget: LayoutBudget | None) -> bool | None:
    """The roles from what the first whole frames of each direction decode as; None when they
    say nothing or contradict each other."""
    a_says, b_says = _side(a, max_frame, budget), _side(b, max_frame, budget)
    votes = {v for v in (a_says, None if b_says is None else not b_says) if v is not None}
    return votes.pop() if len(votes) == 1 else None


def _side(data: bytes, max_frame: int, budget: LayoutBudget | None) -> bool | None:
    """True when the whole frames chained from offset 0 of `data` are a client's (the first
    that tells decodes exactly as a request and fits no response layout), False when a
    broker's (fits a response layout, does not decode as a request), None when none tells."""
    p, n = 0, len(data)
    for _ in range(BODY_FRAMES):
        if n - p < 4:
            return None
        size = int.from_bytes(data[p : p + 4], "big")
        if size < 4 or size > max_frame or p + 4 + size > n:
            return None
        frame = bytes(data[p + 4 : p + 4 + size])
        fits = response_fits(frame, budget)
        if fits is None:
            return None  # the run's layout budget is spent: the bodies say nothing
        request, response = request_decodes(frame), bool(fits)
        if request != response:
            return request
        p += 4 + size
    return None


def request_decodes(frame: bytes) -> bool:
    """Whether `frame` (without its size) is a request whose header and body decode exactly,
    with no diagnostic."""
    h = read_request_header(frame)
    if h is None or h.diagnostics:
        return False
    ctx = DecodeContext(decode_records=False, judging=True)  # judged, then dropped
    from dissectors import decode_body  # asked rarely: not imported with the engine

    node = decode_body(h.api_key, h.api_version, True, frame, h.body_offset, len(frame), ctx)
    if any(x.diagnostics for x in node.walk()):
        return False
    return node.offset + node.length == len(frame)
