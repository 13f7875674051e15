#!/usr/bin/env python3
"""Build crafted edge-case captures under captures/crafted/ from one real capture.

The TCP payload streams of one real connection (from ``captures/kp_v25.pcap``, made by
make_captures.py with kafka-python pinned to api_version=(2, 5)) are read with dpkt and re-emitted,
packet by packet, into new captures that exercise reassembly, link layers and file formats. Next to
each capture, ``<name>.expect.json`` lists the exchanges a correct analyzer must recover, computed
here independently of kanalyze by a tiny length-prefix walker over the contiguous byte streams.

Usage::

    python captures/make_crafted.py [--source captures/kp_v25.pcap]

Everything is deterministic (fixed addresses, ISNs, timestamps and random seed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dpkt

HERE = Path(__file__).resolve().parent
OUT = HERE / "crafted"
EXPECT_SCHEMA = "kanalyze-crafted-expect/1"

CLIENT4, BROKER4 = "192.0.2.10", "192.0.2.20"
CLIENT6, BROKER6 = "2001:db8::10", "2001:db8::20"
CLIENT_PORT = 40001
BASE_NS = 1_700_000_000_123_456_789
STEP_NS = 100_123  # 100.123 µs between packets: ns timestamps have non-zero sub-µs digits

# link types
LT_NULL, LT_EN10MB, LT_RAW, LT_LOOP, LT_SLL, LT_SLL2, LT_IPV4, LT_IPV6, LT_USER0 = (
    0,
    1,
    101,
    108,
    113,
    276,
    228,
    229,
    147,
)

# ---------------------------------------------------------------------------------------------
# reading the source capture (dpkt, not kanalyze)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    """A payload segment of the source connection: direction and offset in its byte stream."""

    dir: str  # "c2s" or "s2c"
    off: int
    data: bytes


@dataclass
class Source:
    pcap: str
    port: int
    client_port: int
    segs: list[Seg]
    c2s: bytes
    s2c: bytes


def read_connections(pcap: Path, port: int) -> dict[int, list[Seg]]:
    """Payload segments per client port, deduplicated, in capture order, offsets relative to
    ISN+1."""
    isn: dict[tuple[int, str], int] = {}
    seen: dict[int, set[tuple[str, int]]] = {}
    conns: dict[int, list[Seg]] = {}
    with pcap.open("rb") as fh:
        for _ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP):
                continue
            d, cport = ("c2s", tcp.sport) if tcp.dport == port else ("s2c", tcp.dport)
            if tcp.flags & dpkt.tcp.TH_SYN:
                isn[(cport, d)] = tcp.seq
                conns.setdefault(cport, [])
                seen.setdefault(cport, set())
                continue
            if not tcp.data or (cport, d) not in isn:
                continue
            off = (tcp.seq - isn[(cport, d)] - 1) % (1 << 32)
            if (d, off) in seen[cport]:
                continue
            seen[cport].add((d, off))
            conns[cport].append(Seg(d, off, bytes(tcp.data)))
    return conns


def stream_of(segs: Iterable[Seg], d: str) -> bytes:
    buf = bytearray()
    for s in sorted((s for s in segs if s.dir == d), key=lambda s: s.off):
        if s.off == len(buf):
            buf += s.data
        elif s.off < len(buf) < s.off + len(s.data):
            buf += s.data[len(buf) - s.off :]
    return bytes(buf)


def load_source(pcap: Path) -> Source:
    truth = json.loads(pcap.with_name(pcap.name.replace(".pcap", ".truth.json")).read_text())
    port = truth["broker"]["port"]
    conns = read_connections(pcap, port)
    # the smallest connection that carries a Fetch (api key 1) request: ApiVersions,
    # FindCoordinator, Metadata, ListOffsets, Fetch with records in its response
    best = None
    for cport, segs in sorted(conns.items()):
        c2s = stream_of(segs, "c2s")
        keys = {f.api_key for f in walk_requests(c2s)}
        if 1 in keys and 0 not in keys and (best is None or len(c2s) < len(best[2])):
            best = (cport, segs, c2s)
    if best is None:
        raise SystemExit(f"no connection with a Fetch request in {pcap}")
    cport, segs, c2s = best
    return Source(pcap.name, port, cport, segs, c2s, stream_of(segs, "s2c"))


# ---------------------------------------------------------------------------------------------
# the independent walker: length-prefixed frames and correlation ids
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    off: int  # offset of the length prefix in the stream
    end: int  # offset after the frame
    correlation_id: int
    api_key: int = -1
    api_version: int = -1


def walk_requests(stream: bytes, start: int = 0) -> list[Frame]:
    out, o = [], start
    while o + 12 <= len(stream):
        (n,) = struct.unpack_from(">i", stream, o)
        if n < 8 or o + 4 + n > len(stream):
            break
        ak, av, cid = struct.unpack_from(">hhi", stream, o + 4)
        out.append(Frame(o, o + 4 + n, cid, ak, av))
        o += 4 + n
    return out


def walk_responses(stream: bytes, start: int = 0) -> list[Frame]:
    out, o = [], start
    while o + 8 <= len(stream):
        (n,) = struct.unpack_from(">i", stream, o)
        if n < 4 or o + 4 + n > len(stream):
            break
        (cid,) = struct.unpack_from(">i", stream, o + 4)
        out.append(Frame(o, o + 4 + n, cid))
        o += 4 + n
    return out


def hits(f: Frame, ranges: list[tuple[int, int]]) -> bool:
    return any(a < f.end and f.off < b for a, b in ranges)


def expected_exchanges(
    c2s: bytes,
    s2c: bytes,
    conn: int = 0,
    c2s_lost: list[tuple[int, int]] | None = None,
    s2c_lost: list[tuple[int, int]] | None = None,
) -> list[dict[str, Any]]:
    """Exchanges of one connection given the full streams and the byte ranges a capture lacks.

    A frame is lost when any of its bytes is in a lost range (it may show up truncated)."""
    c2s_lost, s2c_lost = c2s_lost or [], s2c_lost or []
    reqs = walk_requests(c2s)
    resps = {r.correlation_id: r for r in walk_responses(s2c)}
    out = []
    for q in reqs:
        r = resps.get(q.correlation_id)
        req_ok = not hits(q, c2s_lost)
        resp_ok = r is not None and not hits(r, s2c_lost)
        if req_ok and resp_ok:
            status = "ok"
        elif req_ok and r is None:
            status = "no_response"
        elif req_ok:
            status = "response_lost"
        elif resp_ok:
            status = "request_missing"
        else:
            status = "lost"
        out.append(
            {
                "connection": conn,
                "api_key": q.api_key,
                "api_version": q.api_version,
                "correlation_id": q.correlation_id,
                "has_response": r is not None,
                "expected_status": status,
                "request_bytes": [q.off, q.end],
                "response_bytes": [r.off, r.end] if r else None,
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# building packets
# ---------------------------------------------------------------------------------------------


@dataclass
class Conn:
    v6: bool = False
    cport: int = CLIENT_PORT
    sport: int = 9092
    isn: dict[str, int] = field(default_factory=lambda: {"c2s": 1_000_000, "s2c": 2_000_000})
    sent: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})

    def addrs(self, d: str) -> tuple[str, str, int, int]:
        c, s = (CLIENT6, BROKER6) if self.v6 else (CLIENT4, BROKER4)
        return (c, s, self.cport, self.sport) if d == "c2s" else (s, c, self.sport, self.cport)

    def ip(
        self, d: str, flags: int, data: bytes = b"", off: int | None = None, seq: int | None = None
    ) -> bytes:
        import socket

        src, dst, sp, dp = self.addrs(d)
        other = "s2c" if d == "c2s" else "c2s"
        if seq is None:
            seq = self.isn[d] + 1 + (off if off is not None else self.sent[d])
        ack = self.isn[other] + 1 + self.sent[other]
        if flags & dpkt.tcp.TH_SYN and not flags & dpkt.tcp.TH_ACK:
            ack = 0
        tcp = dpkt.tcp.TCP(
            sport=sp,
            dport=dp,
            seq=seq % (1 << 32),
            ack=ack % (1 << 32),
            flags=flags,
            win=65535,
            data=data,
        )
        if off is not None:
            self.sent[d] = max(self.sent[d], off + len(data))
        if self.v6:
            ip6 = dpkt.ip6.IP6(
                src=socket.inet_pton(socket.AF_INET6, src),
                dst=socket.inet_pton(socket.AF_INET6, dst),
                nxt=dpkt.ip.IP_PROTO_TCP,
                hlim=64,
                data=tcp,
                plen=len(bytes(tcp)),
            )
            tcp.sum = 0
            ip6.data = tcp
            ip6.plen = len(tcp)
            return bytes(ip6)
        ip4 = dpkt.ip.IP(
            src=socket.inet_aton(src),
            dst=socket.inet_aton(dst),
            p=dpkt.ip.IP_PROTO_TCP,
            ttl=64,
            data=tcp,
            id=0,
        )
        ip4.len = 20 + len(tcp)
        return bytes(ip4)

    def handshake(self) -> list[bytes]:
        self.sent = {"c2s": 0, "s2c": 0}
        s = self.ip("c2s", dpkt.tcp.TH_SYN, seq=self.isn["c2s"])
        sa = self.ip("s2c", dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK, seq=self.isn["s2c"])
        a = self.ip("c2s", dpkt.tcp.TH_ACK)
        return [s, sa, a]

    def data(self, seg: Seg) -> bytes:
        return self.ip(seg.dir, dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH, seg.data, off=seg.off)

    def fin(self) -> list[bytes]:
        f1 = self.ip("c2s", dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        self.sent["c2s"] += 1
        f2 = self.ip("s2c", dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
        self.sent["s2c"] += 1
        return [f1, f2, self.ip("c2s", dpkt.tcp.TH_ACK)]

    def rst(self, d: str = "s2c") -> list[bytes]:
        return [self.ip(d, dpkt.tcp.TH_RST | dpkt.tcp.TH_ACK)]


def resegment(segs: list[Seg], size: int) -> list[Seg]:
    out = []
    for s in segs:
        out.extend(Seg(s.dir, s.off + i, s.data[i : i + size]) for i in range(0, len(s.data), size))
    return out


def conversation(conn: Conn, segs: list[Seg], close: str = "fin") -> list[bytes]:
    pkts = conn.handshake() + [conn.data(s) for s in segs]
    if close == "fin":
        pkts += conn.fin()
    elif close == "rst":
        pkts += conn.rst()
    return pkts


# ---------------------------------------------------------------------------------------------
# link layers
# ---------------------------------------------------------------------------------------------

MAC_C, MAC_S = bytes.fromhex("020000000010"), bytes.fromhex("020000000020")


def is_v6(ip: bytes) -> bool:
    return ip[0] >> 4 == 6


def ether(ip: bytes, vlans: tuple[tuple[int, int], ...] = ()) -> bytes:
    tags = b"".join(struct.pack(">HH", tpid, vid) for tpid, vid in vlans)
    return MAC_S + MAC_C + tags + struct.pack(">H", 0x86DD if is_v6(ip) else 0x0800) + ip


def sll(ip: bytes) -> bytes:
    return struct.pack(">HHH8sH", 0, 772, 6, MAC_C + b"\0\0", 0x86DD if is_v6(ip) else 0x0800) + ip


def sll2(ip: bytes) -> bytes:
    return (
        struct.pack(">HHIHBB8s", 0x86DD if is_v6(ip) else 0x0800, 0, 1, 772, 0, 6, MAC_C + b"\0\0")
        + ip
    )


def null(ip: bytes, big: bool) -> bytes:
    af = 30 if is_v6(ip) else 2  # BSD AF_INET / AF_INET6 (macOS value)
    return struct.pack(">I" if big else "<I", af) + ip


def loop(ip: bytes) -> bytes:
    return struct.pack(">I", 30 if is_v6(ip) else 2) + ip


# ---------------------------------------------------------------------------------------------
# file writers
# ---------------------------------------------------------------------------------------------


def ts_of(i: int) -> int:
    return BASE_NS + i * STEP_NS


def pcap_bytes(
    linktype: int, frames: list[bytes], nano: bool = False, big: bool = False, first_index: int = 0
) -> bytes:
    e = ">" if big else "<"
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = bytearray(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype))
    for i, f in enumerate(frames, first_index):
        ns = ts_of(i)
        sec, frac = divmod(ns, 1_000_000_000)
        if not nano:
            frac //= 1000
        out += struct.pack(e + "IIII", sec, frac, len(f), len(f)) + f
    return bytes(out)


def pcapng_block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def pcapng_option(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def pcapng_section(
    big: bool,
    interfaces: list[tuple[int, int]],
    packets: list[tuple[int, int, bytes]],
    comment: str,
) -> bytes:
    """interfaces: (linktype, tsresol exponent); packets: (interface, ts_ns, frame)."""
    e = ">" if big else "<"
    opts = pcapng_option(e, 1, comment.encode()) + pcapng_option(e, 0, b"")
    out = bytearray(
        pcapng_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1) + opts)
    )
    for lt, res in interfaces:
        o = pcapng_option(e, 9, bytes([res])) if res != 6 else b""
        o += pcapng_option(e, 2, f"if{lt}".encode()) + pcapng_option(e, 0, b"")
        out += pcapng_block(e, 1, struct.pack(e + "HHI", lt, 0, 262144) + o)
    for ifc, ns, f in packets:
        res = interfaces[ifc][1]
        t = ns // (10 ** (9 - res))
        body = struct.pack(e + "IIIII", ifc, t >> 32, t & 0xFFFFFFFF, len(f), len(f)) + f
        out += pcapng_block(e, 6, body + b"\0" * (-len(f) % 4))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------------


class Crafter:
    def __init__(self, src: Source) -> None:
        self.src = src
        self.written: list[tuple[str, int]] = []
        self.base = expected_exchanges(src.c2s, src.s2c)

    def conn(self, v6: bool = False, cport: int = CLIENT_PORT) -> Conn:
        return Conn(v6=v6, cport=cport, sport=self.src.port)

    def endpoints(self, conn: Conn) -> dict[str, str]:
        c, s, cp, sp = conn.addrs("c2s")
        fmt = "[{}]:{}" if conn.v6 else "{}:{}"
        return {"client": fmt.format(c, cp), "broker": fmt.format(s, sp)}

    def write(
        self,
        name: str,
        files: dict[str, bytes],
        description: str,
        connections: list[dict[str, Any]],
        exchanges: list[dict[str, Any]],
        **extra: Any,
    ) -> None:
        for fname, data in files.items():
            (OUT / fname).write_bytes(data)
            self.written.append((fname, len(data)))
        expect = {
            "schema": EXPECT_SCHEMA,
            "name": name,
            "files": list(files),
            "description": description,
            "source": {
                "pcap": self.src.pcap,
                "broker_port": self.src.port,
                "client_port": self.src.client_port,
            },
            "kafka_port": self.src.port,
            "connections": connections,
            "exchanges": exchanges,
            "lost": [
                x
                for x in exchanges
                if x["expected_status"] != "ok" and x["expected_status"] != "no_response"
            ],
            **extra,
        }
        (OUT / f"{name}.expect.json").write_text(json.dumps(expect, indent=1) + "\n")

    def simple(
        self,
        name: str,
        description: str,
        segs: list[Seg],
        linktype: int = LT_EN10MB,
        wrap: Any = ether,
        v6: bool = False,
        nano: bool = False,
        big: bool = False,
        exchanges: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> list[bytes]:
        conn = self.conn(v6=v6)
        frames = [wrap(p) for p in conversation(conn, segs)]
        self.write(
            name,
            {f"{name}.pcap": pcap_bytes(linktype, frames, nano=nano, big=big)},
            description,
            [self.endpoints(conn)],
            exchanges if exchanges is not None else self.base,
            linktype=linktype,
            **extra,
        )
        return frames

    # -- reassembly ----------------------------------------------------------------------------

    def reassembly_cases(self) -> None:
        segs = self.src.segs
        small = resegment(segs, 64)
        self.simple(
            "baseline", "the source connection re-emitted unchanged (Ethernet, µs pcap)", segs
        )

        ooo = list(small)
        swaps = []
        for i in range(3, len(ooo) - 1, 5):
            if ooo[i].dir == ooo[i + 1].dir:
                ooo[i], ooo[i + 1] = ooo[i + 1], ooo[i]
                swaps.append(i)
        self.simple(
            "out_of_order",
            "64-byte segments; every fifth pair of same-direction segments swapped",
            ooo,
            swapped_positions=swaps,
        )

        retr = []
        for i, s in enumerate(small):
            retr.append(s)
            if i % 4 == 2:
                retr.append(s)
        self.simple(
            "retransmissions",
            "64-byte segments; every fourth segment sent twice (exact duplicate)",
            retr,
        )

        ov = []
        overlaps = []
        for i, s in enumerate(small):
            ov.append(s)
            nxt = small[i + 1] if i + 1 < len(small) else None
            if (
                i % 6 == 3
                and nxt is not None
                and nxt.dir == s.dir
                and nxt.off == s.off + len(s.data)
            ):
                stream = self.src.c2s if s.dir == "c2s" else self.src.s2c
                a, b = s.off + len(s.data) // 2, min(s.off + len(s.data) + 32, len(stream))
                ov.append(
                    Seg(s.dir, a, stream[a:b])
                )  # overlaps the sent tail and the next, unsent, head
                overlaps.append({"direction": s.dir, "range": [a, b]})
        self.simple(
            "overlap_same",
            "64-byte segments plus segments overlapping sent and unsent bytes, same bytes",
            ov,
            overlaps=overlaps,
        )

        od = []
        conflicts = []
        for i, s in enumerate(small):
            od.append(s)
            if i % 7 == 4:
                bad = bytes(x ^ 0x5A for x in s.data)
                od.append(Seg(s.dir, s.off, bad))
                conflicts.append({"direction": s.dir, "range": [s.off, s.off + len(s.data)]})
        self.simple(
            "overlap_conflict",
            "64-byte segments; some retransmitted later with DIFFERENT bytes (each byte XOR 0x5A)",
            od,
            overlaps=conflicts,
            policy="first-seen bytes win: the later, conflicting copies are ignored "
            "(and may be flagged), so every exchange decodes exactly as in baseline",
        )

        # a lost segment in each direction, in the middle of a frame
        reqs = walk_requests(self.src.c2s)
        resps = walk_responses(self.src.s2c)
        q = reqs[1]  # second request
        r = max(resps, key=lambda f: f.end - f.off)  # the largest response (Fetch)
        drop_c = (
            next(
                s
                for s in small
                if s.dir == "c2s" and s.off > q.off and s.off + len(s.data) <= q.end
            )
            if q.end - q.off > 70
            else next(
                s for s in small if s.dir == "c2s" and s.off <= q.off + 5 < s.off + len(s.data)
            )
        )
        drop_s = next(
            s
            for s in small
            if s.dir == "s2c" and s.off >= r.off + 64 and s.off + len(s.data) <= r.end
        )
        gapped = [s for s in small if s not in (drop_c, drop_s)]
        c_lost = [(drop_c.off, drop_c.off + len(drop_c.data))]
        s_lost = [(drop_s.off, drop_s.off + len(drop_s.data))]
        self.simple(
            "gap",
            "64-byte segments; one client segment inside a request and one broker segment inside "
            "the largest response are missing (never captured)",
            gapped,
            exchanges=expected_exchanges(self.src.c2s, self.src.s2c, 0, c_lost, s_lost),
            gaps=[
                {"direction": "c2s", "range": list(c_lost[0])},
                {"direction": "s2c", "range": list(s_lost[0])},
            ],
            policy="the gap is explicit (never zero-filled); frames touching it are missing or "
            "truncated ('request_missing' = request bytes lost, 'response_lost' = response bytes "
            "lost); framing resyncs on the next frame; all other exchanges are intact",
        )

        # starts mid-connection: no handshake, first packet of each direction mid-frame
        q2 = reqs[2]
        cut_c = next(s for s in small if s.dir == "c2s" and q2.off < s.off < q2.end)
        idx = small.index(cut_c)
        tail = small[idx:]
        first_s = next((s for s in tail if s.dir == "s2c"), None)
        c_lost = [(0, cut_c.off)]
        s_lost = [(0, first_s.off)] if first_s else []
        conn = self.conn()
        conn.sent = {"c2s": cut_c.off, "s2c": first_s.off if first_s else 0}
        frames = [ether(conn.data(s)) for s in tail] + [ether(p) for p in conn.fin()]
        self.write(
            "midstream",
            {"midstream.pcap": pcap_bytes(LT_EN10MB, frames)},
            "capture starts mid-connection: no SYN, the first client packet begins inside a "
            "request frame",
            [self.endpoints(conn)],
            expected_exchanges(self.src.c2s, self.src.s2c, 0, c_lost, s_lost),
            linktype=LT_EN10MB,
            stream_starts={"c2s": cut_c.off, "s2c": first_s.off if first_s else None},
            policy="frames before the first captured byte are unknown; the partial frame at the "
            "start is skipped (counted), framing resyncs on the next request/response",
        )

        # many frames in one segment: each direction's whole stream in one segment
        one = [Seg("c2s", 0, self.src.c2s), Seg("s2c", 0, self.src.s2c)]
        self.simple(
            "many_frames_one_segment",
            "the whole client stream in one segment, then the whole broker stream in one segment",
            one,
            frames_per_segment={"c2s": len(reqs), "s2c": len(resps)},
        )

        # one large frame across hundreds of segments
        big = r
        split = []
        for s in segs:
            if s.dir == "s2c" and s.off <= big.off < s.off + len(s.data):
                split.extend(resegment([s], 8))
            else:
                split.append(s)
        n_small = sum(1 for s in split if len(s.data) <= 8 and s.dir == "s2c")
        self.simple(
            "large_frame_split",
            f"the largest response ({big.end - big.off} bytes) split into "
            f"{n_small} segments of 8 bytes",
            split,
            split_segments=n_small,
        )

        # FIN then port reuse: same 4-tuple, new SYN, new ISN; second connection ends with RST
        # while a request is still unanswered
        c1 = self.conn()
        p1 = conversation(c1, segs, close="fin")
        c2 = self.conn()
        c2.isn = {"c2s": 3_000_000, "s2c": 4_000_000}
        last = reqs[-1]
        segs2 = [s for s in segs if s.dir == "c2s" or s.off < resps[-1].off]
        p2 = conversation(c2, segs2, close="rst")
        ex2 = expected_exchanges(self.src.c2s, self.src.s2c[: resps[-1].off], 1)
        frames = [ether(p) for p in p1 + p2]
        self.write(
            "port_reuse",
            {"port_reuse.pcap": pcap_bytes(LT_EN10MB, frames)},
            "connection 0 closes with FIN; connection 1 reuses the same 4-tuple "
            "(new SYN, new ISN), "
            f"the broker never answers correlation id {last.correlation_id} "
            "and resets the connection",
            [self.endpoints(c1), self.endpoints(c2)],
            self.base + ex2,
            linktype=LT_EN10MB,
            policy="a new SYN on a 4-tuple starts a new connection; correlation ids repeat across "
            "the two connections and are NOT duplicates; the unanswered request is 'no_response'",
        )

    # -- link layers and file formats --------------------------------------------------------

    def link_cases(self) -> None:
        segs = self.src.segs
        self.simple(
            "vlan_8021q",
            "Ethernet with one 802.1Q tag (VLAN 100)",
            segs,
            wrap=lambda ip: ether(ip, ((0x8100, 100),)),
        )
        self.simple(
            "vlan_qinq",
            "Ethernet with QinQ: 802.1ad outer tag (S-VLAN 200), 802.1Q inner (VLAN 100)",
            segs,
            wrap=lambda ip: ether(ip, ((0x88A8, 200), (0x8100, 100))),
        )
        self.simple(
            "linux_sll", "Linux cooked capture v1 (LINKTYPE_LINUX_SLL 113)", segs, LT_SLL, sll
        )
        self.simple(
            "linux_sll2",
            "Linux cooked capture v2 (LINKTYPE_LINUX_SLL2 276, tcpdump -i any)",
            segs,
            LT_SLL2,
            sll2,
        )
        self.simple(
            "null_le",
            "BSD loopback NULL, address family in little-endian host order",
            segs,
            LT_NULL,
            lambda ip: null(ip, big=False),
        )
        self.simple(
            "null_be",
            "BSD loopback NULL, address family in big-endian host order",
            segs,
            LT_NULL,
            lambda ip: null(ip, big=True),
        )
        self.simple(
            "loop",
            "OpenBSD LOOP (LINKTYPE_LOOP 108), address family in network order",
            segs,
            LT_LOOP,
            loop,
        )
        self.simple("raw_ipv4", "raw IP (LINKTYPE_RAW 101), IPv4", segs, LT_RAW, lambda ip: ip)
        self.simple(
            "raw_ipv6", "raw IP (LINKTYPE_RAW 101), IPv6", segs, LT_RAW, lambda ip: ip, v6=True
        )
        self.simple("linktype_ipv4", "LINKTYPE_IPV4 (228)", segs, LT_IPV4, lambda ip: ip)
        self.simple("linktype_ipv6", "LINKTYPE_IPV6 (229)", segs, LT_IPV6, lambda ip: ip, v6=True)
        self.simple("ethernet_ipv6", "IPv6 over Ethernet", segs, v6=True)
        self.simple(
            "pcap_nanosecond",
            "pcap with nanosecond timestamps (magic a1b23c4d)",
            segs,
            nano=True,
            first_ts_ns=BASE_NS,
        )
        frames = self.simple(
            "pcap_big_endian", "big-endian pcap (written on a big-endian host)", segs, big=True
        )

        # gzip-compressed pcap (same packets as baseline)
        self.write(
            "gzip",
            {"gzip.pcap.gz": gzip.compress(pcap_bytes(LT_EN10MB, frames), mtime=0)},
            "gzip-compressed pcap (the baseline packets)",
            [self.endpoints(self.conn())],
            self.base,
            linktype=LT_EN10MB,
        )

        # rotated into three files, like tcpdump -C: name, name1, name2
        thirds = [
            frames[: len(frames) // 3],
            frames[len(frames) // 3 : 2 * len(frames) // 3],
            frames[2 * len(frames) // 3 :],
        ]
        files, idx = {}, 0
        for k, part in enumerate(thirds):
            files[f"rotated.pcap{k or ''}"] = pcap_bytes(LT_EN10MB, part, first_index=idx)
            idx += len(part)
        self.write(
            "rotated",
            files,
            "the baseline capture rotated into 3 files like tcpdump -C "
            "(rotated.pcap, rotated.pcap1, rotated.pcap2); read together they give the baseline",
            [self.endpoints(self.conn())],
            self.base,
            linktype=LT_EN10MB,
        )

        # pcapng: two sections (the second big-endian), two interfaces of different link types each;
        # four connections, one per interface
        sections, conns, exchanges = [], [], []
        plan = [(False, [(LT_EN10MB, 6), (LT_RAW, 9)]), (True, [(LT_SLL2, 6), (LT_NULL, 9)])]
        wraps = {
            LT_EN10MB: ether,
            LT_RAW: lambda ip: ip,
            LT_SLL2: sll2,
            LT_NULL: lambda ip: null(ip, big=True),
        }
        i = 0
        for si, (big, ifaces) in enumerate(plan):
            pkts: list[tuple[int, int, bytes]] = []
            per_if = []
            for ifc, (lt, _res) in enumerate(ifaces):
                c = self.conn(v6=(si == 1 and ifc == 0), cport=CLIENT_PORT + 10 + len(conns))
                per_if.append([(ifc, wraps[lt](p)) for p in conversation(c, segs)])
                exchanges += [{**x, "connection": len(conns)} for x in self.base]
                conns.append({**self.endpoints(c), "section": si, "interface": ifc, "linktype": lt})
            # interleave the interfaces' packets
            for k in range(max(len(x) for x in per_if)):
                for lst in per_if:
                    if k < len(lst):
                        pkts.append((lst[k][0], ts_of(i), lst[k][1]))
                        i += 1
            sections.append(pcapng_section(big, ifaces, pkts, f"kanalyze crafted section {si}"))
        self.write(
            "pcapng_multi",
            {"pcapng_multi.pcapng": b"".join(sections)},
            "pcapng with 2 sections (2nd big-endian), each with 2 interfaces of different link "
            "types (EN10MB µs + RAW ns; SLL2 µs + NULL ns); one connection per interface, "
            "interleaved; "
            "section 1's SLL2 connection is IPv6",
            conns,
            exchanges,
        )

    # -- bad inputs ----------------------------------------------------------------------------

    def bad_cases(self) -> None:
        rnd = random.Random(1234)
        conn = self.conn()
        base_frames = [ether(p) for p in conversation(conn, self.src.segs)]
        full = pcap_bytes(LT_EN10MB, base_frames)

        def bad(
            name: str,
            fname: str,
            data: bytes,
            description: str,
            expect: str,
            exchanges: list[dict[str, Any]] | None = None,
            **extra: Any,
        ) -> None:
            self.write(
                name,
                {fname: data},
                description,
                [self.endpoints(conn)] if exchanges else [],
                exchanges or [],
                error_expected=expect,
                **extra,
            )

        bad("bad_empty", "bad_empty.pcap", b"", "empty file", "clear error: not a capture (empty)")
        bad(
            "bad_garbage",
            "bad_garbage.bin",
            bytes(rnd.getrandbits(8) for _ in range(4096)),
            "4 KiB of random bytes (seed 1234)",
            "clear error: not a capture",
        )
        bad(
            "bad_text",
            "bad_text.txt",
            b"This is not a capture file.\nJust some text.\n" * 20,
            "a text file",
            "clear error: not a capture",
        )
        bad(
            "bad_linktype",
            "bad_linktype.pcap",
            pcap_bytes(LT_USER0, base_frames[:6]),
            "valid pcap with LINKTYPE_USER0 (147) packets",
            "clear error (or warning): unsupported link type 147; no exchanges",
        )
        # truncated: cut in the middle of the record of packet k
        k = len(base_frames) * 2 // 3
        cut = 24 + sum(16 + len(f) for f in base_frames[:k]) + 16 + len(base_frames[k]) // 2
        complete = base_frames[:k]
        # which stream bytes are in the complete packets?
        c2s_have = s2c_have = 0
        for seg in self.src.segs[: max(0, k - 3)]:
            if seg.dir == "c2s":
                c2s_have = max(c2s_have, seg.off + len(seg.data))
            else:
                s2c_have = max(s2c_have, seg.off + len(seg.data))
        ex = expected_exchanges(
            self.src.c2s, self.src.s2c, 0, [(c2s_have, 1 << 40)], [(s2c_have, 1 << 40)]
        )
        ex = [x for x in ex if x["request_bytes"][1] <= c2s_have]
        bad(
            "bad_truncated",
            "bad_truncated.pcap",
            full[:cut],
            f"the baseline pcap cut in the middle of packet record {k + 1} (of {len(base_frames)})",
            "partial result plus a clear truncation warning; the exchanges listed are complete "
            "before the cut",
            ex,
            complete_packets=len(complete),
        )
        # a 2 GiB length prefix after a normal first request
        first_q = walk_requests(self.src.c2s)[0]
        first_r = next(
            r for r in walk_responses(self.src.s2c) if r.correlation_id == first_q.correlation_id
        )
        req = self.src.c2s[first_q.off : first_q.end]
        huge = (
            struct.pack(">ihhi", 0x7FFFFFFF, 3, 9, 99)
            + struct.pack(">h", 6)
            + b"crafty"
            + b"\0" * 40
        )
        segs = [
            Seg("c2s", 0, req),
            Seg("s2c", 0, self.src.s2c[first_r.off : first_r.end]),
            Seg("c2s", len(req), huge),
        ]
        frames = [ether(p) for p in conversation(self.conn(), segs)]
        ex = expected_exchanges(req, self.src.s2c[first_r.off : first_r.end])
        self.write(
            "bad_huge_length",
            {"bad_huge_length.pcap": pcap_bytes(LT_EN10MB, frames)},
            "one normal exchange, then a request frame whose length prefix is 0x7FFFFFFF (2 GiB) "
            "with a plausible Metadata header (correlation id 99) and 52 bytes of body before FIN",
            [self.endpoints(self.conn())],
            ex,
            linktype=LT_EN10MB,
            error_expected="no traceback, no 2 GiB allocation: the frame is rejected by the size "
            "sanity check (diagnostic and/or skipped bytes) or reported as truncated at FIN; "
            "correlation id 99 is never an 'ok' exchange",
            huge_frame={
                "direction": "c2s",
                "offset": len(req),
                "length_prefix": 0x7FFFFFFF,
                "correlation_id": 99,
            },
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=HERE / "kp_v25.pcap")
    args = ap.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    for old in OUT.iterdir():
        if old.is_file():
            old.unlink()
    src = load_source(args.source)
    c = Crafter(src)
    c.reassembly_cases()
    c.link_cases()
    c.bad_cases()
    total = 0
    for fname, size in c.written:
        print(f"{fname:34} {size:>7} B")
        total += size
    print(
        f"{len(c.written)} files, {total} B; source {src.pcap} client port {src.client_port}, "
        f"{len(c.base)} exchanges"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
