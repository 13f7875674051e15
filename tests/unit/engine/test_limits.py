"""Engine-wide resource bounds (docs/limits.md): each one holds, is reported as a stream
event with an offset, is counted in `summary`, and keeps the byte accounting whole."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from dissectors.context import DecodeContext, Limits
from dissectors.diagnostics import Code
from dissectors.records import decode_records
from kanalyze.analysis.summary import Summary
from kanalyze.capture import CaptureStats, Packet
from kanalyze.engine import Engine, EngineOptions
from kanalyze.reassembly import ReassemblyLimits
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response, totals


class Recorder:
    """Feeds raw IPv4 packets straight into an engine (no pcap file) and checks the bound
    after every packet."""

    def __init__(self, opts: EngineOptions) -> None:
        self.out: list = []
        self.engine = Engine(self.out.append, opts)
        self.no = 0
        self.max_buffered_seen = 0
        self.max_open_seen = 0

    def feed(self, raw: bytes) -> None:
        self.no += 1
        self.engine.feed(Packet(self.no, 1_700_000_000_000_000_000 + self.no * 1000, 228, raw))
        st = self.engine.stats
        self.max_buffered_seen = max(self.max_buffered_seen, st.buffered)
        self.max_open_seen = max(self.max_open_seen, len(self.engine.order))

    def close(self) -> None:
        self.engine.close()
        stream, parts = totals(self.engine)
        assert stream == parts  # bytes dropped at a bound are accounted for (skipped / gaps)


def _conv(i: int) -> P.Conversation:
    return P.Conversation(client=f"10.1.{i // 250}.{i % 250 + 1}", cport=40000 + i % 20000)


def _summary(engine: Engine) -> dict:
    return Summary().to_json(engine.stats, CaptureStats())


def _buffered_now(engine: Engine) -> int:
    """Recount what the engine's running total should be, from the connections themselves."""
    return sum(
        len(c.cf.buf) + len(c.sf.buf) + c.c2s.ooo_bytes + c.s2c.ooo_bytes
        for c in engine.order.values()
    )


def test_total_buffered_bytes_stay_under_the_bound():
    """Many connections each hold an incomplete frame: the total never passes --max-buffered,
    the largest holders give theirs up, and each eviction is counted and reported."""
    cap = 20_000
    r = Recorder(EngineOptions(max_buffered=cap))
    convs = [_conv(i) for i in range(40)]
    for c in convs:
        for raw in c.handshake():
            r.feed(raw)
        r.feed(c.send(True, apiv_request(1)))
        r.feed(c.send(False, apiv_response(1)))
    for c in convs:  # each sends the first 1000 bytes of a 5000-byte Produce request
        big = P.request_frame(0, 3, 2, "c", b"\xff\xff\x00\x01" + b"x" * 4990)
        r.feed(c.send(True, big[:1000]))
        assert r.engine.stats.buffered == _buffered_now(r.engine)
    assert r.max_buffered_seen <= cap
    st = r.engine.stats
    assert st.limit_hits["max_buffered"] >= 10  # 40 kB offered, 20 kB allowed
    assert st.buffered_peak <= cap
    events = [e for e in st.events if e.code == Code.BUFFER_LIMIT]
    assert events and all(e[3] > 0 for e in events)  # stream offset of the connection
    r.close()
    doc = _summary(r.engine)
    assert doc["limits"]["max_buffered"] == st.limit_hits["max_buffered"]
    assert doc["peaks"]["buffered_bytes"] <= cap
    assert doc["bytes"]["client_to_broker"]["skipped"] >= st.limit_hits["max_buffered"] * 1000


def test_evicted_connection_stays_in_sync():
    """A connection whose partial frame was given up skips the rest of that frame and decodes
    the next one: one lost request, not a lost connection."""
    r = Recorder(EngineOptions(max_buffered=3000))
    c = _conv(0)
    for raw in c.handshake():
        r.feed(raw)
    big = P.request_frame(0, 3, 1, "c", b"\xff\xff\x00\x01" + b"x" * 9000)
    for i in range(0, len(big), 1000):
        r.feed(c.send(True, big[i : i + 1000]))
    r.feed(c.send(True, apiv_request(2)))
    r.feed(c.send(False, apiv_response(2)))
    r.close()
    assert [(e.api_key, e.correlation_id, e.status) for e in r.out] == [(18, 2, "ok")]
    assert r.engine.stats.limit_hits["max_buffered"] == 1
    assert r.engine.stats.client.skipped == len(big)
    assert r.max_buffered_seen <= 3000


def test_out_of_order_data_is_evicted_too():
    """Data waiting behind a hole counts toward --max-buffered: eviction turns the hole into a
    gap, delivers the waiting data and keeps the accounting whole."""
    r = Recorder(EngineOptions(max_buffered=5000))
    convs = [_conv(i) for i in range(4)]
    for c in convs:
        for raw in c.handshake():
            r.feed(raw)
        hole = c.cseq
        frames = b"".join(apiv_request(i) for i in range(1, 200))
        r.feed(c.segment_at(True, hole + 10, frames[10:2010], c.bseq))  # 10 bytes missing
        c.cseq += 2010
    assert r.max_buffered_seen <= 5000
    assert r.engine.stats.limit_hits["max_buffered"] >= 1
    r.close()


def test_connections_over_the_bound_close_the_least_recent():
    cap = 16
    r = Recorder(EngineOptions(max_connections=cap))
    convs = [_conv(i) for i in range(cap + 1)]
    for c in convs:
        for raw in c.handshake():
            r.feed(raw)
        r.feed(c.send(True, apiv_request(1)))
    assert r.max_open_seen <= cap
    st = r.engine.stats
    assert st.limit_hits["max_connections"] == cap // 8  # one batch: the oldest eighth
    assert st.open_peak == cap
    closed = [e for e in st.events if e.code == Code.CONNECTION_LIMIT]
    assert [e.connection for e in closed] == [1, 2]  # the least recently active
    for c in convs[cap // 8 :]:  # the open ones are answered; the closed ones gave up their request
        r.feed(c.send(False, apiv_response(1)))
    r.close()
    statuses = sorted(e.status for e in r.out)
    assert statuses == ["no_response"] * (cap // 8) + ["ok"] * (cap + 1 - cap // 8)
    doc = _summary(r.engine)
    assert doc["limits"]["max_connections"] == cap // 8
    assert doc["peaks"]["open_connections"] == cap


def test_connection_flood_is_linear():
    """N new connections over the bound cost one sort per N/8 of them, not one scan each."""
    r = Recorder(EngineOptions(max_connections=64))
    for i in range(2000):
        c = _conv(i)
        r.feed(c.handshake()[0])
    assert r.max_open_seen <= 64
    assert r.engine.stats.limit_hits["max_connections"] >= 2000 - 64
    r.close()


def test_reassembly_limit_is_told_apart_from_capture_loss():
    r = Recorder(EngineOptions(reassembly=ReassemblyLimits(max_ooo_bytes=1000, max_ooo_segments=8)))
    c = _conv(0)
    for raw in c.handshake():
        r.feed(raw)
    r.feed(c.send(True, apiv_request(1)))
    frames = b"".join(apiv_request(i) for i in range(2, 100))
    base = c.cseq
    for i in range(20, 1500, 100):  # 20 bytes never arrive; the rest waits behind the hole
        r.feed(c.segment_at(True, base + i, frames[i : i + 100], c.bseq))
    r.close()
    st = r.engine.stats
    assert st.client.limit_gaps == 1
    assert st.event_counts.get("buffer_limit") == 1
    (ev,) = [e for e in st.events if e.code == Code.BUFFER_LIMIT]
    assert "--max-ooo" in ev.message and ev.stream_offset > 0
    doc = _summary(r.engine)
    assert doc["limits"]["max_ooo"] == 1
    assert doc["stream_event_counts"]["buffer_limit"] == 1


def test_frame_size_hits_are_counted_even_when_events_are_dropped():
    r = Recorder(EngineOptions(max_frame=64))
    c = _conv(0)
    for raw in c.handshake():
        r.feed(raw)
    r.feed(c.send(True, apiv_request(1)))
    r.feed(c.send(True, P.request_frame(0, 3, 2, "c", b"\xff\xff\x00\x01" + b"x" * 200)))
    r.close()
    doc = _summary(r.engine)
    assert doc["limits"]["max_frame"] == 1
    assert doc["stream_event_counts"]["frame_too_large"] == 1


@pytest.mark.parametrize(("depth", "refused"), [(1, True), (2, False)])
def test_nesting_depth_is_configurable(depth, refused):
    """Limits.max_nesting_depth bounds compressed legacy message sets inside compressed ones."""

    def legacy(attrs: int, value: bytes) -> bytes:
        body = bytes([0, attrs]) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
        msg = struct.pack(">I", zlib.crc32(body)) + body
        return struct.pack(">qi", 0, len(msg)) + msg

    inner = legacy(0, b"v")
    lvl2 = legacy(1, gzip.compress(inner, mtime=0))  # a wrapper holding a plain message
    lvl3 = legacy(1, gzip.compress(lvl2, mtime=0))  # a wrapper holding a wrapper
    ctx = DecodeContext(limits=Limits(max_nesting_depth=depth), strict=True)
    node = decode_records(lvl3, 0, len(lvl3), ctx)
    codes = [str(d.code) for n in node.walk() for d in n.diagnostics]
    assert ("nesting_too_deep" in codes) is refused
