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
from dataclasses import replace
from itertools import islice
from typing import Protocol

from dissectors import Code
from kanalyze.capture import CaptureError, Packet
from kanalyze.connection import Connection, Undecided
from kanalyze.correlation import Exchange, Message
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import ACK, SYN, FlowStats, Segment, decode_segment
from kanalyze.headers import plausible_request
from kanalyze.held import HeldFrames
from kanalyze.parallel.range_edges import NO_EDGE, EdgeMerge
from kanalyze.parallel.range_plan import (
    FINAL,
    RANK_BITS,
    ConnKey,
    MsgKey,
    Range,
    RangeResult,
    Wanted,
    conn_key,
    read_overlap,
    read_range,
)
from kanalyze.reassembly import MASK

PSH = 0x08
JOIN_SKIP = 1 << 40  # "skip everything" until a pushed segment (see RangeEngine._open)
# handover candidates noted per connection (the stitch takes the first common): as found
# mid-stream, and past the range's end (only where every awaited request is of the overlap,
# as the next range's run has seen it too)
MAX_HEAD = 256
# 8 were too few on the 250 MB benchmark at 15 and 16 jobs: the next range, joined mid-stream,
# first marked the consumer's connection 76 packets after the edge, 21 after the 8th tail mark
# (no common point: the run fell back to one process)
MAX_TAIL = 16



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


def counters(conn: Connection) -> tuple:
    """Per direction (client, broker), what `DirectionTotals.add` adds at close, in its field
    order (stream, frames, skipped, gaps, gap count, retransmitted, overlap conflicts, frames,
    limit gaps, uncaptured), then the stream events kept and dropped so far and the counts by
    code: a later run's counters minus its counters at the handover are what one process
    adds from there."""
    return tuple(
        (h.next, f.pdu_bytes, f.skipped, h.gap_bytes, h.gaps, h.retransmitted,
         h.overlap_conflicts, f.frames, h.limit_gaps, h.uncaptured, len(f.events),
         f.events_dropped, dict(f.event_counts))
        for h, f in ((conn.c2s, conn.cf), (conn.s2c, conn.sf)))


def table_counters(conn: Connection) -> tuple[int, ...]:
    """The Spark connections table's byte counts so far, taken from `counters`: client and
    broker stream bytes, frame bytes, bytes skipped, lost in gaps, gaps, retransmitted, client
    and broker frames."""
    c, s = counters(conn)
    return (c[0], s[0], c[1], s[1], c[2] + s[2], c[3] + s[3], c[4] + s[4], c[5] + s[5], c[7],
            s[7])


def _eligible(awaits: tuple[MsgKey, ...], boundary: int, answered: int) -> bool:
    """Whether a later run may await as much: every request awaited from before the boundary
    is dead (a newer one was answered, and a broker answers in order), so it can only be one
    this run read from a stream it joined mid-frame (the stitch drops those) or a request
    never answered (then no later run matches, and the stitch refuses)."""
    return all(first > boundary or first < answered for first, _l, _c in awaits)


def _acc(conn: Connection) -> tuple[int, int]:
    """(bytes skipped, bytes lost in gaps) so far: the closing note's numbers."""
    return (conn.cf.skipped + conn.sf.skipped, conn.c2s.gap_bytes + conn.s2c.gap_bytes)


class RangeEngine(Engine):
    """`Engine` + the notes of `ranges.RangeResult` (filled into `res`)."""

    def __init__(self, on_exchange: Callable[[Exchange], None], opts: EngineOptions,
                 res: RangeResult, boundary: int,
                 hold: Callable[[Exchange], None] | None = None) -> None:
        super().__init__(on_exchange, opts, hold)
        self.res = res
        self.boundary = boundary  # last packet of the range proper (the overlap follows)
        self.cur = 0
        self.cid = 0  # the connection whose segment is being processed
        self.rank: dict[tuple[int, int], int] = {}
        self.held: dict[int, tuple[int, int]] = {}  # undecided connection -> (packet, first ts)
        # per connection, what the output waits for: [message, packet it began waiting]
        self.out: dict[int, list[list]] = {}
        self.answered: dict[int, int] = {}  # connection -> first packet of the newest answered
        # found mid-stream: client bytes skipped until a push (-> whether --port forced it)
        self.joining: dict[int, bool] = {}
        # connections this run notes nothing for but the output's waits (`_fast` takes them):
        # opened by a SYN or past their head marks, and not joining
        self.plain: set[int] = set()
        # the statistics of flows that are not Kafka as last attributed to a view (`_other`),
        # the verdicts so far, the last connection opened
        self.other_at = (0, 0)
        self.verdicts = 0
        self.opened: Connection | None = None
        self.pendings = 0  # messages the output began to wait for (`range_edges` counts them)

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
            if ex.response is not None and first > self.answered.get(cid, -1):
                self.answered[cid] = first
        self.res.done_keys[id(ex)] = (self.cur, n, ex.start_ts, cid, first, last, corr, flags)
        if req is None and self.out.get(cid):
            # an orphan of a closed connection settled by another connection's request
            # (`Evidence.late`): its connection takes no more packets to log its wait
            self._settle(cid)

    def _pending(self, msg: Message) -> None:
        super()._pending(msg)
        self.pendings += 1
        self.out.setdefault(self.cid, []).append([msg, self.cur])

    def _settle(self, cid: int) -> None:
        """Log the messages of `cid` the output no longer waits for."""
        out = self.out.get(cid)
        if not out:
            return
        for item in out:  # mostly none is done: no new list then
            if item[0].done:
                break
        else:
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
            # connections held undecided are noted when first seen; new ones are the newest
            # entries (insertion order), so stop at the first noted one: a scan of them all
            # per new connection made 100k SYN-less connections quadratic
            for und in reversed(self.undecided.values()):
                if und.id in self.held or und.id in self.res.conns:
                    break
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
        self.opened = conn
        if conn_id is None:  # a held connection was noted when it was first seen
            # a SYN opens a new connection; a SYN-ACK first is one met mid-handshake
            self.res.edge(conn.info.id, conn_key(key), self.cur, flags & (SYN | ACK) == SYN)
        edge = self.res.conns[conn.info.id]
        edge.inserted, edge.roles = self.cur, (conn.info.client, conn.info.broker)
        if self.res.index and not flags & SYN:
            # joined mid-stream: a client writes a request in one go and the last segment of
            # a write carries PSH, so framing the client side after the first pushed segment
            # starts at a frame, where searching would take record bytes for a header (a
            # wrong guess only means no handover: the stitch compares states)
            conn.cf.synced, conn.cf.skip = True, JOIN_SKIP
            self.joining[conn.info.id] = conn.forced
            conn.forced = True  # the skipped bytes do not count against Kafka detection
            if key == conn.client_key:
                self._join_at(conn, seg)
        self._check_plain(conn.info.id)
        return conn

    def _opened(self) -> Connection | None:
        """The connection `_open` opened in this segment: read through a call, as the type
        checker (and so the compiled build) takes `self.opened` for None right after it was
        set so, though `_open` sets it in between."""
        return self.opened

    def _check_plain(self, cid: int) -> None:
        """Note `cid` for the fused path once it neither joins nor marks head marks."""
        edge = self.res.conns.get(cid)
        if edge is not None and cid not in self.joining and (edge.syn
                                                             or len(edge.head) >= MAX_HEAD):
            self.plain.add(cid)

    def _join_at(self, conn: Connection, seg: Segment) -> None:
        """The first client segment of a connection joined mid-stream starts at a frame when
        it holds whole frames, the first a plausible request: framed from its first byte."""
        data = seg.payload
        if conn.c2s.base is not None or not data:
            return
        pos, n = 0, len(data)
        while pos + 4 <= n:
            pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
        if pos == n and plausible_request(data, 0, conn.cf.max_frame) == 1:
            self._joined(conn)

    def _joined(self, conn: Connection) -> None:
        conn.forced = self.joining.pop(conn.info.id)
        conn.cf.skip = conn.cf.skipped = 0  # (only differences after a handover are counted)
        self._check_plain(conn.info.id)

    def _fast(self, conn: Connection, key, seq: int, ack: int, flags: int,  # noqa: ANN001
              payload: bytes | memoryview, pkt) -> bool:  # noqa: ANN001
        """The engine's fused path where this run notes nothing but the output's waits: a
        connection neither joining nor marking (marks and joins are taken in `_segment`, so
        those segments go the general way). Half the packets of a range took the general path
        when it was off for every connection: 0.08 s more per range on the benchmark."""
        cid = conn.info.id
        if cid not in self.plain or self.cur > self.boundary:
            return False
        self.cid = cid
        if not Engine._fast(self, conn, key, seq, ack, flags, payload, pkt):
            return False
        out = self.out.get(cid)
        if out:  # what `_settle` would log, mostly nothing: tested here without a call
            for item in out:
                if item[0].done:
                    self._settle(cid)
                    break
        return True

    def _segment(self, seg: Segment, key, conn: Connection | None, pkt) -> None:  # noqa: ANN001
        if conn is not None:
            self.cid = conn.info.id
            if self.joining and conn.info.id in self.joining and key == conn.client_key:
                self._join_at(conn, seg)
            if seg.flags & (SYN | ACK) == SYN:
                # a SYN on a connection found mid-stream: one process compares it with the
                # ISN this run never saw (port reuse or a late copy): the stitch refuses it
                edge = self.res.conns.get(conn.info.id)
                if edge is not None and not edge.syn and edge.syn_seen is None:
                    edge.syn_seen = self.cur
        self.opened = None
        super()._segment(seg, key, conn, pkt)
        self._other(conn or self._opened())
        c = self.conns.get(key)
        if c is None or c.closed:
            return
        cid = c.info.id
        if cid in self.joining and seg.flags & PSH and key == c.client_key and not c.c2s.heap \
                and (seg.seq + len(seg.payload)) & MASK == _abs(c.c2s, c.c2s.next):
            self._joined(c)
        edge = self.res.conns.get(cid)
        # found mid-stream: responses to requests of the previous range need not wait (that
        # range's run pairs them; these are dropped), so the connection can become quiescent.
        # A broker answers in order, so until a response here pairs with a request seen here,
        # every response without its request answers one sent before this run joined (even
        # after a first quiescent mark: a response still in flight then)
        if edge is not None and self.res.index and not edge.syn and c.corr.orphans \
                and cid not in self.answered:
            c.corr.settle_orphans()
        self._settle(cid)
        if edge is None:
            return
        head = not edge.syn and len(edge.head) < MAX_HEAD
        tail = self.cur > self.boundary and len(edge.tail) < MAX_TAIL
        # (not a held segment replayed; a connection signature() would refuse: no awaits)
        if (head or tail) and pkt.no == self.cur and c.kafka and not c.ignored:
            awaits = awaited(c)
            tail = tail and _eligible(awaits, self.boundary, self.answered.get(cid, -1))
            if not (head or tail):
                return  # no digest for a tail mark no later run could share: the overlap that
                # follows a request pending since long before the edge took one every packet
            sig = signature(c)
            if sig is None:
                return
            mark = (self.cur, sig, *_acc(c), c.cf.resyncs + c.sf.resyncs, awaits)
            if head:
                edge.head.append(mark)
                if len(edge.head) >= MAX_HEAD:
                    self._check_plain(cid)
            if tail:
                edge.tail.append(mark)
            if head or tail:  # a handover may happen here: the counts at this packet
                self.res.counters[(cid, self.cur)] = table_counters(c)
                edge.counts[self.cur] = counters(c)

    def _other(self, conn: Connection | None) -> None:
        """Give `conn` what the statistics of flows that are not Kafka took since the last
        call (a segment or a close: only its own connection's numbers move then; a close
        inside a segment is its connection's too, or a port reuse's old connection, whose
        numbers are taken first by the close's own call)."""
        st = self.stats
        now = (st.non_kafka_bytes, st.non_kafka_connections)
        if now == self.other_at:
            return
        was, self.other_at = self.other_at, now
        edge = None if conn is None else self.res.conns.get(conn.info.id)
        if conn is None or edge is None:
            self.res.coupled.append("numbers of a flow that is not Kafka without its view")
            return
        edge.other_bytes += now[0] - was[0]
        if now[1] != was[1]:
            edge.judged = (self.cur, self.verdicts)
            edge.flow = (conn.info.client, conn.info.broker, conn.tls)
            self.verdicts += now[1] - was[1]

    def _close(self, conn: Connection, pkt: Packet | None) -> None:
        was = conn.closed
        self.cid = conn.info.id
        super()._close(conn, pkt)
        self._other(conn)
        if was:
            return
        cid = conn.info.id
        self._settle(cid)
        edge = self.res.conns.get(cid)
        if edge is not None:
            self.res.counters[(cid, -1)] = table_counters(conn)
            edge.closed = self.cur
            edge.skipped, edge.gaps = _acc(conn)
            edge.resyncs = conn.cf.resyncs + conn.sf.resyncs
            edge.kafka = conn.kafka and not conn.ignored
            edge.ignored = conn.ignored or (not conn.kafka and bool(
                conn.c2s.delivered + conn.s2c.delivered))
            edge.final = counters(conn)
            edge.events = (list(conn.cf.events), list(conn.sf.events))


def _duplicate(msg: Message | None) -> bool:
    return msg is not None and bool(msg.diagnostics) and any(
        d.code == Code.DUPLICATE_CORRELATION_ID for d in msg.diagnostics)


def _overlap(rng: Range, eng: RangeEngine, res: RangeResult) -> None:
    """Past the range: only the packets of the connections open at its end, until each of
    them closed or has `MAX_TAIL` tail marks (or the input ends)."""
    alive = [e for e in res.conns.values() if e.closed is None]
    wanted = Wanted()
    wanted.follow([e.key for e in alive])
    keys = {e.key for e in alive}
    flows = FlowStats()
    fed = 0
    for pkt in read_overlap(rng, wanted):
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is None or conn_key((seg.src, seg.sport, seg.dst, seg.dport)) not in keys:
            continue
        res.overlap_end = pkt.no
        eng.feed(pkt)
        fed += 1
        if fed & 31 == 0:
            alive = [e for e in alive if e.closed is None and len(e.tail) < MAX_TAIL]
            keys = {e.key for e in alive}
            wanted.follow(keys)


class RangeTap(Protocol):
    """What sees each packet of the range itself (not of the overlap) as the engine reads it:
    the Spark tasks' reading statistics, gathered without a second pass over the range."""

    def packet(self, pkt: Packet, opened: list[ConnKey]) -> None:
        """`pkt` after the engine fed it; `opened`: the 4-tuples (`conn_key`) of the
        connections the engine opened (or first noted, undecided) at it."""

    def merged(self, pkt: Packet, opened: list[ConnKey]) -> None:
        """As `packet`, for a packet of the next file the range merged (`Range.merges`)."""

    def skipped(self, pkt: Packet) -> None:
        """A packet of the range's file left to the previous file's range (`head_before`)."""

    def ended(self) -> None:
        """The range's packets all read (not called when reading them failed)."""


def _feed(eng: RangeEngine, tap: RangeTap | None, pkt: Packet, merged: bool = False) -> None:
    """`pkt` fed, and shown to `tap` with the connections it opened."""
    if tap is None:
        eng.feed(pkt)
        return
    conns = eng.res.conns
    n = len(conns)
    eng.feed(pkt)
    new = len(conns) - n  # edges are only added, each at the packet that opened it
    opened = [e.key for e in islice(reversed(conns.values()), new)] if new else []
    if merged:
        tap.merged(pkt, opened)
    else:
        tap.packet(pkt, opened)


def run(rng: Range, opts: EngineOptions, on_exchange: Callable[[Exchange], None],
        held: HeldFrames | None = None, tap: RangeTap | None = None) -> RangeResult:
    """`ranges.run_range`: the range, then the overlap (only the packets of the connections
    open at the range's end) until each of them closed or has `MAX_TAIL` tail marks. With
    `held`, the frames of exchanges held back are parked (or dropped) as one process's
    `Session` does, and put back as each is handed on; `tap` sees the range's packets."""
    cpu0 = time.process_time()
    # a range the plan did not count: its packets are numbered below the next file's, so
    # until it is counted (after its last packet) that is its boundary
    res = RangeResult(rng.index, rng.base, rng.base + rng.count if rng.counted
                      else rng.base + (1 << RANK_BITS) - 1)
    keys = res.done_keys

    def emit(ex: Exchange) -> None:
        if ex.request is None:
            res.orphans.add(len(res.done))
        res.done.append(keys.pop(id(ex)))
        res.emitted.append(eng.cur)
        if held is not None:
            ex = held.hand_on(ex, eng.waits_before)
        on_exchange(ex)

    eng = RangeEngine(emit, opts, res, res.end_pkt, None if held is None else held.park)
    if held is not None:
        held.stats = eng.stats
    latest = 0
    merge: EdgeMerge | None = None
    if rng.merges and rng.then:
        merge = EdgeMerge(rng, eng, res, lambda p, m: _feed(eng, tap, p, m))
    edge = NO_EDGE if merge is None else merge.due  # the next file's next packet's time
    skip = rng.head_before  # leading packets earlier: the previous file's range reads them
    try:
        for pkt in read_range(rng, views=True):
            if skip:
                if pkt.ts_ns < skip:
                    res.head_skipped += 1
                    if tap is not None:
                        tap.skipped(pkt)
                    continue
                skip = 0
            if pkt.ts_ns > latest:
                latest = pkt.ts_ns
            if pkt.ts_ns > edge and merge is not None:
                edge = merge.before(pkt.ts_ns)
            if merge is not None and res.merged:
                merge.own(pkt)
            elif tap is None:
                eng.feed(pkt)
            else:
                _feed(eng, tap, pkt)
        if skip:
            res.coupled.append("the previous file's merged edge reaches past this range")
        if tap is not None:
            tap.ended()
        if merge is not None and res.merged:
            res.end_pkt = eng.boundary = merge.last  # numbered after every packet of its own
        elif not rng.counted:
            res.end_pkt = eng.boundary = eng.cur or rng.base
        fl = eng.stats.flows
        res.flows = replace(fl, unsupported_linktypes=dict(fl.unsupported_linktypes))
        if not rng.last:
            _overlap(rng if merge is None else merge.overlap(rng), eng, res)
    except (CaptureError, OSError) as e:  # (OSError: a later file gone since the plan)
        res.error = str(e)
    if eng.evidence.late and rng.index == 0 and not rng.last:
        # an orphan of a closed connection still waits for a request to tell its version:
        # one process may see that request after this range (kanalyze/evidence.py); a later
        # range's orphans answer the previous range's requests (dropped) or refuse the stitch
        res.coupled.append("an orphan response waited for evidence past the range")
    eng.cur = FINAL
    eng.now = max(eng.now, rng.last_ts)
    eng.close()
    st = eng.stats
    # what --max-buffered bounds: the bytes held with their objects (at least the buffered)
    res.max_ts, res.open_peak, res.buffered_peak = latest, st.open_peak, st.held_peak
    if st.limit_hits:
        res.coupled.append("an engine-wide bound was hit")
    if st.flows.cut_packets:
        res.coupled.append("a snaplen cut packets (one process writes its note)")
    res.done_keys = {}
    res.cpu_s = time.process_time() - cpu0
    return res
