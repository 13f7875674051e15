"""Test-only packet and capture-file builders, written from the format specs.

Independent of kanalyze's readers on purpose: tests build bytes here and
check that the engine recovers what went in.
"""

from __future__ import annotations

import gzip
import socket
import struct

SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08


def tcp(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(
            "!HHIIBBHHH",
            sport,
            dport,
            seq & 0xFFFFFFFF,
            ack & 0xFFFFFFFF,
            5 << 4,
            flags,
            65535,
            0,
            0,
        )
        + payload
    )


def ipv4(src: str, dst: str, l4: bytes, proto: int = 6) -> bytes:
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(l4),
        1,
        0x4000,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    return hdr + l4


def ipv6(src: str, dst: str, l4: bytes, nxt: int = 6) -> bytes:
    hdr = struct.pack(
        "!IHBB16s16s",
        6 << 28,
        len(l4),
        nxt,
        64,
        socket.inet_pton(socket.AF_INET6, src),
        socket.inet_pton(socket.AF_INET6, dst),
    )
    return hdr + l4


def ethernet(ip: bytes, vlans: tuple[int, ...] = (), ethertype: int | None = None) -> bytes:
    if ethertype is None:
        ethertype = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    out = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01"
    for i, vid in enumerate(vlans):
        tpid = 0x88A8 if i == 0 and len(vlans) > 1 else 0x8100
        out += struct.pack("!HH", tpid, vid)
    return out + struct.pack("!H", ethertype) + ip


def sll(ip: bytes) -> bytes:
    proto = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHH8sH", 0, 772, 6, b"\0" * 8, proto) + ip


def sll2(ip: bytes) -> bytes:
    proto = 0x86DD if ip[0] >> 4 == 6 else 0x0800
    return struct.pack("!HHIHBB8s", proto, 0, 1, 772, 0, 6, b"\0" * 8) + ip


def null_loop(ip: bytes, byteorder: str = "little") -> bytes:
    fam = 30 if ip[0] >> 4 == 6 else 2
    return fam.to_bytes(4, byteorder) + ip  # type: ignore[arg-type]


def pcap(
    packets: list[tuple[float, bytes]],
    linktype: int = 1,
    nanos: bool = False,
    big_endian: bool = False,
) -> bytes:
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype)]
    for ts, data in packets:
        sec = int(ts)
        frac = round((ts - sec) * (1e9 if nanos else 1e6))
        out.append(struct.pack(e + "IIII", sec, frac, len(data), len(data)) + data)
    return b"".join(out)


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def pcapng(sections: list[tuple[list[int], list[tuple[int, float, bytes]]]]) -> bytes:
    """sections: (interface link types, [(interface index, ts, data)])."""
    out = []
    for linktypes, pkts in sections:
        out.append(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        out.extend(_block(1, struct.pack("<HHI", lt, 0, 262144)) for lt in linktypes)
        for iface, ts, data in pkts:
            t = round(ts * 1e6)
            out.append(
                _block(
                    6,
                    struct.pack("<IIIII", iface, t >> 32, t & 0xFFFFFFFF, len(data), len(data))
                    + data,
                )
            )
    return b"".join(out)


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


class Conversation:
    """A TCP conversation between a client and a broker, as IP packets with correct sequence
    numbers."""

    def __init__(
        self,
        client: str = "10.0.0.1",
        cport: int = 40000,
        broker: str = "10.0.0.2",
        bport: int = 9092,
        cseq: int = 1000,
        bseq: int = 5000,
        v6: bool = False,
    ) -> None:
        self.client, self.cport, self.broker, self.bport = client, cport, broker, bport
        self.cseq, self.bseq = cseq, bseq
        self.v6 = v6

    def _ip(self, from_client: bool, seg: bytes) -> bytes:
        src, dst = (self.client, self.broker) if from_client else (self.broker, self.client)
        return ipv6(src, dst, seg) if self.v6 else ipv4(src, dst, seg)

    def handshake(self) -> list[bytes]:
        out = [self._ip(True, tcp(self.cport, self.bport, self.cseq, 0, SYN))]
        out.append(
            self._ip(False, tcp(self.bport, self.cport, self.bseq, self.cseq + 1, SYN | ACK))
        )
        self.cseq += 1
        self.bseq += 1
        out.append(self._ip(True, tcp(self.cport, self.bport, self.cseq, self.bseq, ACK)))
        return out

    def send(
        self, from_client: bool, payload: bytes, flags: int = ACK | PSH, advance: bool = True
    ) -> bytes:
        if from_client:
            seg = tcp(self.cport, self.bport, self.cseq, self.bseq, flags, payload)
            if advance:
                self.cseq += len(payload) + (1 if flags & FIN else 0)
        else:
            seg = tcp(self.bport, self.cport, self.bseq, self.cseq, flags, payload)
            if advance:
                self.bseq += len(payload) + (1 if flags & FIN else 0)
        return self._ip(from_client, seg)

    def segment_at(
        self, from_client: bool, seq: int, payload: bytes, ack: int, flags: int = ACK | PSH
    ) -> bytes:
        seg = (
            tcp(self.cport, self.bport, seq, ack, flags, payload)
            if from_client
            else tcp(self.bport, self.cport, seq, ack, flags, payload)
        )
        return self._ip(from_client, seg)

    def close(self) -> list[bytes]:
        return [self.send(True, b"", ACK | FIN), self.send(False, b"", ACK | FIN)]


def request_frame(
    api_key: int,
    version: int,
    corr: int,
    client_id: str | None,
    body: bytes = b"",
    flexible: bool = False,
) -> bytes:
    """A Kafka request frame with header v1 (or v2 when flexible)."""
    cid = (
        b"\xff\xff" if client_id is None else struct.pack("!h", len(client_id)) + client_id.encode()
    )
    hdr = struct.pack("!hhi", api_key, version, corr) + cid + (b"\x00" if flexible else b"")
    payload = hdr + body
    return struct.pack("!i", len(payload)) + payload


def response_frame(corr: int, body: bytes = b"", flexible: bool = False) -> bytes:
    payload = struct.pack("!i", corr) + (b"\x00" if flexible else b"") + body
    return struct.pack("!i", len(payload)) + payload
