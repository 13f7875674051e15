"""Cut one direction's byte stream into Kafka frames (4-byte big-endian size + payload).

A framer is either in sync (the next bytes are a size prefix) or searching:
at a mid-stream start, after a gap that did not fall inside a known frame, or
after an absurd size. Searching looks for a plausible request header (client
side) or for a response whose correlation id a pending request is waiting for
(broker side); every byte passed over is counted as skipped.
Accounting per direction: bytes delivered = bytes in frames + bytes skipped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from dissectors.apis import REQUEST_VERSIONS
from dissectors.quirks import request_header_version

SEARCH_WINDOW = 1024 * 1024  # bytes searched before older unsynced bytes are dropped
KEEP_TAIL = 64  # bytes kept from a fruitless search (a header may straddle chunks)
MIN_REQUEST = 8  # api_key + api_version + correlation_id (+ client id in v1+)
MIN_RESPONSE = 4  # correlation_id
VERSION_SLACK = 0  # versions accepted above the newest known, when searching
MAX_EVENTS = 1000  # stream events kept per direction (the rest are counted)


def _request_candidates(top: int) -> re.Pattern[bytes]:
    """Positions that could start a request header: size's first byte <= `top` (max_frame >> 24)
    and size >= MIN_REQUEST, api key and version of a known request, correlation id >= 0 (a
    necessary condition of `plausible_request`). Scanning with it runs in C, so a client-side
    search judges only candidates in Python, not every byte."""
    alts = []
    for api, (lo, hi) in sorted(REQUEST_VERSIONS.items()):
        hi += VERSION_SLACK
        assert 0 <= api < 256 and 0 <= lo <= hi < 256
        alts.append(re.escape(bytes([api])) + b"\\x00[" + re.escape(bytes([lo])) + b"-" + re.escape(bytes([hi])) + b"]")
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
    value >= MIN_RESPONSE (a necessary condition of `_response_chain`)."""
    pat = _SIZE_CANDIDATE.get(top)
    if pat is None:
        first = re.escape(bytes([top]))
        pat = _SIZE_CANDIDATE[top] = re.compile(b"(?=[\\x00-" + first + b"].{3})(?!\\x00\\x00\\x00[\\x00-\\x03])", re.S)
    return pat


@dataclass(slots=True)
class Pdu:
    """One Kafka frame. `data` excludes the size prefix; `missing` > 0 when a gap cut it short."""

    data: bytes
    size: int  # the size prefix's value
    offset: int  # stream offset of the size prefix
    first_pkt: int
    first_ts: int
    last_pkt: int
    last_ts: int
    missing: int = 0


def plausible_request(buf: bytes | bytearray, p: int, max_frame: int = 0x7FFFFFFF) -> int:
    """Whether a request header starts at buf[p]: 1 yes, 0 no, -1 not enough bytes to say."""
    n = len(buf)
    if n - p < 12:
        return -1
    size = int.from_bytes(buf[p : p + 4], "big")
    if size < MIN_REQUEST or size > max_frame:
        return 0
    api = int.from_bytes(buf[p + 4 : p + 6], "big", signed=True)
    ver = int.from_bytes(buf[p + 6 : p + 8], "big", signed=True)
    rng = REQUEST_VERSIONS.get(api)
    if rng is None or ver < rng[0] or ver > rng[1] + VERSION_SLACK:
        return 0
    if int.from_bytes(buf[p + 8 : p + 12], "big", signed=True) < 0:
        return 0
    if request_header_version(api, ver) == 0:
        return 1
    if n - p < 14:
        return -1
    clen = int.from_bytes(buf[p + 12 : p + 14], "big", signed=True)
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


class Framer:
    """Push-style framer for one direction; a `StreamSink` for the reassembler."""

    __slots__ = (
        "client_side",
        "on_pdu",
        "expects",
        "awaited",
        "max_frame",
        "synced",
        "buf",
        "buf_offset",
        "marks",
        "stream_offset",
        "skip",
        "pdu_bytes",
        "skipped",
        "frames",
        "resyncs",
        "last_pkt",
        "last_ts",
        "events",
        "events_dropped",
        "event_counts",
        "cut",
    )

    def __init__(
        self,
        client_side: bool,
        on_pdu: Callable[[Pdu], None],
        expects: Callable[[int], bool],
        max_frame: int,
        synced: bool,
        awaited: Collection[int] | None = None,
    ) -> None:
        self.client_side = client_side
        self.on_pdu = on_pdu
        self.expects = expects  # broker side: is a response with this correlation id awaited?
        # broker side, optional: the awaited correlation ids themselves (a live view), which
        # lets a search pass over the bytes after the last place one of them occurs
        self.awaited = awaited
        self.max_frame = max_frame
        self.synced = synced
        self.buf = bytearray()
        self.buf_offset = 0  # stream offset of buf[0]
        self.marks: list[tuple[int, int, int]] = []  # (stream offset, pkt, ts) where buffered chunks begin
        self.stream_offset = 0  # stream offset just past the last byte received
        self.skip = 0  # bytes still to drop: the rest of a frame broken by a gap
        self.pdu_bytes = 0
        self.skipped = 0
        self.frames = 0
        self.resyncs = 0
        self.last_pkt = 0
        self.last_ts = 0
        self.events: list[tuple[str, int, int, str]] = []  # (code, stream offset, pkt, message)
        self.events_dropped = 0
        self.event_counts: dict[str, int] = {}  # every event by code, kept or dropped
        # a frame broken by a gap, held until its tail has been skipped: it is then dated by the
        # packet carrying its last byte, as an unbroken frame is
        self.cut: Pdu | None = None

    # -- StreamSink -------------------------------------------------------------------------
    def data(self, chunk: bytes, pkt_no: int, ts_ns: int) -> None:
        self.last_pkt, self.last_ts = pkt_no, ts_ns
        start = self.stream_offset
        self.stream_offset += len(chunk)
        if self.skip:
            k = min(self.skip, len(chunk))
            self.skip -= k
            self.skipped += k
            if not self.skip:
                self._release_cut(pkt_no, ts_ns)
            if k == len(chunk):
                return
            chunk = chunk[k:]
            start += k
            self.buf_offset = start
        if not self.buf and self.synced:
            pos = self._frames_in(chunk, pkt_no, ts_ns, start)
            if pos == len(chunk):
                return
            self.buf_offset = start + pos
            self.buf += memoryview(chunk)[pos:]
            self.marks.append((start + pos, pkt_no, ts_ns))
        else:
            if not self.buf:
                self.buf_offset = start
            self.buf += chunk
            self.marks.append((start, pkt_no, ts_ns))
        self._process()

    def gap(self, nbytes: int, pkt_no: int, ts_ns: int, why: str = "") -> None:
        gap_start = self.stream_offset
        self.stream_offset += nbytes
        self.last_pkt, self.last_ts = pkt_no, ts_ns
        if why == "snaplen":  # bytes not captured (snaplen): counted, not listed one by one
            code, why = "snaplen", ""
        else:
            code = "buffer_limit" if why else "gap"
            why = f"{nbytes} bytes given up ({why})" if why else f"{nbytes} bytes lost in a capture gap"
        if self.skip:
            used = min(self.skip, nbytes)
            self.skip -= used
            if self.skip:
                return
            self._release_cut(None, 0)
            self._note(code, gap_start, pkt_no, why)
            self._lose_sync()
            return
        self._note(code, gap_start, pkt_no, why)
        if self.synced and len(self.buf) >= 4:
            size = int.from_bytes(self.buf[:4], "big")
            frame_end = self.buf_offset + 4 + size
            if size <= self.max_frame and frame_end >= gap_start + nbytes:
                # the gap lies inside a frame whose size is known: keep its head, skip its tail
                have = bytes(self.buf[4:])
                fp, fts = self.marks[0][1], self.marks[0][2]
                self.pdu_bytes += len(self.buf)
                self.frames += 1
                missing = frame_end - gap_start
                self.skip = frame_end - (gap_start + nbytes)
                # dated by the last packet that carried bytes of it, until its tail shows up
                lp, lts = self.marks[-1][1], self.marks[-1][2]
                pdu = Pdu(have, size, self.buf_offset, fp, fts, lp, lts, missing)
                self.buf.clear()
                self.marks.clear()
                if self.skip:
                    self.cut = pdu
                else:
                    self.on_pdu(pdu)
                return
        self.skipped += len(self.buf)
        self.buf.clear()
        self.marks.clear()
        self._lose_sync()

    # -- internals --------------------------------------------------------------------------
    def _release_cut(self, pkt_no: int | None, ts_ns: int) -> None:
        """The tail of a frame broken by a gap is over: emit it, dated by `pkt_no` (the packet
        that carried its last byte) when given."""
        pdu, self.cut = self.cut, None
        if pdu is not None:
            if pkt_no is not None:
                pdu = dataclasses.replace(pdu, last_pkt=pkt_no, last_ts=ts_ns)
            self.on_pdu(pdu)

    def _note(self, code: str, offset: int, pkt: int, message: str) -> None:
        self.event_counts[code] = self.event_counts.get(code, 0) + 1
        if not message:
            return  # counted only (snaplen cuts: one per packet, summarized once)
        if len(self.events) < MAX_EVENTS:
            self.events.append((code, offset, pkt, message))
        else:
            self.events_dropped += 1

    def _lose_sync(self) -> None:
        self.synced = False

    def _frames_in(self, chunk: bytes, pkt_no: int, ts_ns: int, start: int) -> int:
        """Emit every complete frame in a chunk that starts on a frame boundary; return where the rest begins."""
        n = len(chunk)
        pos = 0
        mf = self.max_frame
        on_pdu = self.on_pdu
        while pos + 4 <= n:
            size = int.from_bytes(chunk[pos : pos + 4], "big")
            end = pos + 4 + size
            if size > mf or size < MIN_RESPONSE:
                return pos  # let _process report it and resync
            if end > n:
                return pos
            self.pdu_bytes += 4 + size
            self.frames += 1
            on_pdu(Pdu(bytes(chunk[pos + 4 : end]), size, start + pos, pkt_no, ts_ns, pkt_no, ts_ns))
            pos = end
        return pos

    def _first_mark(self, offset: int) -> tuple[int, int]:
        """(pkt, ts) of the chunk holding stream offset `offset`; drops marks before it."""
        marks = self.marks
        i = 0
        while i + 1 < len(marks) and marks[i + 1][0] <= offset:
            i += 1
        if i:
            del marks[:i]
        return marks[0][1], marks[0][2]

    def _mark_holding(self, offset: int) -> tuple[int, int]:
        """(pkt, ts) of the chunk holding stream offset `offset` (usually the newest chunk;
        older when a search held bytes back before the frame was recognised)."""
        marks = self.marks
        for i in range(len(marks) - 1, -1, -1):
            if marks[i][0] <= offset:
                return marks[i][1], marks[i][2]
        return self.last_pkt, self.last_ts

    def _consume(self, k: int) -> None:
        del self.buf[:k]
        self.buf_offset += k
        if not self.buf:
            self.marks.clear()

    def _process(self) -> None:
        buf = self.buf
        while buf:
            if not self.synced and not self._search():
                return
            if len(buf) < 4:
                return
            size = int.from_bytes(buf[:4], "big")
            if size > self.max_frame or size < MIN_RESPONSE:
                self._note(
                    "frame_too_large" if size > self.max_frame else "bad_length",
                    self.buf_offset,
                    self.last_pkt,
                    f"frame size {size} is not plausible; searching for the next frame",
                )
                self._lose_sync()
                self._skip_bytes(1, "implausible size")  # progress: never re-judge the same byte
                continue
            if len(buf) < 4 + size:
                return
            fp, fts = self._first_mark(self.buf_offset)
            lp, lts = self._mark_holding(self.buf_offset + 3 + size)
            data = bytes(memoryview(buf)[4 : 4 + size])
            pdu = Pdu(data, size, self.buf_offset, fp, fts, lp, lts)
            self.pdu_bytes += 4 + size
            self.frames += 1
            self._consume(4 + size)
            self.on_pdu(pdu)

    def _search(self) -> bool:
        """Find a plausible frame start in the buffer; drop what precedes it. True when synced."""
        buf = self.buf
        n = len(buf)
        p = 0
        found = -1
        top = self.max_frame >> 24
        if self.client_side:
            # a position up to n - 12 that is no regex candidate is no request (judged in C);
            # the last 11 positions go through the byte loop below, which may wait for more bytes
            p = max(n - 11, 0)
            for m in request_candidates(top).finditer(buf, 0, max(n - 3, 0)):  # 9-byte pattern: q <= n - 12
                q = m.start()
                if buf[q] <= top and plausible_request(buf, q, self.max_frame) != 0:
                    p = q
                    break
        else:
            limit = self._last_awaited(buf)
            sizes = size_candidates(top)
        while p + 4 <= n:
            if buf[p] > top:  # the size's first byte alone rules this position out
                p += 1
                continue
            if self.client_side:
                v = plausible_request(buf, p, self.max_frame)
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
                    m = sizes.search(buf, p)
                    q = m.start() if m else n
                    if q > p:
                        p = min(q, n - 7)
                        continue
                if n - p < 8:
                    break
                v = self._response_chain(buf, p)
                if v == 1:
                    found = p
                    break
                if v == -1 and p == 0:
                    break  # the buffer may start on a frame whose successor has not arrived yet
            p += 1
        if found >= 0:
            if found:
                self._skip_bytes(found, "resync")
            self.synced = True
            self.resyncs += 1
            return True
        # nothing yet: every position before p was ruled out for good, so drop those bytes
        # (a later chunk never rescans them: linear, not quadratic); keep the undecided tail
        # unless it outgrows the window
        drop = p
        if n - drop > SEARCH_WINDOW:
            drop = max(drop, n - KEEP_TAIL)
        if drop:
            self._skip_bytes(drop, "search")
        return False

    def _last_awaited(self, buf: bytearray) -> int:
        """The last position whose correlation-id bytes (4 on) hold an awaited id; -1 when
        none does; len(buf) when unknown (no `awaited`, or too many ids to look for)."""
        ids = self.awaited
        if ids is None or len(ids) > 32:
            return len(buf)
        last = -1
        for corr in ids:
            at = buf.rfind(corr.to_bytes(4, "big", signed=True), 4)
            if at - 4 > last:
                last = at - 4
        return last

    def _response_chain(self, buf: bytearray, p: int, hops: int = 8) -> int:
        """Whether a response starts at buf[p]: 1 when it, or a frame reached by following
        sizes from it, carries a correlation id a pending request awaits; 0 no; -1 undecided.
        The chain lets a mid-stream start keep the responses before the first awaited one
        (reported as request_missing) instead of skipping them."""
        n = len(buf)
        q = p
        # at the very start of a mid-stream capture the first responses answer requests sent
        # before it: frames that chain from the first byte exactly to the end of what arrived
        # (or 3 in a row) with sane correlation ids are accepted as responses (orphans)
        start = p == 0 and self.buf_offset == 0 and not self.resyncs
        for hop in range(hops):
            if start and q == n and hop:
                return 1
            if n - q < 8:
                return -1
            size = int.from_bytes(buf[q : q + 4], "big")
            if size < MIN_RESPONSE or size > self.max_frame:
                return 0
            corr = int.from_bytes(buf[q + 4 : q + 8], "big", signed=True)
            if self.expects(corr):
                return 1
            if start and corr < 0:
                start = False
            q += 4 + size
            if start and hop >= 2 and q <= n:
                return 1
        return 0

    def _skip_bytes(self, k: int, why: str) -> None:
        self._note("skipped_bytes", self.buf_offset, self.last_pkt, f"{k} bytes skipped ({why})")
        self.skipped += k
        self._consume(k)

    def evict(self, why: str) -> int:
        """Drop the buffered bytes (a buffering limit was hit): they count as skipped. A frame
        whose size is known is skipped to its end, so the direction stays in sync. Returns the
        bytes dropped."""
        n = len(self.buf)
        if not n:
            return 0
        if self.synced and n >= 4:
            size = int.from_bytes(self.buf[:4], "big")
            if MIN_RESPONSE <= size <= self.max_frame:
                self.skip = self.buf_offset + 4 + size - self.stream_offset
        if not self.skip:
            self._lose_sync()
        self._note("skipped_bytes", self.buf_offset, self.last_pkt, f"{n} bytes skipped ({why})")
        self.skipped += n
        self.buf = bytearray()  # a new buffer: the old one may have grown large
        self.marks.clear()
        return n

    def close(self) -> None:
        """End of stream: a partial frame becomes a truncated PDU (if its header is there) or skipped bytes."""
        self._release_cut(None, 0)
        if self.buf and self.synced and len(self.buf) >= 4 + MIN_REQUEST:
            size = int.from_bytes(self.buf[:4], "big")
            if size <= self.max_frame:
                fp, fts = self._first_mark(self.buf_offset)
                have = bytes(self.buf[4:])
                pdu = Pdu(have, size, self.buf_offset, fp, fts, self.last_pkt, self.last_ts, 4 + size - len(self.buf))
                self.pdu_bytes += len(self.buf)
                self.frames += 1
                self.buf.clear()
                self.marks.clear()
                self.on_pdu(pdu)
                return
        if self.buf:
            self._note("incomplete_frame", self.buf_offset, self.last_pkt, f"{len(self.buf)} bytes at end of stream are not a whole frame")
            self.skipped += len(self.buf)
            self.buf.clear()
            self.marks.clear()
