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

from dissectors import Code
from kanalyze.capture import CaptureError, Packet
from kanalyze.connection import Connection, Undecided
from kanalyze.correlation import Exchange, Message
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import ACK, SYN, FlowStats, Segment, decode_segment
from kanalyze.parallel.ranges import ConnEdge, MsgKey, Range, RangeResult, read_range
from kanalyze.reassembly import MASK

FINAL = 1 << 62  # the "packet number" of what happens at the end of input
# handover candidates noted per connection (the stitch takes the first common): as found
# mid-stream, and past the range's end (only where every awaited request is of the overlap,
# as the next range's run has seen it too)
MAX_HEAD = 256
MAX_TAIL = 64



def conn_key(k: tuple[bytes, int, bytes, int]) -> tuple[bytes, int, bytes, int]:
    """A connection's 4-tuple regardless of direction (smaller end first)."""
    a, b = (k[0], k[1]), (k[2], k[3])
    return (a[0], a[1], b[0], b[1]) if a <= b else (b[0], b[1], a[0], a[1])


def _abs(half, off: int) -> int:  # noqa: ANN001
    return (half.base + off) & MASK


def awaited(conn: Connection) -> tuple[MsgKey, ...]:
    """The requests `conn` awaits answers to (pending and acks=0), each as (first packet, last
    packet, correlation id): the same in every run that saw them."""
    corr = conn.corr
    keys = [(m.pdu.first_pkt, m.pdu.last_pkt, c) for c, q in corr.pending.items()
            for m, _h, _a in q]
    keys.extend((m.pdu.first_pkt, m.pdu.last_pkt, h.correlation_id)
                for m, h, _a in corr.unanswered)
    return tuple(sorted(keys))


def signature(conn: Connection) -> bytes | None:
    """A digest of the state of a quiescent connection that decides its future, apart from
    the requests it awaits (`awaited`, compared by the stitch), in absolute terms (raw
    sequence numbers) so two runs that started at different places compare; None when it is
    not quiescent."""
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
    # an ack at or below the next byte decides nothing later (only acks past it do)
    acks = tuple(_abs(h, h.acked) if h.acked > h.next else None for h in (c2s, s2c))
    fins = tuple(None if h.fin_at is None else h.fin_at - h.next for h in (c2s, s2c))
    state = (conn.client_key, _abs(c2s, c2s.next), _abs(s2c, s2c.next), acks, fins)
    return hashlib.blake2b(repr(state).encode(), digest_size=16).digest()


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
        self.cid = 0  # the connection whose segment is being processed
        self.rank: dict[tuple[int, int], int] = {}
        self.held: dict[int, tuple[int, int]] = {}  # undecided connection -> (packet, first ts)
        # per connection, what the output waits for: [message, packet it began waiting]
        self.out: dict[int, list[list]] = {}

    def _complete(self, ex: Exchange) -> None:
        super()._complete(ex)
        cid = ex.conn.id
        at = (self.cur, cid)
        if len(self.rank) > 64 and at not in self.rank:
            self.rank.clear()  # only the current packet's counts matter
        n = self.rank[at] = self.rank.get(at, 0) + 1
        req = ex.request
        flags = (ex.response is not None) | (2 * _duplicate(req))
        if req is None:
            first = last = corr = -1
        else:
            first, last = req.pdu.first_pkt, req.pdu.last_pkt
            corr = -1 if ex.correlation_id is None else ex.correlation_id
        self.res.done_keys[id(ex)] = (self.cur, n, ex.start_ts, cid, first, last, corr, flags)

    def _pending(self, msg: Message) -> None:
        super()._pending(msg)
        self.out.setdefault(self.cid, []).append([msg, self.cur])

    def _settle(self, cid: int) -> None:
        """Log the messages of `cid` the output no longer waits for."""
        out = self.out.get(cid)
        if not out:
            return
        keep = []
        for item in out:
            msg, since = item
            if msg.done:
                corr = msg.header.get("correlation_id", -1)
                pdu = msg.pdu
                self.res.waits.append((cid, since, self.cur, pdu.last_ts, pdu.first_pkt,
                                       pdu.last_pkt, corr if isinstance(corr, int) else -1, 0))
            else:
                keep.append(item)
        self.out[cid] = keep

    def feed(self, pkt: Packet) -> None:
        self.cur = pkt.no
        nid = self.next_id
        super().feed(pkt)
        if self.next_id != nid and self.undecided:
            for und in self.undecided.values():
                if und.id not in self.held and und.id not in self.res.conns:
                    self.held[und.id] = (pkt.no, und.first_ts)
                    self.res.edge(und.id, conn_key(und.key), pkt.no, False)

    def _decide(self, und: Undecided, verdict: bool | None = None) -> None:
        since, ts = self.held.pop(und.id, (self.cur, und.first_ts))
        # the output waited for it (by its first packet's time) until now
        self.res.waits.append((und.id, since, self.cur, ts, 0, 0, -1, 1))
        super()._decide(und, verdict)

    def _open(self, seg: Segment, key, flags: int, conn_id: int | None = None,  # noqa: ANN001
              verdict: bool | None = None) -> Connection:
        conn = super()._open(seg, key, flags, conn_id, verdict)
        self.cid = conn.info.id
        if conn_id is None:  # a held connection was noted when it was first seen
            # a SYN opens a new connection; a SYN-ACK first is one met mid-handshake
            self.res.edge(conn.info.id, conn_key(key), self.cur, flags & (SYN | ACK) == SYN)
        return conn

    def _segment(self, seg: Segment, key, conn: Connection | None, pkt) -> None:  # noqa: ANN001
        if conn is not None:
            self.cid = conn.info.id
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
        self._settle(cid)
        if edge is None:
            return
        head = not edge.syn and len(edge.head) < MAX_HEAD
        tail = self.cur > self.boundary and len(edge.tail) < MAX_TAIL
        if (head or tail) and pkt.no == self.cur:  # not a held segment replayed
            sig = signature(c)
            if sig is None:
                return
            mark = (self.cur, sig, *_acc(c), c.cf.resyncs + c.sf.resyncs, awaited(c))
            if head:
                edge.head.append(mark)
            if tail and _first_awaited(c) > self.boundary:
                edge.tail.append(mark)

    def _close(self, conn: Connection, pkt: Packet | None) -> None:
        was = conn.closed
        self.cid = conn.info.id
        super()._close(conn, pkt)
        if was:
            return
        cid = conn.info.id
        self._settle(cid)
        edge = self.res.conns.get(cid)
        if edge is not None:
            edge.closed = self.cur
            edge.skipped, edge.gaps = _acc(conn)
            edge.resyncs = conn.cf.resyncs + conn.sf.resyncs
            edge.kafka = conn.kafka and not conn.ignored
            edge.ignored = conn.ignored or (not conn.kafka and bool(
                conn.c2s.delivered + conn.s2c.delivered))


def _duplicate(msg: Message | None) -> bool:
    return msg is not None and any(d.code == Code.DUPLICATE_CORRELATION_ID
                                   for d in msg.diagnostics)


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
