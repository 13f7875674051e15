"""Link, network and transport layers: a captured packet becomes a TCP segment.

Supported link types: Ethernet (with any number of 802.1Q / 802.1ad / QinQ
tags), Linux cooked SLL and SLL2, BSD loopback NULL (either byte order) and
LOOP, raw IPv4/IPv6. Anything else is counted, not guessed at.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

ETHERNET, NULL, RAW, RAW_BSD, RAW_OPENBSD, LOOP, SLL, IPV4, IPV6, SLL2 = (
    1,
    0,
    101,
    12,
    14,
    108,
    113,
    228,
    229,
    276,
)
SUPPORTED_LINKTYPES = {
    ETHERNET: "Ethernet",
    NULL: "BSD loopback (NULL)",
    LOOP: "OpenBSD loopback (LOOP)",
    RAW: "raw IP",
    RAW_BSD: "raw IP",
    RAW_OPENBSD: "raw IP",
    SLL: "Linux cooked (SLL)",
    SLL2: "Linux cooked v2 (SLL2)",
    IPV4: "raw IPv4",
    IPV6: "raw IPv6",
}
VLAN_TYPES = (0x8100, 0x88A8, 0x9100, 0x9200)
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
NULL_IPV6 = (24, 28, 30)
IPPROTO_TCP, IPPROTO_FRAGMENT, IPPROTO_AH = 6, 44, 51
IPV6_EXT = (0, 43, 60, IPPROTO_AH)  # hop-by-hop, routing, destination options, AH

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10

_H = struct.Struct("!H")
_LEN_FRAG = struct.Struct("!H2xH")  # IPv4 total length and flags/fragment offset
_TCP = struct.Struct("!HHIIBB")
# builds a Segment at C speed (a NamedTuple's own __new__ is a Python function)
_new = tuple.__new__


class Segment(NamedTuple):
    """A TCP segment with its addresses (raw bytes: 4 for IPv4, 16 for IPv6).

    Immutable; a NamedTuple rather than a frozen dataclass because one is built per packet
    and a tuple is built at C speed (a frozen dataclass's `__init__` is 5x slower)."""

    src: bytes
    sport: int
    dst: bytes
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes | memoryview  # a view into a capture block with `views`
    cut: int = 0  # payload bytes the IP length announces but the capture did not keep (snaplen)


@dataclass(slots=True)
class FlowStats:
    """Packets that did not become TCP segments, by reason."""

    tcp: int = 0
    # packets whose TCP payload was cut by the capture's snaplen, and the longest such packet
    # as captured (the snaplen in effect)
    cut_packets: int = 0
    cut_bytes: int = 0
    snaplen: int = 0
    not_ip: int = 0
    not_tcp: int = 0
    fragments: int = 0
    malformed: int = 0
    unsupported_linktypes: dict[int, int] = field(default_factory=dict)


def format_endpoint(ip: bytes, port: int) -> str:
    """'1.2.3.4:9092' or '[::1]:9092'. IPv4 spelled directly (the text of `socket.inet_ntoa`,
    ~20x faster than `ipaddress`: one per connection opened, a SYN flood's main cost; neither
    module is imported for it, they cost 3 ms of every run's start-up)."""
    if len(ip) == 4:
        return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}"
    import ipaddress

    return f"[{ipaddress.ip_address(bytes(ip))}]:{port}"


def _network_offset(linktype: int, buf: bytes | memoryview) -> tuple[int, int] | None:
    """(offset of the IP header, IP version 4/6) or None when the packet is not IP."""
    if linktype == ETHERNET:
        if len(buf) < 14:
            return None
        pos = 12
        etype = _H.unpack_from(buf, pos)[0]
        while etype in VLAN_TYPES:
            pos += 4
            if len(buf) < pos + 2:
                return None
            etype = _H.unpack_from(buf, pos)[0]
        pos += 2
    elif linktype == SLL:
        if len(buf) < 16:
            return None
        etype, pos = _H.unpack_from(buf, 14)[0], 16
    elif linktype == SLL2:
        if len(buf) < 20:
            return None
        etype, pos = _H.unpack_from(buf, 0)[0], 20
    elif linktype in (NULL, LOOP):
        if len(buf) < 4:
            return None
        fam_be = int.from_bytes(buf[:4], "big")
        fam = (
            fam_be
            if linktype == LOOP
            else (fam_be if fam_be < 256 else int.from_bytes(buf[:4], "little"))
        )
        if fam == 2:
            return 4, 4
        if fam in NULL_IPV6:
            return 4, 6
        return None
    elif linktype in (RAW, RAW_BSD, RAW_OPENBSD, IPV4, IPV6):
        if not buf:
            return None
        v = buf[0] >> 4
        return (0, v) if v in (4, 6) else None
    else:
        return None
    if etype == ETH_IPV4:
        return pos, 4
    if etype == ETH_IPV6:
        return pos, 6
    return None


def network_offset(linktype: int, buf: bytes | memoryview) -> tuple[int, int] | None:
    """(offset of the IP header, IP version) of a packet of a supported link type, or None
    (for writers that rewrite IP/TCP headers: the filtered pcap)."""
    if linktype not in SUPPORTED_LINKTYPES:
        return None
    return _network_offset(linktype, buf)


def decode_segment(linktype: int, buf: bytes | memoryview, stats: FlowStats) -> Segment | None:
    """The TCP segment in a packet, or None (and a counted reason) when there is none."""
    if (
        linktype == ETHERNET
        and len(buf) >= 54
        and buf[12] == 8
        and buf[13] == 0
        and buf[14] == 0x45
        and buf[23] == IPPROTO_TCP
    ):
        # fast path: untagged Ethernet, IPv4 without options, TCP
        total, frag = _LEN_FRAG.unpack_from(buf, 16)
        if not frag & 0x3FFF:
            end = 14 + total if total else len(buf)
            cut = 0
            if end > len(buf):
                cut, end = end - len(buf), len(buf)
            sport, dport, seq, ack, off, flags = _TCP.unpack_from(buf, 34)
            doff = (off >> 4) * 4
            if doff >= 20 and 34 + doff <= end:
                stats.tcp += 1
                if cut:
                    _count_cut(stats, cut, len(buf))
                return _new(
                    Segment,
                    (
                        bytes(buf[26:30]),
                        sport,
                        bytes(buf[30:34]),
                        dport,
                        seq,
                        ack,
                        flags,
                        buf[34 + doff : end],
                        cut,
                    ),
                )
    if linktype not in SUPPORTED_LINKTYPES:
        stats.unsupported_linktypes[linktype] = stats.unsupported_linktypes.get(linktype, 0) + 1
        return None
    net = _network_offset(linktype, buf)
    if net is None:
        stats.not_ip += 1
        return None
    pos, version = net
    n = len(buf)
    if version == 4:
        if n < pos + 20 or buf[pos] >> 4 != 4:
            stats.malformed += 1
            return None
        ihl = (buf[pos] & 0x0F) * 4
        total = _H.unpack_from(buf, pos + 2)[0]
        frag = _H.unpack_from(buf, pos + 6)[0]
        proto = buf[pos + 9]
        if proto != IPPROTO_TCP:
            stats.not_tcp += 1
            return None
        if frag & 0x3FFF:  # more-fragments flag or a fragment offset
            stats.fragments += 1
            return None
        if ihl < 20:
            stats.malformed += 1
            return None
        src, dst = bytes(buf[pos + 12 : pos + 16]), bytes(buf[pos + 16 : pos + 20])
        end = pos + total if total else n  # total 0: segmentation offload, trust the capture
        tpos = pos + ihl
    else:
        if n < pos + 40:
            stats.malformed += 1
            return None
        plen = _H.unpack_from(buf, pos + 4)[0]
        nxt = buf[pos + 6]
        src, dst = bytes(buf[pos + 8 : pos + 24]), bytes(buf[pos + 24 : pos + 40])
        tpos = pos + 40
        end = tpos + plen if plen else n
        while nxt in IPV6_EXT:
            if n < tpos + 2:
                stats.malformed += 1
                return None
            hlen = (buf[tpos + 1] + 2) * 4 if nxt == IPPROTO_AH else (buf[tpos + 1] + 1) * 8
            nxt = buf[tpos]
            tpos += hlen
        if nxt == IPPROTO_FRAGMENT:
            stats.fragments += 1
            return None
        if nxt != IPPROTO_TCP:
            stats.not_tcp += 1
            return None
    cut = max(end - n, 0)
    end = min(end, n)
    if end < tpos + 20:
        stats.malformed += 1
        return None
    sport, dport, seq, ack, off, flags = _TCP.unpack_from(buf, tpos)
    doff = (off >> 4) * 4
    if doff < 20 or tpos + doff > end:
        stats.malformed += 1
        return None
    stats.tcp += 1
    if cut:
        _count_cut(stats, cut, n)
    return _new(Segment, (src, sport, dst, dport, seq, ack, flags, buf[tpos + doff : end], cut))


def _count_cut(stats: FlowStats, cut: int, captured: int) -> None:
    stats.cut_packets += 1
    stats.cut_bytes += cut
    if captured > stats.snaplen:
        stats.snaplen = captured
