"""The filtered pcap's stream map: which bytes of a packet are kept and where they land once
the left-out exchanges' bytes are closed up; the rewritten headers check out."""

from __future__ import annotations

import struct

from kanalyze.export.pcap_rewrite import StreamMap, _checksum, merge, rewrite
from kanalyze.flows import FlowStats, decode_segment


def test_merge_joins_touching_and_overlapping_ranges():
    assert merge([(10, 20), (0, 5), (5, 8), (15, 30), (40, 41)]) == [(0, 8), (10, 30), (40, 41)]


def test_compress_counts_selected_bytes_before_an_offset():
    m = StreamMap([(100, 150), (300, 310)], base=1000)
    assert [m.compress(x) for x in (0, 100, 120, 150, 200, 300, 305, 310, 999)] == [
        0, 0, 20, 50, 50, 50, 55, 60, 60,
    ]  # fmt: skip


def test_pieces_are_the_selected_parts_of_a_packet():
    m = StreamMap([(100, 150), (300, 310)], base=0)
    assert m.pieces(90, 120) == [(100, 120)]
    assert m.pieces(140, 305) == [(140, 150), (300, 305)]
    assert m.pieces(150, 300) == []


def _packet(seq: int, ack: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 9092, seq, ack, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 1, 0x4000, 64, 6, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return b"\xaa" * 12 + b"\x08\x00" + ip + tcp + payload


def test_rewrite_keeps_selected_bytes_and_closes_up_the_numbers():
    mine = StreamMap([(0, 4), (10, 16)], base=5000)  # selected: bytes 0-3 and 10-15
    other = StreamMap([(0, 100), (200, 250)], base=9000)  # the peer's selected bytes
    pkt = _packet(5000 + 2, 9000 + 220, b"abcdefghijklmnopqrst")  # stream bytes 2..22
    out = rewrite(1, pkt, 2, mine, other)
    seg = decode_segment(1, out, FlowStats())
    assert seg is not None
    assert bytes(seg.payload) == b"ab" + b"ijklmn"  # stream bytes 2-3 and 10-15
    assert seg.seq == 5000 + 2  # two selected bytes before offset 2
    assert seg.ack == 9000 + 100 + 20  # 100 + 20 selected peer bytes before offset 220
    ip = out[14:34]
    assert _checksum(ip) == 0  # IPv4 header checksum valid
    tcp_len = len(out) - 34
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 6, tcp_len)
    assert _checksum(pseudo, out[34:]) == 0  # TCP checksum valid
