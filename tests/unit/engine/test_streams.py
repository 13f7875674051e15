"""Reassembly, framing and correlation end to end over hand-built TCP conversations."""

from __future__ import annotations

import struct

import pytest

from kanalyze.engine import EngineOptions
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response, run_pcap, totals


def _pairs(exs):
    return [(e.api_key, e.correlation_id, e.status) for e in exs]


def _balanced(session):
    stream, parts = totals(session.engine)
    assert stream == parts
    return stream


def simple(conv, n=3):
    pkts = conv.handshake()
    for i in range(1, n + 1):
        pkts.append(conv.send(True, apiv_request(i)))
        pkts.append(conv.send(False, apiv_response(i)))
    return pkts + conv.close()


def test_simple_conversation(tmp_path):
    exs, s = run_pcap(tmp_path, simple(P.Conversation()))
    assert _pairs(exs) == [(18, i, "ok") for i in (1, 2, 3)]
    assert [(e.request.pdu.last_pkt, e.response.pdu.last_pkt) for e in exs] == [
        (4, 5),
        (6, 7),
        (8, 9),
    ]
    assert exs[0].client_id == "test-client"
    assert exs[0].conn.client == "10.0.0.1:40000" and exs[0].conn.broker == "10.0.0.2:9092"
    assert all(e.latency_ns == 1_000_000 for e in exs)
    assert _balanced(s) > 0
    assert s.engine.stats.client.skipped == 0


def test_many_frames_in_one_segment(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    pkts.append(c.send(True, b"".join(apiv_request(i) for i in range(1, 51))))
    pkts.append(c.send(False, b"".join(apiv_response(i) for i in range(1, 51))))
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(18, i, "ok") for i in range(1, 51)]
    _balanced(s)


def test_one_frame_across_hundreds_of_segments(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    big = P.request_frame(3, 1, 7, "big", b"\x00\x00\x00\x00" + b"x" * 30000)
    for i in range(0, len(big), 100):
        pkts.append(c.send(True, big[i : i + 100]))
    pkts.append(c.send(False, P.response_frame(7, b"\0" * 12)))
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(3, 7, "ok")]
    assert exs[0].request.pdu.first_pkt == 4
    assert exs[0].request.pdu.last_pkt == 4 + (len(big) + 99) // 100 - 1
    assert len(exs[0].request.pdu.data) == len(big) - 4
    _balanced(s)


def test_out_of_order_and_retransmission(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    frames = b"".join(apiv_request(i) for i in range(1, 4))
    segs = [c.send(True, frames[i : i + 20]) for i in range(0, len(frames), 20)]
    segs[1], segs[2] = segs[2], segs[1]  # reorder
    segs.insert(4, segs[3])  # exact duplicate
    pkts += segs
    pkts += [c.send(False, apiv_response(i)) for i in range(1, 4)]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(18, i, "ok") for i in (1, 2, 3)]
    st = s.engine.stats.client
    assert st.retransmitted == 15 and st.gaps == 0 and st.overlap_conflicts == 0
    _balanced(s)


def test_overlap_with_different_bytes_keeps_first(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    req = apiv_request(1, "aaaa")
    start = c.cseq
    pkts.append(c.send(True, req))
    forged = req.replace(b"aaaa", b"bbbb")
    pkts.append(c.segment_at(True, start, forged, c.bseq))
    pkts.append(c.send(False, apiv_response(1)))
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert exs[0].client_id == "aaaa"
    assert s.engine.stats.client.overlap_conflicts == 1
    _balanced(s)


def test_gap_inside_a_frame_keeps_the_rest(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    r1 = P.request_frame(3, 1, 1, "c", b"\x00\x00\x00\x00" + b"y" * 200)
    pkts.append(c.send(True, r1[:50]))
    c.send(True, r1[50:120])  # lost: advances the sequence, never captured
    pkts.append(c.send(True, r1[120:]))
    pkts.append(c.send(True, apiv_request(2)))
    pkts.append(c.send(False, apiv_response(2)))  # acks past the hole
    pkts += [c.send(False, b"", P.ACK) for _ in range(20)]  # patience runs out
    exs, s = run_pcap(tmp_path, pkts + c.close())
    by_corr = {e.correlation_id: e for e in exs}
    assert by_corr[2].status == "ok"
    assert by_corr[1].status == "no_response"
    assert by_corr[1].request.pdu.missing == len(r1) - 50
    assert any(d.code == "truncated" for d in by_corr[1].request.diagnostics)
    st = s.engine.stats.client
    assert st.gaps == 70 and st.gap_count == 1
    _balanced(s)


def test_gap_between_frames_resyncs(tmp_path):
    c = P.Conversation()
    pkts = c.handshake()
    pkts.append(c.send(True, apiv_request(1)))
    pkts.append(c.send(False, apiv_response(1)))
    lost = apiv_request(2)
    c.send(True, lost[:10])  # lost: the head of request 2
    pkts.append(c.send(True, lost[10:] + apiv_request(3)))
    pkts.append(c.send(False, apiv_response(2) + apiv_response(3)))
    pkts += [c.send(False, b"", P.ACK) for _ in range(20)]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert (18, 1, "ok") in _pairs(exs)
    assert (18, 3, "ok") in _pairs(exs)
    assert s.engine.stats.client.skipped == len(lost) - 10
    # its request's head was lost; the requests around it (1 and 3, ApiVersions v0) tell
    assert (18, 2, "request_missing") in _pairs(exs)
    orphan = next(e for e in exs if e.status == "request_missing")
    assert orphan.inferred is not None and orphan.inferred["confidence"] == "high"
    assert s.engine.stats.broker.skipped == 0
    _balanced(s)


def test_mid_stream_start(tmp_path):
    c = P.Conversation(cport=51000)
    c.handshake()  # not captured
    stream = b"".join(apiv_request(i) for i in range(1, 6))
    cut = len(apiv_request(1)) + 5  # start inside request 2
    c.send(True, stream[:cut])
    pkts = [c.send(True, stream[cut:])]
    pkts.append(c.send(False, b"".join(apiv_response(i) for i in range(1, 6))))
    exs, s = run_pcap(tmp_path, pkts)
    # responses 1 and 2 lead, by their sizes, to response 3 that a seen request awaits:
    # they are kept as request_missing rather than skipped
    assert _pairs(exs) == [(18, i, "ok") for i in (3, 4, 5)] + [
        (18, 1, "request_missing"),  # inferred from the later ApiVersions requests
        (18, 2, "request_missing"),
    ]
    assert s.engine.stats.client.skipped == len(apiv_request(2)) - 5
    assert s.engine.stats.broker.skipped == 0
    _balanced(s)


def test_port_reuse_is_a_new_connection(tmp_path):
    c1 = P.Conversation(cseq=100)
    c2 = P.Conversation(cseq=900000)
    pkts = simple(c1, 1) + simple(c2, 1)
    exs, _ = run_pcap(tmp_path, pkts)
    assert [e.conn.id for e in exs] == [1, 2]


def test_rst_gives_no_response(tmp_path):
    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(1)), c.send(False, b"", P.RST | P.ACK)]
    exs, _ = run_pcap(tmp_path, pkts)
    assert _pairs(exs) == [(18, 1, "no_response")]


def test_acks_zero_produce_needs_no_response(tmp_path):
    c = P.Conversation()
    body = (
        b"\xff\xff" + struct.pack("!hi", 0, 1000) + b"\x00\x00\x00\x00"
    )  # v3: txn id null, acks 0
    pkts = c.handshake() + [
        c.send(True, P.request_frame(0, 3, 1, "p", body)),
        c.send(True, apiv_request(2)),
        c.send(False, apiv_response(2)),
    ]
    exs, _ = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(0, 1, "ok"), (18, 2, "ok")]
    assert exs[0].acks == 0 and exs[0].response is None


def test_duplicate_correlation_id_flagged(tmp_path):
    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(1)), c.send(True, apiv_request(1))]
    pkts += [c.send(False, apiv_response(1)), c.send(False, apiv_response(1))]
    exs, _ = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(18, 1, "ok"), (18, 1, "ok")]
    assert [e.response.pdu.last_pkt for e in exs] == [6, 7]
    assert any(d.code == "duplicate_correlation_id" for d in exs[1].request.diagnostics)


def test_response_without_request(tmp_path):
    c = P.Conversation()
    pkts = c.handshake() + [
        c.send(True, apiv_request(1)),
        c.send(False, apiv_response(1)),
        c.send(False, apiv_response(99)),
    ]
    exs, _ = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(18, 1, "ok"), (18, 99, "request_missing")]
    assert exs[1].inferred == {
        "from": "request 1 (ApiVersions v0) before it on this connection",
        "confidence": "medium",
    }


def test_not_kafka_is_ignored(tmp_path):
    c = P.Conversation(bport=8080)
    pkts = c.handshake() + [
        c.send(True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        c.send(False, b"HTTP/1.1 200 OK\r\n\r\n"),
    ]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert exs == []
    assert s.engine.stats.non_kafka_connections == 1
    assert s.engine.stats.non_kafka_bytes > 0


def test_kafka_on_any_port_and_forced_port(tmp_path):
    exs, _ = run_pcap(tmp_path, simple(P.Conversation(bport=31337), 2))
    assert _pairs(exs) == [(18, 1, "ok"), (18, 2, "ok")]
    # mid-stream, both ports ephemeral: --port says which side is the broker
    c = P.Conversation(cport=50000, bport=50001)
    c.handshake()
    pkts = [c.send(True, apiv_request(1)), c.send(False, apiv_response(1))]
    exs, _ = run_pcap(tmp_path, pkts, opts=EngineOptions(ports=frozenset({50001})), name="f.pcap")
    assert _pairs(exs) == [(18, 1, "ok")]
    assert exs[0].conn.broker.endswith(":50001")


def test_two_gigabyte_length_prefix(tmp_path):
    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(1)), c.send(False, apiv_response(1))]
    pkts.append(c.send(True, b"\x7f\xff\xff\xf0" + b"\x00" * 50))
    pkts += [c.send(True, apiv_request(2)), c.send(False, apiv_response(2))]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert _pairs(exs) == [(18, 1, "ok"), (18, 2, "ok")]
    assert s.engine.stats.client.skipped == 54
    _balanced(s)


def test_sequence_wraparound(tmp_path):
    c = P.Conversation(cseq=0xFFFFFFF0, bseq=0xFFFFFF00)
    exs, s = run_pcap(tmp_path, simple(c, 5))
    assert _pairs(exs) == [(18, i, "ok") for i in range(1, 6)]
    _balanced(s)


def _wrap(kind, ip):
    return {
        "eth": (1, lambda: P.ethernet(ip)),
        "vlan": (1, lambda: P.ethernet(ip, (10,))),
        "qinq": (1, lambda: P.ethernet(ip, (10, 20))),
        "sll": (113, lambda: P.sll(ip)),
        "sll2": (276, lambda: P.sll2(ip)),
        "null_le": (0, lambda: P.null_loop(ip, "little")),
        "null_be": (0, lambda: P.null_loop(ip, "big")),
        "loop": (108, lambda: P.null_loop(ip, "big")),
        "raw": (101, lambda: ip),
        "raw4_6": (229 if ip[0] >> 4 == 6 else 228, lambda: ip),
    }[kind]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize(
    "kind", ["eth", "vlan", "qinq", "sll", "sll2", "null_le", "null_be", "loop", "raw", "raw4_6"]
)
def test_link_types(tmp_path, kind, v6):
    conv = P.Conversation(client="fd00::1", broker="fd00::2", v6=True) if v6 else P.Conversation()
    ips = simple(conv, 2)
    linktype = _wrap(kind, ips[0])[0]
    pkts = [_wrap(kind, ip)[1]() for ip in ips]
    exs, _ = run_pcap(tmp_path, pkts, linktype=linktype)
    assert _pairs(exs) == [(18, 1, "ok"), (18, 2, "ok")]
    if v6:
        assert exs[0].conn.broker == "[fd00::2]:9092"


def test_unsupported_link_type_is_counted(tmp_path):
    exs, s = run_pcap(tmp_path, simple(P.Conversation(), 1), linktype=147)
    assert exs == []
    assert s.engine.stats.flows.unsupported_linktypes == {147: 7}


def test_output_is_ordered_by_start_time(tmp_path):
    a, b = P.Conversation(cport=1111), P.Conversation(cport=2222)
    pkts = a.handshake() + b.handshake()
    pkts += [
        a.send(True, apiv_request(1)),
        b.send(True, apiv_request(1)),
        b.send(False, apiv_response(1)),
        a.send(False, apiv_response(1)),
    ]
    exs, _ = run_pcap(tmp_path, pkts + a.close() + b.close())
    assert [e.conn.client for e in exs] == ["10.0.0.1:1111", "10.0.0.1:2222"]


def test_idle_connections_are_expired(tmp_path):
    from kanalyze.capture import read_captures
    from kanalyze.engine import Engine

    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(1))]
    f = tmp_path / "idle.pcap"
    f.write_bytes(P.pcap([(100.0 + i, p) for i, p in enumerate(pkts)], 101))
    out = []
    eng = Engine(out.append)
    for pkt in read_captures([str(f)]):
        eng.feed(pkt)
    assert out == [] and len(eng.order) == 1
    assert eng.expire_idle(10**9 * 1000) == 1
    assert [(e.correlation_id, e.status) for e in out] == [(1, "no_response")]
    assert not eng.order and not eng.conns


def test_final_ack_after_close_opens_nothing(tmp_path):
    c = P.Conversation()
    pkts = simple(c, 1) + [c.send(True, b"", P.ACK)]  # the last ACK of the FIN handshake
    exs, s = run_pcap(tmp_path, pkts)
    assert len(exs) == 1
    st = s.engine.stats
    assert (st.connections, st.kafka_connections, st.empty_connections, st.stray_packets) == (
        1,
        1,
        0,
        1,
    )
    assert exs[0].conn.id == 1


def test_pending_limit_evicts_oldest_first(tmp_path):
    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(i)) for i in range(1, 8)]
    pkts.append(c.send(False, apiv_response(7)))
    exs, _ = run_pcap(tmp_path, pkts + c.close(), opts=EngineOptions(max_pending=3))
    got = {e.correlation_id: e for e in exs}
    # 1..4 were given up in arrival order as 5, 6 and 7 arrived; 7 was answered
    assert [(e.correlation_id, e.status) for e in exs][:4] == [
        (i, "no_response") for i in (1, 2, 3, 4)
    ]
    assert all(
        any(d.code == "pending_limit" for d in got[i].request.diagnostics) for i in (1, 2, 3, 4)
    )
    assert got[7].status == "ok"
    assert got[5].status == got[6].status == "no_response"


def test_expire_settles_acks_zero_produce(tmp_path):
    from kanalyze.capture import read_captures
    from kanalyze.engine import Engine

    c = P.Conversation()
    body = b"\xff\xff" + struct.pack("!hi", 0, 1000) + b"\x00\x00\x00\x00"
    pkts = c.handshake() + [c.send(True, P.request_frame(0, 3, i, "p", body)) for i in (1, 2)]
    f = tmp_path / "a0.pcap"
    f.write_bytes(P.pcap([(100.0 + i, p) for i, p in enumerate(pkts)], 101))
    out = []
    eng = Engine(out.append)
    for pkt in read_captures([str(f)]):
        eng.feed(pkt)
    assert out == []  # held: a later response could still prove the broker answered
    eng.expire(10**9 * 1000)
    assert [(e.correlation_id, e.status, e.acks) for e in out] == [(1, "ok", 0), (2, "ok", 0)]


def test_request_listed_after_its_answer_is_reassembled_and_paired(tmp_path):
    """Request 1's packet is listed after request 2's and after the broker's answer to 1
    (which acknowledges it): within the reorder patience the hole is filled late, no gap, and
    both requests are paired with their answers (1's answer waited as an orphan)."""
    c = P.Conversation()
    pkts = c.handshake()
    p1 = c.send(True, apiv_request(1))
    p2 = c.send(True, apiv_request(2))
    answer = c.send(False, apiv_response(1))
    pkts += [p2, answer, p1, c.send(False, apiv_response(2))]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    assert sorted(_pairs(exs)) == [(18, 1, "ok"), (18, 2, "ok")]
    assert s.engine.stats.client.gaps == 0
    by_corr = {e.correlation_id: e for e in exs}
    assert by_corr[1].request.pdu.last_pkt == 6 and by_corr[1].response.pdu.last_pkt == 5
    # timestamps here follow the listing (the answer's is earlier): no latency, never negative
    assert by_corr[1].latency_ns is None
    assert [d.code for d in by_corr[1].response.diagnostics] == ["timestamp_order"]
    _balanced(s)


def test_a_lost_request_still_becomes_a_gap_when_the_broker_answers_past_it(tmp_path):
    """The reorder patience is short: when the request never comes, the hole is given up 4
    packets after the broker answered past it, and the next request keeps its own packet."""
    c = P.Conversation()
    pkts = c.handshake()
    c.send(True, apiv_request(1))  # lost
    pkts.append(c.send(True, apiv_request(2)))
    pkts.append(c.send(False, apiv_response(1)))
    pkts.append(c.send(False, apiv_response(2)))
    pkts += [c.send(False, b"", P.ACK) for _ in range(5)]
    exs, s = run_pcap(tmp_path, pkts + c.close())
    by_corr = {e.correlation_id: e for e in exs}
    assert by_corr[2].status == "ok" and by_corr[2].request.pdu.last_pkt == 4
    assert by_corr[1].status == "request_missing"
    assert s.engine.stats.client.gap_count == 1
    _balanced(s)
