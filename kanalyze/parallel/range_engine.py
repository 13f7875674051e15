"""The engine of one byte range (`ranges.run_range`): the unmodified `Engine`, noting what the
stitch needs to hand each connection over from one range to the next.

A range's engine starts every connection it did not see open mid-stream (roles held until
the bytes tell, framers searching), so its first exchanges of such a connection may differ
from one process's. Where they become the same is found by comparing *state signatures*:
after a packet of a connection, its state is summed up (`signature`) when it is quiescent
(both directions in order with nothing buffered, both framers in sync at a frame boundary,
no held orphan response, no raw SASL); from two runs that are in the same quiescent state
after the same packet, everything that follows on that connection is the same, except what
the engine shares between connections (checked by the stitch).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from kanalyze.capture import CaptureError, Packet
from kanalyze.connection import Connection
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import ACK, SYN, FlowStats, Segment, decode_segment
from kanalyze.parallel.ranges import ConnEdge, Range, RangeResult, read_range
from kanalyze.reassembly import MASK

FINAL = 1 << 62  # the "packet number" of what happens at the end of input
# handover candidates noted per connection (the stitch takes the first common): as found
# mid-stream, and past the range's end (only where every awaited request is of the overlap,
# as the next range's run has seen it too)
MAX_HEAD = 64
MAX_TAIL = 8



def conn_key(k: tuple[bytes, int, bytes, int]) -> tuple[bytes, int, bytes, int]:
    """A connection's 4-tuple regardless of direction (smaller end first)."""
    a, b = (k[0], k[1]), (k[2], k[3])
    return (a[0], a[1], b[0], b[1]) if a <= b else (b[0], b[1], a[0], a[1])


def _abs(half, off: int) -> int:  # noqa: ANN001
    return (half.base + off) & MASK


def signature(conn: Connection) -> bytes | None:
    """The state of a quiescent connection that decides its future, in absolute terms (raw
    sequence numbers, packet numbers), so two runs that started at different places compare;
    None when it is not quiescent."""
    if conn.closed or conn.ignored or not conn.kafka:
        return None
    c2s, s2c, cf, sf, corr = conn.c2s, conn.s2c, conn.cf, conn.sf, conn.corr
    if c2s.base is None or s2c.base is None or c2s.heap or s2c.heap:
        return None
    if not (cf.synced and sf.synced) or cf.buf or sf.buf or cf.skip or sf.skip:
        return None
    if cf.cut is not None or sf.cut is not None or corr.orphans or corr.raw_pending:
        return None
    if corr.sasl_raw:
        return None
    pending = sorted(
        (c, m.pdu.first_pkt, m.pdu.last_pkt) for c, q in corr.pending.items() for m, _h, _a in q
    )
    unanswered = [m.pdu.first_pkt for m, _h, _a in corr.unanswered]
    # an ack at or below the next byte decides nothing later (only acks past it do)
    acks = tuple(_abs(h, h.acked) if h.acked > h.next else None for h in (c2s, s2c))
    fins = tuple(None if h.fin_at is None else h.fin_at - h.next for h in (c2s, s2c))
    state = (conn.client_key, _abs(c2s, c2s.next), _abs(s2c, s2c.next), acks, fins,
             tuple(pending), tuple(unanswered))
    return hashlib.blake2b(repr(state).encode(), digest_size=16).digest()


def _oldest(conn: Connection) -> int | None:
    """Start time of the oldest message of `conn` the output waits for (as the engine's
    `waiting` heap holds them: pending and acks=0 requests, held orphans, raw SASL)."""
    corr = conn.corr
    best: int | None = None
    for q in corr.pending.values():
        for m, _h, _a in q:
            if best is None or m.pdu.last_ts < best:
                best = m.pdu.last_ts
    for m, _h, _a in corr.unanswered:
        if best is None or m.pdu.last_ts < best:
            best = m.pdu.last_ts
    for entry in corr.orphans:
        ts = entry[0].pdu.last_ts
        if best is None or ts < best:
            best = ts
    for m in corr.raw_pending:
        if best is None or m.pdu.last_ts < best:
            best = m.pdu.last_ts
    return best


def _first_awaited(conn: Connection) -> int:
    """Packet of the earliest request `conn` still awaits an answer to (FINAL: none)."""
    corr = conn.corr
    first = FINAL
    for q in corr.pending.values():
        for m, _h, _a in q:
            first = min(first, m.pdu.first_pkt)
    for m, _h, _a in corr.unanswered:
        first = min(first, m.pdu.first_pkt)
    return first


def _acc(conn: Connection) -> tuple[int, int]:
    """(bytes skipped, bytes lost in gaps) so far: the closing note's numbers."""
    return (conn.cf.skipped + conn.sf.skipped, conn.c2s.gap_bytes + conn.s2c.gap_bytes)


class RangeEngine(Engine):
    """`Engine` + the notes of `ranges.RangeResult` (filled into `res`)."""

    def __init__(self, on_exchange: Callable[[Exchange], None], opts: EngineOptions,
                 res: RangeResult, boundary: int) -> None:
        super().__init__(on_exchange, opts)
        self.res = res
        self.boundary = boundary  # last packet of the range proper (the overlap follows)
        self.cur = 0
        self.rank: dict[tuple[int, int], int] = {}
        self.seen_und: set[int] = set()
        self.oldest: dict[int, int | None] = {}

    def _complete(self, ex: Exchange) -> None:
        super()._complete(ex)
        cid = ex.conn.id
        at = (self.cur, cid)
        if len(self.rank) > 64 and at not in self.rank:
            self.rank.clear()  # only the current packet's counts matter
        n = self.rank[at] = self.rank.get(at, 0) + 1
        self.res.done_keys[id(ex)] = (self.cur, n, ex.start_ts, cid)

    def feed(self, pkt: Packet) -> None:
        self.cur = pkt.no
        nid = self.next_id
        super().feed(pkt)
        if self.next_id != nid and self.undecided:
            for und in self.undecided.values():
                if und.id not in self.seen_und:
                    self.seen_und.add(und.id)
                    key = conn_key(und.key)
                    self.res.edge(und.id, key, pkt.no, False)
                    self._log(und.id, und.first_ts, True)

    def _log(self, cid: int, oldest: int | None, undecided: bool = False) -> None:
        if self.oldest.get(cid, -1) != oldest:
            self.oldest[cid] = oldest
            self.res.pending.append((self.cur, cid, oldest, undecided))

    def _open(self, seg: Segment, key, flags: int, conn_id: int | None = None,  # noqa: ANN001
              verdict: bool | None = None) -> Connection:
        conn = super()._open(seg, key, flags, conn_id, verdict)
        if conn_id is None:  # a held connection was noted when it was first seen
            # a SYN opens a new connection; a SYN-ACK first is one met mid-handshake
            self.res.edge(conn.info.id, conn_key(key), self.cur, flags & (SYN | ACK) == SYN)
        return conn

    def _segment(self, seg: Segment, key, conn: Connection | None, pkt) -> None:  # noqa: ANN001
        super()._segment(seg, key, conn, pkt)
        c = self.conns.get(key)
        if c is None or c.closed:
            return
        cid = c.info.id
        edge = self.res.conns.get(cid)
        # found mid-stream: responses to requests of the previous range need not wait (that
        # range's run pairs them; these are dropped), so the connection can become quiescent
        if edge is not None and self.res.index and not edge.syn and not edge.head \
                and c.corr.orphans:
            c.corr.settle_orphans()
        self._log(cid, _oldest(c))
        if edge is None:
            return
        head = not edge.syn and len(edge.head) < MAX_HEAD
        tail = self.cur > self.boundary and len(edge.tail) < MAX_TAIL
        if head or tail:
            sig = signature(c)
            if sig is None:
                return
            mark = (self.cur, sig, *_acc(c))
            if head:
                edge.head.append(mark)
            if tail and _first_awaited(c) > self.boundary:
                edge.tail.append(mark)

    def _close(self, conn: Connection, pkt: Packet | None) -> None:
        was = conn.closed
        super()._close(conn, pkt)
        if was:
            return
        cid = conn.info.id
        self._log(cid, None)
        edge = self.res.conns.get(cid)
        if edge is not None:
            edge.closed = self.cur
            edge.skipped, edge.gaps = _acc(conn)
            edge.kafka = conn.kafka and not conn.ignored
            edge.ignored = conn.ignored or (not conn.kafka and bool(
                conn.c2s.delivered + conn.s2c.delivered))


def run(rng: Range, opts: EngineOptions, on_exchange: Callable[[Exchange], None]) -> RangeResult:
    """`ranges.run_range`: the range, then the overlap (only the packets of the connections
    open at the range's end) until each of them closed or has `MAX_TAIL` tail marks."""
    cpu0 = time.process_time()
    res = RangeResult(rng.index, rng.base, rng.base + rng.count)
    keys = res.done_keys

    def emit(ex: Exchange) -> None:
        if ex.request is None:
            res.orphans.add(len(res.done))
        res.done.append(keys.pop(id(ex)))
        on_exchange(ex)

    eng = RangeEngine(emit, opts, res, res.end_pkt)
    alive: list[ConnEdge] | None = None
    wanted: set[tuple[bytes, int, bytes, int]] = set()
    flows = FlowStats()
    latest = 0
    cap = res.end_pkt + 2 * rng.count + 1024  # the overlap reads at most this far
    try:
        for pkt in read_range(rng):
            if pkt.no > res.end_pkt:
                if pkt.no > cap:
                    break  # the stitch refuses if a connection still open is seen again
                if alive is None or (pkt.no & 63) == 0:
                    alive = [e for e in (res.conns.values() if alive is None else alive)
                             if e.closed is None and len(e.tail) < MAX_TAIL]
                    wanted = {e.key for e in alive}
                    if not alive:
                        break
                seg = decode_segment(pkt.linktype, pkt.data, flows)
                if seg is None or conn_key((seg.src, seg.sport, seg.dst, seg.dport)) not in wanted:
                    continue
                res.overlap_end = pkt.no
            elif pkt.ts_ns > latest:
                latest = pkt.ts_ns
            eng.feed(pkt)
    except CaptureError as e:
        res.error = str(e)
    eng.cur = FINAL
    eng.now = max(eng.now, rng.last_ts)
    eng.close()
    st = eng.stats
    res.max_ts, res.open_peak, res.buffered_peak = latest, st.open_peak, st.buffered_peak
    if st.limit_hits:
        res.coupled.append("an engine-wide bound was hit")
    if st.flows.cut_packets:
        res.coupled.append("a snaplen cut packets (one process writes its note)")
    res.done_keys = {}
    res.cpu_s = time.process_time() - cpu0
    return res
