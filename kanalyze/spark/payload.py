"""What stage 1 ships across the shuffle: a TCP segment without its link and IP headers.

A segment row carries the connection key (both endpoints, smaller first), a direction bit, the
TCP sequence and acknowledgement numbers, the flags, the bytes the snaplen cut off and the
payload, nothing else: the endpoints are in the key, and nothing below TCP changes what the
engine does. Stage 2 rebuilds a minimal raw-IP packet (linktype RAW: IPv4 or IPv6 header, a
20-byte TCP header) so the unmodified engine reads it as it reads a capture.

`kafka_hint` is the cheap test stage 1 applies to decide, before the shuffle, which flows are
worth shipping: a payload that starts with a plausible Kafka request header.
"""

from __future__ import annotations

import struct

from kanalyze.flows import RAW, Segment
from kanalyze.headers import plausible_request

FROM_FIRST = 0x100  # in the flags column: the segment goes from the key's first endpoint
RAW_LINKTYPE = RAW
_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_TCP = struct.Struct("!HHIIBBHHH")
_PORT = struct.Struct("!H")


def conn_key(seg: Segment) -> tuple[bytes, bool]:
    """Direction-free key of a 4-tuple (the two endpoints in sorted order) and whether the
    segment was sent by the first of them."""
    a = seg.src + seg.sport.to_bytes(2, "big")
    b = seg.dst + seg.dport.to_bytes(2, "big")
    return (a + b, True) if a <= b else (b + a, False)


def kafka_hint(seg: Segment, ports: frozenset[int], max_frame: int) -> bool:
    """True when this segment shows its flow may be Kafka: it starts with a plausible request
    header, or it is on a port named with --port."""
    if ports and (seg.sport in ports or seg.dport in ports):
        return True
    return bool(seg.payload) and plausible_request(seg.payload, 0, max_frame) == 1


def rebuild(key: bytes, flags: int, seq: int, ack: int, cut: int, payload: bytes) -> bytes:
    """A raw-IP packet the engine decodes into the same Segment stage 1 saw."""
    n = len(key) // 2
    a, b = key[:n], key[n:]
    src, dst = (a, b) if flags & FROM_FIRST else (b, a)
    sip, sport = src[:-2], _PORT.unpack(src[-2:])[0]
    dip, dport = dst[:-2], _PORT.unpack(dst[-2:])[0]
    tcp = _TCP.pack(sport, dport, seq, ack, 5 << 4, flags & 0xFF, 65535, 0, 0)
    if len(sip) == 4:
        total = 40 + len(payload) + cut
        ip = _IP4.pack(0x45, 0, total if total <= 0xFFFF else 0, 0, 0, 64, 6, 0, sip, dip)
    else:
        plen = 20 + len(payload) + cut
        ip = _IP6.pack(6 << 28, plen if plen <= 0xFFFF else 0, 6, 64, sip, dip)
    return ip + tcp + payload
