"""One direction of a TCP connection turned back into an ordered byte stream.

Policy (documented in docs/architecture.md):
- In-order data is passed on at once, without copying.
- Out-of-order segments wait in a heap until the hole before them fills.
- Retransmitted bytes already passed on are dropped: the first copy wins. A
  retransmission whose bytes differ from what was delivered is counted as an
  overlap conflict (checked against the last delivered segment).
- A hole becomes an explicit gap (never zero-filled) when the peer has
  acknowledged past it and a few more packets went by without it arriving
  (the capture lost it: 4 when the peer already answers past it, else 16), when
  the waiting data exceeds a limit, or at FIN/RST/end of input.
Sequence numbers are unwrapped relative to the next expected byte, so streams
longer than 4 GiB and captures that start mid-connection both work.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Protocol

MASK = 0xFFFFFFFF
TAIL_KEPT = 4096  # bytes of the last delivered data kept to check retransmissions against
HALF = 0x80000000
SNAPLEN = "snaplen"  # the `why` of a gap made of bytes the capture's snaplen cut off


class StreamSink(Protocol):
    """Receives one direction's bytes in order."""

    def data(self, chunk: bytes | memoryview, pkt_no: int, ts_ns: int) -> None: ...

    def gap(self, nbytes: int, pkt_no: int, ts_ns: int, why: str = "") -> None:
        """`nbytes` will never arrive; `why` is empty for a capture gap, else the bound that
        made reassembly give up on them."""


@dataclass(slots=True)
class ReassemblyLimits:
    max_ooo_bytes: int = 32 * 1024 * 1024
    max_ooo_segments: int = 8192
    hole_patience_packets: int = 16  # packets to wait after the peer acked past a hole
    # ... and when the peer is already answering past it: packets listed out of order (a
    # request after the response that acknowledges it) still fill it, as tshark reassembles
    reorder_patience_packets: int = 4


class HalfStream:
    """Sequence-space bookkeeping for one direction; pushes bytes to its sink."""

    __slots__ = (
        "sink",
        "limits",
        "base",
        "next",
        "heap",
        "ooo_bytes",
        "order",
        "acked",
        "fin_at",
        "hole_since",
        "last_chunk",
        "last_chunk_at",
        "delivered",
        "gap_bytes",
        "retransmitted",
        "overlap_conflicts",
        "gaps",
        "limit_gaps",
        "clock",
        "uncaptured",
    )

    def __init__(self, sink: StreamSink, limits: ReassemblyLimits) -> None:
        self.sink = sink
        self.limits = limits
        self.base: int | None = None  # raw sequence number of stream byte 0
        self.next = 0  # next expected stream offset
        self.heap: list[
            tuple[int, int, bytes, int, int, int]
        ] = []  # (rel, order, payload, pkt, ts, cut)
        self.ooo_bytes = 0
        self.order = 0
        self.acked = -1  # highest stream offset the peer acknowledged
        self.fin_at: int | None = None
        self.hole_since: int | None = None
        self.last_chunk = b""
        self.last_chunk_at = 0
        self.delivered = 0
        self.gap_bytes = 0
        self.retransmitted = 0
        self.overlap_conflicts = 0
        self.gaps = 0
        self.limit_gaps = 0  # holes given up because out-of-order data hit a ReassemblyLimits bound
        self.clock = 0  # the connection's packet counter, for hole patience
        self.uncaptured = 0  # bytes cut by the snaplen (also in gap_bytes)

    def __reduce__(self) -> tuple:
        # a blank half-stream, then its state (dissectors/native.py): its sink leads back to
        # the engine that holds it, so it cannot be a constructor argument
        return _blank_half_stream, (), self.__getstate__()

    def start(self, seq: int, syn: bool) -> None:
        """Fix stream offset 0 (the SYN consumes one sequence number)."""
        self.base = (seq + 1) & MASK if syn else seq

    @property
    def finished(self) -> bool:
        return self.fin_at is not None and self.next >= self.fin_at and not self.heap

    def segment(
        self,
        seq: int,
        payload: bytes | memoryview,
        fin: bool,
        pkt_no: int,
        ts_ns: int,
        clock: int,
        cut: int = 0,
    ) -> None:
        """Take one segment's payload (and FIN) at raw sequence number `seq`; `cut` more bytes
        followed the payload on the wire but were not captured (snaplen): a gap of known size."""
        base = self.base
        if base is None:
            self.start(seq, False)
            base = seq
        self.clock = clock
        n = len(payload)
        nxt = self.next
        # unwrapped relative to the next expected byte (inline: runs once per packet)
        d = (seq - base - nxt) & MASK
        rel = nxt + (d - (MASK + 1) if d >= HALF else d)
        if fin:
            self.fin_at = max(self.fin_at or 0, rel + n + cut)
        if not n and not cut:
            return
        if rel == nxt and not self.heap:
            if n:
                self._deliver(payload, rel, pkt_no, ts_ns)
            if cut:
                self._uncaptured(rel + n + cut, pkt_no, ts_ns)
            return
        end = rel + n
        if end + cut <= nxt:
            if n:
                self._retransmission(payload, rel)
            return
        if rel <= nxt:
            if end > nxt:
                if rel < nxt:
                    self._retransmission(payload[: nxt - rel], rel)
                    payload = payload[nxt - rel :]
                self._deliver(payload, nxt, pkt_no, ts_ns)
            if cut:
                self._uncaptured(end + cut, pkt_no, ts_ns)
            self._drain(pkt_no, ts_ns)
            return
        heapq.heappush(self.heap, (rel, self.order, bytes(payload), pkt_no, ts_ns, cut))
        self.order += 1
        self.ooo_bytes += n
        if self.hole_since is None:
            self.hole_since = clock
        lim = self.limits
        if self.ooo_bytes > lim.max_ooo_bytes or len(self.heap) > lim.max_ooo_segments:
            self.limit_gaps += 1
            self._gap_to(
                self.heap[0][0],
                pkt_no,
                ts_ns,
                "out-of-order data over --max-ooo-bytes/--max-ooo-segments",
            )

    def peer_ack(self, ack: int) -> None:
        """The other side acknowledged up to raw sequence number `ack`."""
        base = self.base
        if base is None:
            return
        nxt = self.next
        d = (ack - base - nxt) & MASK  # unwrapped like a segment's sequence number
        rel = nxt + (d - (MASK + 1) if d >= HALF else d)
        if rel > self.acked:
            self.acked = rel

    def check_hole(self, clock: int, pkt_no: int, ts_ns: int, now: bool = False) -> None:
        """Give up on a hole the peer has acknowledged past: soon when the peer is already
        answering (`now`: a few packets, for a capture that lists a segment after the answer
        that acknowledges it), otherwise after more patience (captures may list an ACK before
        the data it acknowledges)."""
        self.clock = clock
        lim = self.limits
        if (
            self.heap
            and self.hole_since is not None
            and self.acked > self.next
            and clock - self.hole_since
            >= (lim.reorder_patience_packets if now else lim.hole_patience_packets)
        ):
            self._gap_to(min(self.acked, self.heap[0][0]), pkt_no, ts_ns)

    def flush(self, pkt_no: int, ts_ns: int, why: str = "") -> None:
        """End of the stream (or, with `why`, its buffers evicted): every remaining hole becomes
        a gap, waiting data is delivered."""
        while self.heap:
            self._gap_to(self.heap[0][0], pkt_no, ts_ns, why)

    def _deliver(self, chunk: bytes | memoryview, rel: int, pkt_no: int, ts_ns: int) -> None:
        n = len(chunk)
        end = self.next = rel + n
        self.delivered += n
        if n > TAIL_KEPT:
            self.last_chunk = bytes(chunk[-TAIL_KEPT:])  # a copy: chunk may view a capture block
            self.last_chunk_at = end - TAIL_KEPT
        else:
            self.last_chunk = bytes(chunk)
            self.last_chunk_at = rel
        self.sink.data(chunk, pkt_no, ts_ns)

    def _uncaptured(self, target: int, pkt_no: int, ts_ns: int) -> None:
        """The bytes up to `target` were on the wire but cut by the snaplen: a gap of known
        size (framing stays in sync), counted with the gaps but not as a capture loss."""
        n = target - self.next
        if n <= 0:
            return
        self.gap_bytes += n
        self.uncaptured += n
        self.next = target
        self.last_chunk = b""
        self.sink.gap(n, pkt_no, ts_ns, SNAPLEN)

    def _retransmission(self, payload: bytes | memoryview, rel: int) -> None:
        self.retransmitted += len(payload)
        lc, at = self.last_chunk, self.last_chunk_at
        lo, hi = max(rel, at), min(rel + len(payload), at + len(lc))
        if lo < hi and payload[lo - rel : hi - rel] != lc[lo - at : hi - at]:
            self.overlap_conflicts += 1

    def _drain(self, pkt_no: int, ts_ns: int, own: bool = False) -> None:
        """Deliver waiting segments that now connect; they count as arriving with the current
        packet (the one that completed them), as tshark reports reassembled data. Their time
        is the latest of theirs and that packet's: a capture that lists packets out of time
        order may fill a hole with an earlier-stamped packet, and data is complete only when
        its last byte arrived. After a gap (`own`) nothing completed them: each keeps its own
        packet number and time."""
        heap = self.heap
        while heap and heap[0][0] <= self.next:
            rel, _, payload, pno, ts, cut = heapq.heappop(heap)
            if own:
                pkt_no, ts_ns = pno, ts
            elif ts > ts_ns:
                ts_ns = ts
            self.ooo_bytes -= len(payload)
            nxt = self.next
            end = rel + len(payload)
            if end <= nxt:
                if payload:
                    self._retransmission(payload, rel)
            else:
                if rel < nxt:
                    self._retransmission(payload[: nxt - rel], rel)
                self._deliver(payload[nxt - rel :] if rel < nxt else payload, nxt, pkt_no, ts_ns)
            if cut and end + cut > self.next:
                self._uncaptured(end + cut, pkt_no, ts_ns)
        if not heap:
            self.hole_since = None

    def _gap_to(self, target: int, pkt_no: int, ts_ns: int, why: str = "") -> None:
        """Give up on the bytes up to `target`. The gap is dated by the first packet after it
        (the packet that showed it, not the one that made us give up, which may be none at the
        end of input); the data waiting behind it keeps its own packets and times."""
        if self.heap and self.heap[0][0] >= target:
            pkt_no, ts_ns = self.heap[0][3], self.heap[0][4]
        if target > self.next:
            n = target - self.next
            self.gap_bytes += n
            self.gaps += 1
            self.next = target
            self.last_chunk = b""
            self.sink.gap(n, pkt_no, ts_ns, why)
        self.hole_since = None
        self._drain(pkt_no, ts_ns, own=True)
        if self.heap and self.hole_since is None:
            self.hole_since = self.clock  # a new hole: patience restarts


def _blank_half_stream() -> HalfStream:
    return HalfStream(_NO_SINK, ReassemblyLimits())


class _NoSink:
    """A blank half-stream's sink (replaced by the unpickled state)."""

    def data(self, chunk: bytes | memoryview, pkt_no: int, ts_ns: int) -> None:
        pass

    def gap(self, nbytes: int, pkt_no: int, ts_ns: int, why: str = "") -> None:
        pass


_NO_SINK = _NoSink()
