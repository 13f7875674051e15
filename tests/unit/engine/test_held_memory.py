"""What the engine holds, charged at its real Python cost (issue 20, docs/limits.md "Worst-case
memory"): `EngineStats.held` counts buffered bytes with their chunks, waiting requests, exchanges
waiting for their turn and undecided connections' packets; --max-buffered bounds it, and it
returns to 0 when the input ends. The costs are measured here with tracemalloc, so a change that
makes a connection or a waiting request dearer fails a test instead of silently loosening the
bound."""

from __future__ import annotations

import gc
import tracemalloc

from dissectors.diagnostics import Code
from kanalyze.capture import Packet
from kanalyze.connection import HELD_PACKET_COST, UNDECIDED_COST
from kanalyze.engine import (
    CHUNK_COST,
    EXCHANGE_COST,
    MARK_COST,
    PENDING_COST,
    Engine,
    EngineOptions,
)
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response, totals

T0 = 1_700_000_000_000_000_000


class Feeder:
    """Raw IPv4 packets into an engine; checks the held bound after every packet."""

    def __init__(self, opts: EngineOptions | None = None) -> None:
        self.out: list = []
        self.engine = Engine(self.out.append, opts or EngineOptions())
        self.no = 0
        self.max_held = 0

    def feed(self, raw: bytes) -> None:
        self.no += 1
        self.engine.feed(Packet(self.no, T0 + self.no * 1000, 228, raw))
        self.max_held = max(self.max_held, self.engine.stats.held)

    def close(self) -> None:
        self.engine.close()
        stream, parts = totals(self.engine)
        assert stream == parts
        st = self.engine.stats
        assert st.held == 0 and st.buffered == 0  # every charge was given back


def _conv(i: int) -> P.Conversation:
    return P.Conversation(client=f"10.1.{i // 250}.{i % 250 + 1}", cport=40000 + i % 20000)


def _traced_per(n: int, build) -> float:  # noqa: ANN001
    """Bytes traced per item while `build()` keeps its result alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept is not None
    return (after - before) / n


def test_an_idle_connection_costs_under_3_2_kb():
    """Was 6.6 KB (five empty deques per correlator, 760 bytes each): a SYN flood is bounded
    by --max-connections x this (docs/limits.md)."""
    n = 2000
    pkts = [_conv(i).handshake()[0] for i in range(n)]

    def build() -> Engine:
        f = Feeder()
        for raw in pkts:
            f.feed(raw)
        assert len(f.engine.order) == n
        return f.engine

    per = _traced_per(n, build)
    assert per < 3200, per


def test_a_waiting_request_costs_what_it_is_charged():
    """PENDING_COST (plus the frame) covers what a request waiting for its response holds."""
    n = 2000
    convs = [_conv(i) for i in range(n)]
    syns = [c.handshake()[0] for c in convs]
    reqs = [c.send(True, apiv_request(7)) for c in convs]

    def idle() -> Engine:
        f = Feeder()
        for raw in syns:
            f.feed(raw)
        return f.engine

    def waiting() -> Engine:
        f = Feeder()
        for raw in syns:
            f.feed(raw)
        for raw in reqs:
            f.feed(raw)
        assert f.engine.pending_count == n
        frame = len(apiv_request(7)) - 4
        assert f.engine.stats.held == n * (PENDING_COST + frame)
        return f.engine

    per = _traced_per(n, waiting) - _traced_per(n, idle)
    assert per < PENDING_COST + len(apiv_request(7)), per


def test_a_frame_one_packet_carried_holds_one_int_per_stamp():
    """Its first and last packet numbers and timestamps are one object each. Compiled (mypyc)
    the framer boxed each int field anew: two more ints (72 bytes) held per waiting request,
    and the test above failed on that build only (1,481 bytes measured, 1,429 allowed)."""
    f = Feeder()
    c = _conv(0)
    for raw in c.handshake():
        f.feed(raw)
    first, second = apiv_request(1), apiv_request(2)
    f.feed(c.send(True, first))  # a whole frame in one chunk
    f.feed(c.send(True, first[:10]))  # a frame in two packets, then one in the second's tail
    f.feed(c.send(True, first[10:] + second))
    pdus = [msg.pdu for _t, _seq, msg in sorted(f.engine.waiting)]
    assert len(pdus) == 3
    for pdu in (pdus[0], pdus[2]):
        assert pdu.first_pkt == pdu.last_pkt and pdu.first_ts == pdu.last_ts
        assert pdu.first_ts is pdu.last_ts and pdu.first_pkt is pdu.last_pkt
    assert pdus[1].first_pkt < pdus[1].last_pkt  # two packets: two stamps
    f.close()


def test_exchanges_waiting_for_their_turn_are_charged_and_shed():
    """One request never answered holds every later exchange back (the order window): they are
    charged, and over --max-buffered written out early instead of piling up."""
    cap = 200_000
    f = Feeder(EngineOptions(max_buffered=cap))
    c = _conv(0)
    for raw in c.handshake():
        f.feed(raw)
    f.feed(c.send(True, apiv_request(1)))  # never answered
    for corr in range(2, 400):
        f.feed(c.send(True, apiv_request(corr) + b""))
        f.feed(c.send(False, apiv_response(corr)))
    st = f.engine.stats
    assert f.max_held <= cap and st.held_peak <= cap
    assert st.limit_hits["max_buffered"] >= 1
    assert len(f.out) > 300  # written out before the end, out of start-time order if need be
    assert len(f.engine.done) * (EXCHANGE_COST + 20) <= cap
    f.close()
    assert len(f.out) == 399


def test_the_pending_heap_drops_answered_requests():
    """Regression (issue 20): behind one request never answered, the engine-wide pending heap
    kept every later request, frame and all, until its connection closed."""
    f = Feeder()
    c = _conv(0)
    for raw in c.handshake():
        f.feed(raw)
    f.feed(c.send(True, apiv_request(1)))
    for corr in range(2, 5000):
        f.feed(c.send(True, apiv_request(corr)))
        f.feed(c.send(False, apiv_response(corr)))
    assert len(f.engine.waiting) < 2100
    f.close()


def test_waiting_requests_over_the_bound_are_given_up():
    """Requests never answered are charged: over --max-buffered the connections waiting on the
    most give theirs up (no_response, pending_limit naming --max-buffered)."""
    cap = 100_000
    f = Feeder(EngineOptions(max_buffered=cap))
    for i in range(10):
        c = _conv(i)
        for raw in c.handshake():
            f.feed(raw)
        for corr in range(1, 30):
            f.feed(c.send(True, apiv_request(corr)))
    st = f.engine.stats
    assert f.max_held <= cap
    assert st.limit_hits["max_buffered"] >= 1
    given_up = [
        e for e in f.out
        if e.status == "no_response"
        and any("--max-buffered" in d.message for d in e.request.diagnostics)
    ]
    assert given_up and all(
        d.code == Code.PENDING_LIMIT for e in given_up for d in e.request.diagnostics
    )
    f.close()


def test_tiny_segments_are_charged_per_chunk():
    """A partial frame sent a byte at a time: few bytes, a mark each (~172 bytes of ints and a
    tuple). Charged, so --max-buffered evicts it."""
    f = Feeder()
    c = _conv(0)
    for raw in c.handshake():
        f.feed(raw)
    frame = (1 << 20).to_bytes(4, "big") + apiv_request(1)[4:] + b"x" * 500
    for b in frame:
        f.feed(c.send(True, bytes([b])))
    st = f.engine.stats
    assert st.buffered == len(frame)
    assert st.held >= len(frame) * (1 + MARK_COST)

    g = Feeder(EngineOptions(max_buffered=50_000))
    c = _conv(0)
    for raw in c.handshake():
        g.feed(raw)
    for b in frame:
        g.feed(c.send(True, bytes([b])))
    assert g.max_held <= 50_000
    assert g.engine.stats.limit_hits["max_buffered"] >= 1
    g.close()
    f.close()


def test_out_of_order_segments_are_charged_per_chunk():
    f = Feeder()
    c = _conv(0)
    for raw in c.handshake():
        f.feed(raw)
    base = c.cseq
    for k in range(1, 11):  # a hole at the start: ten segments wait behind it
        f.feed(c.segment_at(True, base + 10 * k, b"y" * 10, c.bseq))
    assert f.engine.stats.held == 100 + 10 * CHUNK_COST
    f.close()


def test_undecided_connections_are_charged_and_shed():
    """Connections seen without their SYN hold copies of their packets until their roles are
    known: charged, and over --max-buffered decided (then bounded like any connection)."""
    req = apiv_request(1)
    f = Feeder()
    for i in range(50):
        f.feed(_conv(i).send(True, req))
    assert len(f.engine.undecided) == 100  # both keys of each
    assert f.engine.stats.held == 50 * (UNDECIDED_COST + HELD_PACKET_COST + 2 * len(req))

    cap = 20_000
    g = Feeder(EngineOptions(max_buffered=cap))
    for i in range(50):
        g.feed(_conv(i).send(True, req))
    assert g.max_held <= cap + UNDECIDED_COST + HELD_PACKET_COST + 2 * len(req)
    assert len(g.engine.undecided) < 100
    g.close()
    f.close()


def test_frames_moved_out_by_hold_are_not_charged_twice():
    """`Engine.hold` (the TUI spills frames there) may replace a held exchange's frames: what is
    charged when the exchange is held is what is given back when it is written out."""

    def spill(ex) -> None:  # noqa: ANN001
        for m in (ex.request, ex.response):
            if m is not None:
                m.pdu = m.pdu._replace(data=b"")

    out: list = []
    eng = Engine(out.append, EngineOptions(), hold=spill)
    c = _conv(0)
    pkts = c.handshake() + [c.send(True, apiv_request(1))]  # never answered: holds the rest
    for corr in range(2, 50):
        pkts += [c.send(True, apiv_request(corr)), c.send(False, apiv_response(corr))]
    for no, raw in enumerate(pkts, 1):
        eng.feed(Packet(no, T0 + no * 1000, 228, raw))
        assert eng.stats.held >= 0
    assert eng.stats.held < 49 * EXCHANGE_COST + 2 * PENDING_COST  # frames not counted
    eng.close()
    assert eng.stats.held == 0 and len(out) == 49


def test_queues_not_made_yet_survive_pickling():
    """Spark streaming pickles engines between micro-batches: a correlator's stand-in for a
    queue not made yet must come back as the stand-in (else its first use raises)."""
    import pickle

    from kanalyze.correlation import _EMPTY, ConnInfo, Correlator

    corr = pickle.loads(pickle.dumps(Correlator(ConnInfo(1, "a", "b"), print, print)))
    assert corr.raw_pending is _EMPTY and corr.unanswered is _EMPTY and corr.orphans is _EMPTY
