"""Cut one direction's byte stream into Kafka frames (4-byte big-endian size + payload).

A framer is either in sync (the next bytes are a size prefix) or searching:
at a mid-stream start, after a gap that did not fall inside a known frame, or
after an absurd size. Searching looks for a plausible request header (client
side) or for a response whose correlation id a pending request is waiting for
(broker side; the search itself is `resync.py`); every byte passed over is counted as skipped.
Accounting per direction: bytes delivered = bytes in frames + bytes skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from dissectors import Code
from kanalyze.headers import MIN_REQUEST, UINT32
from kanalyze.reassembly import SNAPLEN
from kanalyze.resync import MIN_RESPONSE, find_frame_start

SEARCH_WINDOW = 1024 * 1024  # bytes searched before older unsynced bytes are dropped
KEEP_TAIL = 64  # bytes kept from a fruitless search (a header may straddle chunks)
MAX_EVENTS = 1000  # stream events kept per direction (the rest are counted)
# builds a Pdu at C speed (a NamedTuple's own __new__ is a Python function)
_new = tuple.__new__


class Pdu(NamedTuple):
    """One Kafka frame. `data` excludes the size prefix; `missing` > 0 when a gap cut it short.

    Immutable; a NamedTuple because one is built per frame (built at C speed)."""

    data: bytes
    size: int  # the size prefix's value
    offset: int  # stream offset of the size prefix
    first_pkt: int
    first_ts: int
    last_pkt: int
    last_ts: int
    missing: int = 0


class StreamEvent(NamedTuple):
    """Something worth reporting about one direction's byte stream: a gap, skipped bytes, an
    implausible size, a bound hit. `frame` is the packet number it was seen at."""

    connection: int
    side: str  # "client" or "broker"
    code: Code
    stream_offset: int
    frame: int
    message: str


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
        "conn_id",
        "side",
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
        conn_id: int = 0,
    ) -> None:
        self.client_side = client_side
        self.conn_id = conn_id  # the connection's id, for the stream events
        self.side = "client" if client_side else "broker"
        self.on_pdu = on_pdu
        self.expects = expects  # broker side: is a response with this correlation id awaited?
        # broker side, optional: the awaited correlation ids themselves (a live view), which
        # lets a search pass over the bytes after the last place one of them occurs
        self.awaited = awaited
        self.max_frame = max_frame
        self.synced = synced
        self.buf = bytearray()
        self.buf_offset = 0  # stream offset of buf[0]
        self.marks: list[
            tuple[int, int, int]
        ] = []  # (stream offset, pkt, ts) where buffered chunks begin
        self.stream_offset = 0  # stream offset just past the last byte received
        self.skip = 0  # bytes still to drop: the rest of a frame broken by a gap
        self.pdu_bytes = 0
        self.skipped = 0
        self.frames = 0
        self.resyncs = 0
        self.last_pkt = 0
        self.last_ts = 0
        self.events: list[StreamEvent] = []
        self.events_dropped = 0
        self.event_counts: dict[str, int] = {}  # every event by Code, kept or dropped
        # a frame broken by a gap, held until its tail has been skipped: it is then dated by the
        # packet carrying its last byte, as an unbroken frame is
        self.cut: Pdu | None = None

    # -- StreamSink -------------------------------------------------------------------------
    def __reduce__(self) -> tuple:
        # a blank framer, then its state (dissectors/native.py): its callbacks lead back to
        # the engine that holds it, so they cannot be constructor arguments
        return _blank_framer, (), self.__getstate__()

    def data(self, chunk: bytes | memoryview, pkt_no: int, ts_ns: int) -> None:
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
        buf = self.buf
        if buf and self.synced and len(buf) >= 4:
            # a frame in progress that this chunk does not complete: buffer it and wait (what
            # `_process` would conclude, without its general checks)
            size = UINT32.unpack_from(buf, 0)[0]
            if MIN_RESPONSE <= size <= self.max_frame and len(buf) + len(chunk) < 4 + size:
                buf += chunk
                self.marks.append((start, pkt_no, ts_ns))
                return
        if not buf and self.synced:
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
        if why == SNAPLEN:  # bytes not captured (snaplen): counted, not listed one by one
            code, why = Code.SNAPLEN, ""
        else:
            code = Code.BUFFER_LIMIT if why else Code.GAP
            why = (
                f"{nbytes} bytes given up ({why})"
                if why
                else f"{nbytes} bytes lost in a capture gap"
            )
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
            size = UINT32.unpack_from(self.buf, 0)[0]
            frame_end = self.buf_offset + 4 + size
            if size <= self.max_frame and frame_end >= gap_start + nbytes:
                # the gap lies inside a frame whose size is known: keep its head, skip its tail
                have = bytes(memoryview(self.buf)[4:])  # one copy (see `close`)
                fp, fts = self.marks[0][1], self.marks[0][2]
                self.pdu_bytes += len(self.buf)
                self.frames += 1
                missing = frame_end - gap_start
                self.skip = frame_end - (gap_start + nbytes)
                # dated by the last packet that carried bytes of it, until its tail shows up
                lp, lts = self.marks[-1][1], self.marks[-1][2]
                pdu = Pdu(have, size, self.buf_offset, fp, fts, lp, lts, missing)
                # a new buffer, not `clear()`: clear shrinks the block to 1 byte, which pins
                # the freed rest apart from its neighbours, a hole slightly too small for the
                # copy just made; 5,000 such closes doubled the RSS (issue 20)
                self.buf = bytearray()
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
                pdu = pdu._replace(last_pkt=pkt_no, last_ts=ts_ns)
            self.on_pdu(pdu)

    def _note(self, code: Code, offset: int, pkt: int, message: str) -> None:
        self.event_counts[code] = self.event_counts.get(code, 0) + 1
        if not message:
            return  # counted only (snaplen cuts: one per packet, summarized once)
        if len(self.events) < MAX_EVENTS:
            self.events.append(StreamEvent(self.conn_id, self.side, code, offset, pkt, message))
        else:
            self.events_dropped += 1

    def _lose_sync(self) -> None:
        self.synced = False

    def _frames_in(self, chunk: bytes | memoryview, pkt_no: int, ts_ns: int, start: int) -> int:
        """Emit every complete frame in a chunk that starts on a frame boundary; return where
        the rest begins."""
        n = len(chunk)
        pos = 0
        mf = self.max_frame
        on_pdu = self.on_pdu
        # boxed once, shared by every frame of the chunk and by both ends of each: compiled,
        # an int field is boxed anew at each use (two more ints held per waiting request)
        no: object = pkt_no
        ts: object = ts_ns
        while pos + 4 <= n:
            size = UINT32.unpack_from(chunk, pos)[0]
            end = pos + 4 + size
            if size > mf or size < MIN_RESPONSE:
                return pos  # let _process report it and resync
            if end > n:
                return pos
            self.pdu_bytes += 4 + size
            self.frames += 1
            on_pdu(
                _new(
                    Pdu,
                    (
                        bytes(chunk[pos + 4 : end]),
                        size,
                        start + pos,
                        no,
                        ts,
                        no,
                        ts,
                        0,
                    ),
                )
            )
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
            size = UINT32.unpack_from(buf, 0)[0]
            if size > self.max_frame or size < MIN_RESPONSE:
                self._note(
                    Code.FRAME_TOO_LARGE if size > self.max_frame else Code.BAD_LENGTH,
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
            # one int for both ends of a frame one packet carried (see `_frames_in`)
            no: object = fp
            ts: object = fts
            pdu = _new(
                Pdu,
                (
                    data,
                    size,
                    self.buf_offset,
                    no,
                    ts,
                    no if lp == fp else lp,
                    ts if lts == fts else lts,
                    0,
                ),
            )
            self.pdu_bytes += 4 + size
            self.frames += 1
            self._consume(4 + size)
            self.on_pdu(pdu)

    def _search(self) -> bool:
        """Find a plausible frame start in the buffer; drop what precedes it. True when synced."""
        buf = self.buf
        n = len(buf)
        at_start = self.buf_offset == 0 and not self.resyncs
        found, p = find_frame_start(
            buf, self.client_side, self.max_frame, self.expects, self.awaited, at_start
        )
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

    def _skip_bytes(self, k: int, why: str) -> None:
        self._note(Code.SKIPPED_BYTES, self.buf_offset, self.last_pkt, f"{k} bytes skipped ({why})")
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
            size = UINT32.unpack_from(self.buf, 0)[0]
            if MIN_RESPONSE <= size <= self.max_frame:
                self.skip = self.buf_offset + 4 + size - self.stream_offset
        if not self.skip:
            self._lose_sync()
        self._note(Code.SKIPPED_BYTES, self.buf_offset, self.last_pkt, f"{n} bytes skipped ({why})")
        self.skipped += n
        self.buf = bytearray()  # a new buffer: the old one may have grown large
        self.marks.clear()
        return n

    def close(self) -> None:
        """End of stream: a partial frame becomes a truncated PDU (if its header is there) or
        skipped bytes."""
        self._release_cut(None, 0)
        if self.buf and self.synced and len(self.buf) >= 4 + MIN_REQUEST:
            size = UINT32.unpack_from(self.buf, 0)[0]
            if size <= self.max_frame:
                fp, fts = self._first_mark(self.buf_offset)
                # one copy, no temporary slice: with one copy the heap block the buffer frees
                # is reused by the next connection's copy, with two (a slice, then bytes) each
                # close left a buffer-sized hole and RSS doubled (issue 20)
                have = bytes(memoryview(self.buf)[4:])
                pdu = Pdu(
                    have,
                    size,
                    self.buf_offset,
                    fp,
                    fts,
                    self.last_pkt,
                    self.last_ts,
                    4 + size - len(self.buf),
                )
                self.pdu_bytes += len(self.buf)
                self.frames += 1
                self.buf = bytearray()  # freed whole (`clear` keeps a 1-byte block: see gap)
                self.marks.clear()
                self.on_pdu(pdu)
                return
        if self.buf:
            self._note(
                Code.INCOMPLETE_FRAME,
                self.buf_offset,
                self.last_pkt,
                f"{len(self.buf)} bytes at end of stream are not a whole frame",
            )
            self.skipped += len(self.buf)
            self.buf = bytearray()
            self.marks.clear()


def _no_pdu(_pdu: Pdu) -> None:
    """A blank framer's callbacks (replaced by the unpickled state)."""


def _expects_none(_corr: int) -> bool:
    return False


def _blank_framer() -> Framer:
    return Framer(True, _no_pdu, _expects_none, 0, False)
