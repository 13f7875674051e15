"""The pipeline from packets to exchanges: flows → reassembly → framing → correlation.

`Engine.feed(packet)` is push-style so the same object serves offline files,
live capture and Spark tasks. Completed exchanges leave through an orderer
that releases them by start time once no earlier request can still complete
(bounded by `order_window_ns`, so one unanswered request cannot hold the
output back forever).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from dissectors import Code
from kanalyze.capture import Packet
from kanalyze.connection import (
    EARLY_RESPONSES,
    ROLE_BYTES,
    ROLE_PACKETS,
    STALL_BUDGET,
    Connection,
    FlowKey,
    Undecided,
    looks_like_tls,
)
from kanalyze.correlation import ConnInfo, Correlator, Exchange, Message
from kanalyze.engine_types import DirectionTotals, EngineOptions, EngineStats
from kanalyze.evidence import Evidence
from kanalyze.flows import ACK, FIN, RST, SYN, Segment, decode_segment, format_endpoint
from kanalyze.framing import StreamEvent
from kanalyze.reassembly import HALF as SEQ_HALF
from kanalyze.reassembly import MASK as SEQ_MASK
from kanalyze.reassembly import TAIL_KEPT

try:  # only mypyc reads it (tools/compile.py); an install without mypy runs this source
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - mypy (a test dependency) brings it

    def mypyc_attr(*_args: object, **_kwargs: object) -> Callable[[type], type]:  # type: ignore[misc]
        return lambda cls: cls

# Connection, Undecided, looks_like_tls and the role bounds moved to kanalyze.connection
__all__ = [
    "EARLY_RESPONSES",
    "ROLE_BYTES",
    "ROLE_PACKETS",
    "Connection",
    "DirectionTotals",
    "Engine",
    "EngineOptions",
    "EngineStats",
    "FlowKey",
    "Undecided",
    "looks_like_tls",
]

SLOW_FLAGS = SYN | FIN | RST  # a segment with one of these takes the general path
WELL_KNOWN_BROKER_PORTS = frozenset({9092, 9093, 9094, 9095, 9096, 9097, 9192, 19092, 29092})
# client bytes searched for a first request before a flow is judged not Kafka
DETECTION_BUDGET = 64 * 1024
# What the engine holds besides the bytes themselves, in bytes of Python objects (measured with
# tracemalloc on CPython 3.11, x86-64: tests/functional/test_memory_bounds.py checks the RSS).
# --max-buffered bounds the bytes held plus these (EngineStats.held; docs/limits.md, issue 20).
CHUNK_COST = 256  # an out-of-order segment: heap entry, bytes object, ints (measured ~250)
MARK_COST = 176  # a framer mark: where a buffered chunk began, with its ints (measured 172)
PENDING_COST = 1450  # a request (or held response) waiting: Pdu, Message, header (measured
# 1379 on the pure path, 1427 with the engine compiled)
EXCHANGE_COST = 1500  # a completed exchange waiting for its turn in the output (measured 1380)


@dataclass(slots=True)
class _At:
    """The packet number and time a held segment came with (all the replay needs of a packet)."""

    no: int
    ts_ns: int


# compiled, the engine is still subclassed in Python (the --jobs connection shards, the tests)
@mypyc_attr(allow_interpreted_subclasses=True)
class Engine:
    """Push packets in, get exchanges out through `on_exchange`, in start-time order."""

    def __init__(
        self,
        on_exchange: Callable[[Exchange], None],
        opts: EngineOptions | None = None,
        hold: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.opts = opts or EngineOptions()
        self.on_exchange = on_exchange
        # called on each completed exchange the orderer is about to hold back (a request
        # started before it still waits): a request waiting for a long rebalance can hold every
        # later exchange (and its frames) for up to `order_window_ns`; the TUI moves the frames
        # to its spill file here, the offline commands to a temporary file (kanalyze.held).
        # Exchanges that go out at once are not shown to it (no copy of their frames is made)
        self.hold = hold
        self.stats = EngineStats()
        self.conns: dict[FlowKey, Connection] = {}  # both directions' keys
        self.order: dict[int, Connection] = {}  # open connections by id, in order of appearance
        self.next_id = self.opts.id_first
        self.done: list[tuple[int, int, Exchange]] = []  # completed exchanges by start time
        self.waiting: list[tuple[int, int, Message]] = []  # pending requests by start time
        self.waiting_room = 1024  # size at which `waiting` is rebuilt without answered requests
        self.shedding = False  # `_shed` is running
        self.seq = 0
        self.now = 0
        self.undecided: dict[tuple, Undecided] = {}  # both 4-tuples of each undecided connection
        self.stalled_bytes = 0  # held by undecided connections past their first hold
        # what the run's requests say about orphans' apis, the late orphans, and the run's
        # budget of layout searches (kanalyze/evidence.py)
        self.evidence = Evidence()
        self.fast = self.opts.fast_path
        # called with (connection, from client, segment, packet number) for every segment of a
        # connection whose roles are known, held ones when they are replayed (`export -w` maps
        # each packet to its stream bytes with it); None costs one test per segment. Only the
        # general path calls it: set `fast` False with it
        self.on_segment: Callable[[Connection, bool, Segment, int], None] | None = None

    def __reduce__(self) -> tuple:
        # Spark streaming keeps an engine in its state: a blank engine, then its state
        # (dissectors/native.py: a compiled class is made only through its __init__)
        return _blank_engine, (), self.__getstate__()

    # -- orderer ------------------------------------------------------------------------------
    def _complete(self, ex: Exchange) -> None:
        req, resp = ex.request, ex.response
        first = req or resp
        start = first.pdu.last_ts if first is not None else 0  # ex.start_ts, once
        if self.hold is not None and self._held_back(start):
            self.hold(ex)
        self.seq += 1
        st = self.stats
        if req is not None and req.cost:
            st.held -= req.cost
            req.cost = 0
        if resp is not None and resp.cost:
            st.held -= resp.cost
            resp.cost = 0
        st.held += _exchange_cost(ex)  # after `hold`, which may have moved the frames out
        heapq.heappush(self.done, (start, self.seq, ex))

    def _held_back(self, start_ts: int) -> bool:
        """Whether `_release` will keep an exchange starting at `start_ts`: a request listed
        before it still waits, within the order window (`_release`'s own test; a response
        later in the same packet may still free it: then its frames were moved for nothing)."""
        return self.waits_before(start_ts) and start_ts > self.now - self.opts.order_window_ns

    def waits_before(self, ts: int) -> bool:
        """Whether a request listed before `ts` still waits for its response (the requests
        answered after it stay in the pending heap and their connection's arrivals until it
        goes: kanalyze.held gives their frames on without leaving them there)."""
        waiting = self.waiting
        while waiting and waiting[0][2].done:
            heapq.heappop(waiting)
        return bool(waiting) and ts > waiting[0][0]

    def _pending(self, msg: Message) -> None:
        self.seq += 1
        msg.cost = cost = len(msg.pdu.data) + PENDING_COST
        self.stats.held += cost
        waiting = self.waiting
        heapq.heappush(waiting, (msg.pdu.last_ts, self.seq, msg))
        if len(waiting) > self.waiting_room:
            self._compact_waiting()

    def _compact_waiting(self) -> None:
        """Drop the answered requests from the pending heap. It is cleaned lazily from its top,
        so one request never answered kept every later request (its frame included) alive
        behind it until its connection closed: memory grew with the capture (issue 20). A
        rebuild when the heap doubles keeps this amortized O(1) per request. Rebuilt in place:
        the `--jobs` shard loop holds the list to note the oldest pending request per packet."""
        live = [w for w in self.waiting if not w[2].done]
        heapq.heapify(live)
        self.waiting[:] = live
        self.waiting_room = 2 * len(live) + 1024

    def _release(self, final: bool = False) -> None:
        waiting, done = self.waiting, self.done
        if waiting and not final:
            first = waiting[0]
            if (
                not first[2].done
                and done
                and done[0][0] > first[0]
                and done[0][0] > self.now - self.opts.order_window_ns
            ):
                return  # the usual case while a request is pending: nothing can go out yet
        while waiting and waiting[0][2].done:
            heapq.heappop(waiting)
        if final or not waiting:
            limit = None
        else:
            limit = max(waiting[0][0], self.now - self.opts.order_window_ns)
        if self.undecided and not final:
            held = min(u.first_ts for u in self.undecided.values())
            limit = held if limit is None else min(limit, held)
        emit = self.on_exchange
        st = self.stats
        while done and (limit is None or done[0][0] <= limit):
            ex = heapq.heappop(done)[2]
            st.held -= _exchange_cost(ex)
            emit(ex)

    # -- packets ------------------------------------------------------------------------------
    def feed(self, pkt: Packet) -> None:
        seg = decode_segment(pkt.linktype, pkt.data, self.stats.flows)
        if seg is None:
            return
        ts = pkt.ts_ns
        if ts > self.now:
            self.now = ts
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        flags = seg.flags
        if self.undecided:
            und = self.undecided.get(key)
            if und is not None:
                if not flags & SYN:
                    before = und.nbytes
                    self.stats.held += und.add(seg, key, pkt.no, pkt.ts_ns)
                    if und.stalled:
                        n = und.nbytes - before
                        self.stalled_bytes += n
                        self._stalled(und, bool(n))
                    elif seg.payload and len(und.data) == 2 or und.out_of_patience():
                        self._judge(und)
                    return
                self._decide(und)  # a new connection on the same 4-tuple: settle the old one
        conn = self.conns.get(key)
        if (
            conn is not None
            and conn.kafka
            and not flags & SLOW_FLAGS
            and not seg.cut
            and self.fast
            and not conn.ignored
            and self._fast(conn, key, seg.seq, seg.ack, flags, seg.payload, pkt)
        ):
            return
        if (
            conn is None
            and not flags & SYN
            and (seg.payload or seg.cut)
            and not self._port_decides(seg)
        ):
            und = Undecided(self.next_id, key, pkt.ts_ns)
            self.next_id += self.opts.id_step
            self.undecided[key] = self.undecided[(seg.dst, seg.dport, seg.src, seg.sport)] = und
            st = self.stats
            st.held += und.add(seg, key, pkt.no, pkt.ts_ns)
            if st.held > self.opts.max_buffered:
                self._shed(pkt)
            return
        self._segment(seg, key, conn, pkt)

    def _fast(
        self,
        conn: Connection,
        key: FlowKey,
        seq: int,
        ack: int,
        flags: int,
        payload: bytes | memoryview,
        pkt,  # noqa: ANN001 - a Packet
    ) -> bool:
        """The common case, fused: the next in-order bytes (or a pure ACK) of a confirmed Kafka
        connection with nothing waiting out of order and not closing. Does what `_segment`,
        `HalfStream.segment` and `_deliver` do for such a segment, without their general
        checks, and returns True; returns False, having changed nothing, when the segment is
        anything else (the general path takes it). The framer is called as usual."""
        if key == conn.client_key:
            half, other = conn.c2s, conn.s2c
        else:
            half, other = conn.s2c, conn.c2s
        base = half.base
        if (
            base is None
            or half.heap
            or other.heap
            or (seq - base - half.next) & SEQ_MASK
            or (half.fin_at is not None and other.fin_at is not None)
        ):
            return False
        ts = pkt.ts_ns
        clock = conn.clock = conn.clock + 1
        conn.last_seen = ts
        held = conn.held
        if flags & ACK:
            obase = other.base
            if obase is not None:  # HalfStream.peer_ack
                onxt = other.next
                d = (ack - obase - onxt) & SEQ_MASK
                rel = onxt + (d - (SEQ_MASK + 1) if d >= SEQ_HALF else d)
                if rel > other.acked:
                    other.acked = rel
        half.clock = clock
        n = len(payload)
        if n:  # HalfStream._deliver
            nxt = half.next
            end = half.next = nxt + n
            half.delivered += n
            if n > TAIL_KEPT:
                half.last_chunk = bytes(payload[-TAIL_KEPT:])
                half.last_chunk_at = end - TAIL_KEPT
            else:
                half.last_chunk = bytes(payload)
                half.last_chunk_at = nxt
            half.sink.data(payload, pkt.no, ts)
            cf, sf = conn.cf, conn.sf
            now_held = len(cf.buf) + len(sf.buf)  # no out-of-order data on this path
            st = self.stats
            if now_held != held or conn.cost != held:
                # as `_segment`: no out-of-order segments here, no early frames (Kafka confirmed)
                cost = now_held + MARK_COST * (len(cf.marks) + len(sf.marks))
                conn.held = now_held
                st.buffered += now_held - held
                st.held += cost - conn.cost
                conn.cost = cost
            if st.held > st.held_peak:  # kept <= max_buffered, so this is rare
                if st.held > self.opts.max_buffered:
                    self._shed(pkt)
                if st.held > st.held_peak:
                    st.held_peak = st.held
            if st.buffered > st.buffered_peak:  # after shedding: at most the bound
                st.buffered_peak = st.buffered
        if self.done:
            self._release()
        return True

    def _port_decides(self, seg: Segment) -> bool:
        """`--port` names exactly one side of this segment's connection."""
        ports = self.opts.ports
        return bool(ports) and (seg.dport in ports) != (seg.sport in ports)

    def _judge(self, und: Undecided) -> None:
        """A held connection's bytes changed: decide its roles when they tell; past the first
        hold with the bodies asked too, and when even they cannot tell, hold on (stalled)."""
        mf = self.opts.max_frame
        budget = self.evidence.budget
        verdict = und.verdict(mf, budget)
        if verdict is None and und.out_of_patience():
            verdict = und.verdict(mf, budget, final=True)
            if verdict is None and und.long_first_frame(mf):
                und.stalled = True
                self.stalled_bytes += und.nbytes
                self._stalled(und, False)
                return
        if verdict is not None or und.out_of_patience():
            self._decide(und, verdict)

    def _stalled(self, und: Undecided, grew: bool) -> None:
        """A stalled connection took a packet: the cheap test on what it holds (when it grew);
        over its bound or the engine's, the roles are settled now (the port when nothing tells)."""
        verdict = und.later_verdict(self.opts.max_frame) if grew else None
        if verdict is not None or und.exhausted() or self.stalled_bytes > STALL_BUDGET:
            self._decide(und, verdict)

    def _decide(self, und: Undecided, verdict: bool | None = None) -> None:
        """The roles of a held connection are known (or must be settled now): open it with the
        client the bytes point to (the port only when they cannot tell) and replay its packets."""
        k = und.key
        for key in (k, (k[2], k[3], k[0], k[1])):
            if self.undecided.get(key) is und:
                del self.undecided[key]
        if und.stalled:
            self.stalled_bytes -= und.nbytes
            und.stalled = False
        if verdict is None:
            verdict = und.verdict(self.opts.max_frame, self.evidence.budget, final=True)
        self.stats.held -= und.cost
        und.cost = 0
        first, no, ts = und.held[0]
        if len(self.order) >= self.opts.max_connections:
            self._close_least_recent(_At(no, ts))  # type: ignore[arg-type]
        self._open(first, k, first.flags, und.id, verdict)
        for seg, no, ts in und.held:
            key = (seg.src, seg.sport, seg.dst, seg.dport)
            self._segment(seg, key, self.conns.get(key), _At(no, ts))

    def _segment(self, seg: Segment, key: FlowKey, conn: Connection | None, pkt) -> None:  # noqa: ANN001
        """One TCP segment of a connection whose roles are known (`conn` None: not open yet)."""
        src, sport, dst, dport, seq, ack, flags, payload, cut = (
            seg  # one unpack: cheaper than lookups
        )
        ts = pkt.ts_ns
        if flags & SYN and not flags & ACK and conn is not None and not conn.ignored:
            base = conn.c2s.base
            if key == conn.client_key and base is not None and base != (seq + 1) & SEQ_MASK:
                self._close(conn, pkt)  # port reuse: a new SYN on the same 4-tuple
                conn = None
        if conn is None:
            if not payload and not cut and not flags & SYN:
                # a pure ACK/FIN/RST of a connection already closed (or not yet seen carrying
                # data): nothing to reassemble, and no reason to open a connection for it
                self.stats.stray_packets += 1
                return
            if len(self.order) >= self.opts.max_connections:
                self._close_least_recent(pkt)
            conn = self._open(seg, key, flags)
        if conn.ignored:
            conn.last_seen = ts
            self.stats.non_kafka_bytes += len(payload)
            if flags & (FIN | RST):
                self._forget(conn)
            return
        conn.clock += 1
        conn.last_seen = ts
        from_client = key == conn.client_key
        half, other = (conn.c2s, conn.s2c) if from_client else (conn.s2c, conn.c2s)
        if flags & SYN and half.base is None:
            half.start(seq, True)
            (conn.cf if from_client else conn.sf).synced = True
        held = conn.held
        if flags & ACK:
            other.peer_ack(ack)
            if other.heap:
                other.check_hole(conn.clock, pkt.no, ts, now=bool(payload or cut))
        half.segment(seq, payload, bool(flags & FIN), pkt.no, ts, conn.clock, cut)
        if self.on_segment is not None:
            self.on_segment(conn, from_client, seg, pkt.no)
        cf, sf, c2s, s2c = conn.cf, conn.sf, conn.c2s, conn.s2c
        now_held = len(cf.buf) + len(sf.buf) + c2s.ooo_bytes + s2c.ooo_bytes
        st = self.stats
        if now_held != held or conn.cost != held:
            # _buffers_cost, inline: this runs for most packets of a frame spanning several
            cost = now_held + MARK_COST * (len(cf.marks) + len(sf.marks))
            if c2s.heap or s2c.heap or conn.early:
                cost = _buffers_cost(conn, now_held)
            conn.held = now_held
            st.buffered += now_held - held
            st.held += cost - conn.cost
            conn.cost = cost
        if self.shedding:  # a shed replaying held packets: it records the peaks once done
            pass
        elif st.held > st.held_peak:  # kept <= max_buffered, so this is rare
            if st.held > self.opts.max_buffered:
                self._shed(pkt)
            if st.held > st.held_peak:
                st.held_peak = st.held
        if st.buffered > st.buffered_peak and not self.shedding:  # after shedding: <= the bound
            st.buffered_peak = st.buffered
        if not conn.kafka and not conn.ignored:
            if payload and conn.cf.pdu_bytes + conn.sf.pdu_bytes == 0 and looks_like_tls(payload):
                conn.tls = conn.ignored = True
            elif conn.cf.skipped > DETECTION_BUDGET and not conn.forced:
                conn.ignored = True
        if conn.ignored:
            self.stats.not_kafka(conn.info.client, conn.info.broker, conn.tls)
            self.stats.non_kafka_bytes += conn.c2s.delivered + conn.s2c.delivered
            self._drop_state(conn)
        elif flags & RST or (
            conn.c2s.fin_at is not None
            and conn.s2c.fin_at is not None
            and conn.c2s.finished
            and conn.s2c.finished
        ):
            self._close(conn, pkt)
        if self.done:
            self._release()

    def _open(
        self,
        seg: Segment,
        key: FlowKey,
        flags: int,
        conn_id: int | None = None,
        verdict: bool | None = None,
    ) -> Connection:
        """Open a connection at `seg`; `verdict` (from the bytes) says whether its sender is the
        client. Precedence: SYN, `--port`, the bytes, a well-known Kafka port, the lower port."""
        rkey = (seg.dst, seg.dport, seg.src, seg.sport)
        ports = self.opts.ports
        if flags & SYN:
            client_is_src = not flags & ACK
        elif ports and (seg.dport in ports) != (seg.sport in ports):
            client_is_src = seg.dport in ports
        elif verdict is not None:
            client_is_src = verdict
        elif (seg.dport in WELL_KNOWN_BROKER_PORTS) != (seg.sport in WELL_KNOWN_BROKER_PORTS):
            client_is_src = seg.dport in WELL_KNOWN_BROKER_PORTS
        else:
            client_is_src = seg.dport < seg.sport
        if client_is_src:
            ckey, client, broker = key, (seg.src, seg.sport), (seg.dst, seg.dport)
        else:
            ckey, client, broker = rkey, (seg.dst, seg.dport), (seg.src, seg.sport)
        forced = broker[1] in ports
        if conn_id is None:
            conn_id = self.next_id
            self.next_id += self.opts.id_step
        info = ConnInfo(conn_id, format_endpoint(*client), format_endpoint(*broker))
        conn = Connection(self, info, ckey, forced, bool(flags & SYN))
        self.conns[key] = conn
        self.conns[rkey] = conn
        self.order[info.id] = conn
        self.stats.connections += 1
        if len(self.order) > self.stats.open_peak:
            self.stats.open_peak = len(self.order)
        return conn

    # -- bounds --------------------------------------------------------------------------------
    def _hit(self, limit: str, conn: Connection, pkt: Packet, message: str) -> None:
        """Count an engine-wide bound being hit and report it as a stream event of `conn`."""
        st = self.stats
        st.limit_hits[limit] = st.limit_hits.get(limit, 0) + 1
        code = Code.BUFFER_LIMIT if limit == "max_buffered" else Code.CONNECTION_LIMIT
        st.event_counts[code] = st.event_counts.get(code, 0) + 1
        if len(st.events) < st.max_events:
            st.events.append(
                StreamEvent(conn.info.id, "client", code, conn.cf.stream_offset, pkt.no, message)
            )
        else:
            st.events_dropped += 1

    def _shed(self, pkt: Packet) -> None:
        """Over `max_buffered` (the bytes held and their Python objects, `EngineStats.held`):
        give things up until 3/4 of the bound is left, the cheapest loss first: the completed
        exchanges waiting for their turn are written out (out of start-time order if need be:
        nothing is lost); the buffers of the connections holding the most (`_evict_buffers`);
        connections held without a SYN are decided (their packets become buffers, evicted in
        turn); the requests waiting on the connections with the most waiting are given up
        (`Correlator.shed`), and written out."""
        if self.shedding:  # deciding held connections replays packets, which may come back here
            return
        self.shedding = True
        try:
            self._shed_to(pkt, self.opts.max_buffered * 3 // 4)
        finally:
            self.shedding = False
        st = self.stats  # what the replays of held packets skipped: the peaks after the shed
        st.held_peak = max(st.held_peak, st.held)
        st.buffered_peak = max(st.buffered_peak, st.buffered)

    def _shed_to(self, pkt: Packet, target: int) -> None:
        st = self.stats
        self._flush_done(target)
        self._evict_buffers(pkt, target)
        if st.held > target and self.undecided:
            self._decide_all()
            self._evict_buffers(pkt, target)
        if st.held > target:
            waits = [(_waiting_cost(c.corr), c) for c in self.order.values()]
            waits.sort(key=lambda w: w[0], reverse=True)
            for cost, conn in waits:
                if st.held <= target or not cost:
                    break
                conn.corr.shed()
                self._hit(
                    "max_buffered",
                    conn,
                    pkt,
                    f"{cost} bytes of waiting requests given up: {st.held} bytes held",
                )
                self._flush_done(target)
        if st.held > target and self.evidence.late:
            self.evidence.settle_late(final=True)  # orphans of closed connections
        self._flush_done(target)  # what the evictions completed (a frame a flush delivered)

    def _flush_done(self, target: int) -> None:
        """Write out every completed exchange now if that is what keeps `held` over `target`."""
        st = self.stats
        if st.held > target and self.done:
            st.limit_hits["max_buffered"] = st.limit_hits.get("max_buffered", 0) + 1
            self._release(final=True)

    def _evict_buffers(self, pkt: Packet, target: int) -> None:
        """The connections holding the most buffered give theirs up (holes become gaps, waiting
        data is delivered, partial frames are skipped) until `EngineStats.held` is at `target`;
        one sort per eviction round keeps a flood linear."""
        st = self.stats
        for conn in sorted(
            (c for c in self.order.values() if c.cost), key=lambda c: c.cost, reverse=True
        ):
            if st.held <= target:
                break
            dropped, early = conn.held, len(conn.early)
            for half, framer in ((conn.c2s, conn.cf), (conn.s2c, conn.sf)):
                half.flush(pkt.no, pkt.ts_ns, "buffers evicted: --max-buffered")
                framer.evict("buffers evicted: --max-buffered")
            conn.early.clear()  # broker frames kept until the client side confirms Kafka
            conn.held = (
                len(conn.cf.buf) + len(conn.sf.buf) + conn.c2s.ooo_bytes + conn.s2c.ooo_bytes
            )
            cost = _buffers_cost(conn, conn.held)
            st.held += cost - conn.cost
            conn.cost = cost
            st.buffered -= dropped - conn.held
            self._hit(
                "max_buffered",
                conn,
                pkt,
                f"{dropped} buffered bytes given up"
                + (
                    f" and {early} broker frames kept for an unconfirmed client side"
                    if early
                    else ""
                )
                + f": {st.buffered + dropped} bytes buffered in total",
            )

    def _close_least_recent(self, pkt: Packet) -> None:
        """At `max_connections`: close the least recently active 1/8 of the open connections
        (as if they had ended), so a flood of new connections costs one sort per batch."""
        conns = sorted(self.order.values(), key=lambda c: c.last_seen)
        message = f"closed early: {len(conns)} connections open (--max-connections)"
        for conn in conns[: max(1, len(conns) // 8)]:
            self._hit("max_connections", conn, pkt, message)
            self._close(conn, pkt)

    def _forget(self, conn: Connection) -> None:
        k = conn.client_key
        for key in (k, (k[2], k[3], k[0], k[1])):
            if self.conns.get(key) is conn:
                del self.conns[key]

    def _drop_state(self, conn: Connection) -> None:
        """A connection judged not Kafka: free its buffers, keep a tombstone to ignore its
        packets."""
        conn.c2s.heap.clear()
        conn.s2c.heap.clear()
        conn.c2s.ooo_bytes = conn.s2c.ooo_bytes = 0
        conn.cf.buf = bytearray()
        conn.sf.buf = bytearray()
        conn.cf.marks.clear()
        conn.sf.marks.clear()
        self.stats.buffered -= conn.held
        self.stats.held -= conn.cost
        conn.held = conn.cost = 0

    def _close(self, conn: Connection, pkt: Packet | None) -> None:
        if conn.closed:
            return
        conn.closed = True
        pno, ts = (pkt.no, pkt.ts_ns) if pkt else (0, self.now)
        conn.c2s.flush(pno, ts)
        conn.s2c.flush(pno, ts)
        conn.cf.close()
        conn.sf.close()
        if not conn.kafka and not conn.ignored and conn.early and not conn.c2s.delivered:
            # only the broker's side was captured, and it chains as Kafka responses: they are
            # orphans of requests sent before the capture (the client side never contradicted)
            conn.kafka = True
            for p in conn.early:
                conn.corr.response(p)
            conn.early.clear()
        conn.corr.close(tuple(e.frame for e in conn.sf.events if e.code == Code.GAP))
        self.stats.buffered -= conn.held
        self.stats.held -= conn.cost
        conn.held = conn.cost = 0
        self._forget(conn)
        self.order.pop(conn.info.id, None)
        if conn.ignored:
            return
        if not conn.kafka:
            carried = conn.c2s.delivered + conn.s2c.delivered
            if carried:
                self.stats.not_kafka(conn.info.client, conn.info.broker, conn.tls)
                self.stats.non_kafka_bytes += carried
            else:
                self.stats.empty_connections += 1
            return
        st = self.stats
        st.kafka_connections += 1
        st.client.add(conn.c2s, conn.cf)
        st.broker.add(conn.s2c, conn.sf)
        counts = st.event_counts
        for fr in (conn.cf, conn.sf):
            for code, n in fr.event_counts.items():
                counts[code] = counts.get(code, 0) + n
            st.events_dropped += fr.events_dropped
            room = max(st.max_events - len(st.events), 0)
            st.events.extend(fr.events[:room])
            st.events_dropped += max(len(fr.events) - room, 0)

    # -- live mode -------------------------------------------------------------------------------
    @property
    def pending_count(self) -> int:
        """Requests waiting for a response on the open connections (acks=0 Produce excluded)."""
        return sum(c.corr.count for c in self.order.values())

    @property
    def open_count(self) -> int:
        """Connections open right now."""
        return len(self.order)

    def settle_unanswered(self, older_than_ns: int) -> None:
        """Settle acks=0 Produce requests sent before `older_than_ns` (status ok, no response,
        as at the end of a capture). The correlator holds them until a later response proves
        none is coming, which on a produce-only connection never happens; `expire` leaves them
        alone, so live mode calls this with a short grace period."""
        for conn in self.order.values():
            if conn.corr.unanswered:
                conn.corr.settle_unanswered(older_than_ns)
        self._release()

    def _decide_all(self, older_than_ns: int | None = None) -> None:
        """Settle held connections (all, or those first seen before `older_than_ns`)."""
        for und in {id(u): u for u in self.undecided.values()}.values():
            if older_than_ns is None or und.first_ts < older_than_ns:
                self._decide(und)

    def expire(self, older_than_ns: int) -> None:
        """Give up on requests pending since before `older_than_ns` (live mode)."""
        self._decide_all(older_than_ns)
        for conn in list(self.order.values()):
            conn.corr.expire(older_than_ns)
        if self.evidence.late:
            self.evidence.settle_late(before_ts=older_than_ns)
        self._release()

    def expire_idle(self, older_than_ns: int) -> int:
        """Close connections with no packet since `older_than_ns` (live mode keeps memory flat).
        Returns how many were closed."""
        self._decide_all(older_than_ns)
        idle = [c for c in self.order.values() if c.last_seen < older_than_ns]
        for conn in idle:
            self._close(conn, None)
        stale = [k for k, c in self.conns.items() if c.ignored and c.last_seen < older_than_ns]
        for k in stale:
            del self.conns[k]
        self._release()
        return len(idle)

    def close(self) -> None:
        """End of input: close every connection (in order of appearance) and flush the output."""
        self._decide_all()
        for conn in list(self.order.values()):
            self._close(conn, None)
        self.evidence.settle_late(final=True)
        self._release(final=True)
        refused = self.evidence.budget.refused
        if refused:
            self.stats.limit_hits["layout_search"] = refused


def _discard(_ex: Exchange) -> None:
    pass


def _blank_engine() -> Engine:
    return Engine(_discard)


def _exchange_cost(ex: Exchange) -> int:
    """What a completed exchange costs while it waits for its turn in the output."""
    cost = EXCHANGE_COST
    if ex.request is not None:
        cost += len(ex.request.pdu.data)
    if ex.response is not None:
        cost += len(ex.response.pdu.data)
    return cost


def _buffers_cost(conn: Connection, nbytes: int) -> int:
    """What a connection's `nbytes` buffered bytes cost with their chunks, and its broker frames
    kept until Kafka is confirmed."""
    cf, sf, c2s, s2c = conn.cf, conn.sf, conn.c2s, conn.s2c
    cost = nbytes + MARK_COST * (len(cf.marks) + len(sf.marks))
    cost += CHUNK_COST * (len(c2s.heap) + len(s2c.heap))
    if conn.early:
        cost += sum(len(p.data) + PENDING_COST for p in conn.early)
    return cost


def _waiting_cost(corr: Correlator) -> int:
    """What a connection's waiting messages cost (pending, acks=0, orphan and raw SASL)."""
    total = sum(item[0].cost for q in corr.pending.values() for item in q)
    total += sum(item[0].cost for item in corr.unanswered)
    total += sum(entry[0].cost for entry in corr.orphans)
    return total + sum(m.cost for m in corr.raw_pending)
