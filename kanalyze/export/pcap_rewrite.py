"""Packets of a filtered pcap rewritten so each selected connection reads as one contiguous
stream of exactly the selected frames.

Leaving out the exchanges in between would leave holes in the TCP sequence space, and a
reader that reassembles out-of-order data (tshark with tcp.reassemble_out_of_order, kanalyze
itself) waits at the first hole for bytes that never come. So each kept packet keeps only the
bytes of selected frames, its sequence number counts only selected bytes before it, its
acknowledgement number likewise for the other direction, and the IP length and the IPv4 and
TCP checksums are recomputed. Link headers, addresses, ports, times and TCP options stay.
A packet whose headers cannot be rewritten (IPv6 extension headers) is copied as it is.
"""

from __future__ import annotations

import bisect
import struct

from kanalyze.flows import network_offset

MASK = 0xFFFFFFFF
HALF = 0x80000000

Key = tuple[int, bool]  # (connection id, from client)


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


class StreamMap:
    """One direction's selected byte ranges; old stream offset → new (selected bytes before)."""

    __slots__ = ("base", "before", "ranges", "starts")

    def __init__(self, ranges: list[tuple[int, int]], base: int | None) -> None:
        self.ranges = merge(ranges)
        self.starts = [lo for lo, _hi in self.ranges]
        self.before = [0]
        for lo, hi in self.ranges:
            self.before.append(self.before[-1] + hi - lo)
        self.base = base

    def compress(self, x: int) -> int:
        """How many selected bytes lie before stream offset x."""
        i = bisect.bisect_right(self.starts, x) - 1
        if i < 0:
            return 0
        lo, hi = self.ranges[i]
        return self.before[i] + min(x, hi) - lo

    def pieces(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of [lo, hi) that are selected."""
        out = []
        i = max(0, bisect.bisect_right(self.starts, lo) - 1)
        while i < len(self.ranges) and self.ranges[i][0] < hi:
            a, b = self.ranges[i]
            a, b = max(a, lo), min(b, hi)
            if a < b:
                out.append((a, b))
            i += 1
        return out


def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _checksum(*parts: bytes) -> int:
    total = 0
    for p in parts:
        total += _sum16(p)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def rewrite(
    linktype: int, buf: bytes, payload_lo: int, mine: StreamMap, other: StreamMap | None
) -> bytes:
    """`buf` (a packet carrying stream bytes [payload_lo, ...)) with only its selected bytes,
    and sequence/acknowledgement numbers in the compressed streams."""
    net = network_offset(linktype, buf)
    if net is None or mine.base is None:
        return buf
    pos, version = net
    if version == 4:
        ihl = (buf[pos] & 0x0F) * 4
        total = struct.unpack_from("!H", buf, pos + 2)[0]
        tpos = pos + ihl
        end = pos + total if total else len(buf)
    else:
        if buf[pos + 6] != 6:  # extension headers: leave the packet alone
            return buf
        tpos = pos + 40
        plen = struct.unpack_from("!H", buf, pos + 4)[0]
        end = tpos + plen if plen else len(buf)
    end = min(end, len(buf))
    doff = (buf[tpos + 12] >> 4) * 4
    ppos = tpos + doff
    payload = bytes(buf[ppos:end])
    lo, hi = payload_lo, payload_lo + len(payload)
    kept = b"".join(payload[a - lo : b - lo] for a, b in mine.pieces(lo, hi))
    first = mine.pieces(lo, hi)
    start = first[0][0] if first else lo
    seq = (mine.base + mine.compress(start)) & MASK
    tcp = bytearray(buf[tpos:ppos])
    struct.pack_into("!I", tcp, 4, seq)
    if other is not None and other.base is not None:
        ack = struct.unpack_from("!I", tcp, 8)[0]
        d = (ack - other.base) & MASK
        rel = d - (MASK + 1) if d >= HALF else d
        struct.pack_into("!I", tcp, 8, (other.base + other.compress(rel)) & MASK)
    struct.pack_into("!H", tcp, 16, 0)
    tcp_len = len(tcp) + len(kept)
    ip = bytearray(buf[pos:tpos])
    if version == 4:
        struct.pack_into("!H", ip, 2, len(ip) + tcp_len)
        struct.pack_into("!H", ip, 10, 0)
        struct.pack_into("!H", ip, 10, _checksum(bytes(ip)))
        pseudo = bytes(ip[12:20]) + struct.pack("!BBH", 0, 6, tcp_len)
    else:
        struct.pack_into("!H", ip, 4, tcp_len)
        pseudo = bytes(ip[8:40]) + struct.pack("!IxxxB", tcp_len, 6)
    struct.pack_into("!H", tcp, 16, _checksum(pseudo, bytes(tcp), kept))
    return bytes(buf[:pos]) + bytes(ip) + bytes(tcp) + kept
