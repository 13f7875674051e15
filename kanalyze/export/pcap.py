"""`export -Y EXPR -w out.pcap`: a capture of exactly the packets that carry the selected
exchanges, which tshark and kanalyze open as those exchanges.

Two passes over the inputs. The first runs the engine and, beside it, notes for every packet
with payload which connection, direction and stream byte range it carries (the same
sequence-number unwrapping as the reassembly); each selected exchange contributes the byte
ranges of its request and response frames. The second pass copies the packets whose byte
range meets a selected frame's, in capture order with their original times (retransmitted
copies included), each cut down to the selected frames' bytes with its sequence numbers
closed up (pcap_rewrite.py), so no reader waits at a hole where the other exchanges were.
The SYN and SYN-ACK of the connections involved are kept too: without them a reader must
guess the roles and resynchronize, and cannot tell a reused port's new connection.
Memory: one small tuple per payload packet.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, read_captures
from kanalyze.connection import Connection
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.export.pcap_rewrite import StreamMap, rewrite
from kanalyze.flows import SYN, FlowStats, Segment, decode_segment

MASK = 0xFFFFFFFF
HALF = 0x80000000


class PcapWriteError(Exception):
    """The selection cannot be written as asked (stdin input)."""


@dataclass(slots=True)
class Coverage:
    """Per (connection id, from client): (stream start, stream end, packet number) of packets."""

    spans: dict[tuple[int, bool], list[tuple[int, int, int]]] = field(default_factory=dict)
    wanted: dict[tuple[int, bool], list[tuple[int, int]]] = field(default_factory=dict)
    bases: dict[tuple[int, bool], int] = field(default_factory=dict)  # raw seq of stream byte 0
    syns: dict[int, list[int]] = field(default_factory=dict)  # connection id -> SYN packets
    linktypes: set[int] = field(default_factory=set)  # of the inputs: several → pcapng output

    def want(self, ex: Exchange) -> None:
        for msg, is_request in ex.messages():
            p = msg.pdu
            self.wanted.setdefault((ex.conn.id, is_request), []).append(
                (p.offset, p.offset + 4 + p.size)
            )

    def packets(self) -> dict[int, tuple[tuple[int, bool], int] | None]:
        """Packet number → (direction, stream offset of its payload), for the packets whose
        bytes meet a wanted frame; → None for the SYN and SYN-ACK of their connections."""
        out: dict[int, tuple[tuple[int, bool], int] | None] = {}
        for conn_id, _is_request in self.wanted:
            for n in self.syns.get(conn_id, ()):
                out[n] = None
        for key, ranges in self.wanted.items():
            spans = self.spans.get(key)
            if not spans:
                continue
            spans.sort()
            starts = [s for s, _e, _n in spans]
            longest = max(e - s for s, e, _n in spans)
            for lo, hi in ranges:
                # spans starting before hi and ending after lo (a span is at most `longest` long)
                i = bisect.bisect_left(starts, lo - longest)
                while i < len(spans) and spans[i][0] < hi:
                    s, e, n = spans[i]
                    if e > lo:
                        out[n] = (key, s)
                    i += 1
        return out


def run_with_coverage(
    paths: Sequence[str], opts: EngineOptions, cov: Coverage, stats: CaptureStats
) -> Iterator[Exchange]:
    """Exchanges in start-time order (as `Session.exchanges`), noting each packet's bytes.

    The engine reports every segment once the roles of its connection are known
    (`Engine.on_segment`): a connection seen without its SYN is held until its bytes decide,
    and its held packets are noted when they are replayed, with their own packet numbers."""
    out: list[Exchange] = []
    engine = Engine(out.append, opts)
    spans = cov.spans

    def note(conn: Connection, from_client: bool, seg: Segment, pkt_no: int) -> None:
        if not seg.payload:
            return
        half = conn.c2s if from_client else conn.s2c
        if half.base is None:
            return
        d = (seg.seq - half.base - half.next) & MASK
        rel = half.next + (d - (MASK + 1) if d >= HALF else d)
        k = (conn.info.id, from_client)
        spans.setdefault(k, []).append((rel, rel + len(seg.payload), pkt_no))
        cov.bases.setdefault(k, half.base)

    engine.on_segment = note
    engine.fast = False  # the fused in-order path does not call on_segment
    flows = FlowStats()
    for pkt in read_captures(paths, stats, views=True):
        cov.linktypes.add(pkt.linktype)
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        engine.feed(pkt)
        if seg is not None and seg.flags & SYN:
            syn = engine.conns.get((seg.src, seg.sport, seg.dst, seg.dport))
            if syn is not None:
                cov.syns.setdefault(syn.info.id, []).append(pkt.no)
        if out:
            yield from out
            out.clear()
    engine.close()
    yield from out


def write_pcap(path: str, paths: Sequence[str], cov: Coverage) -> int:
    """Copy the packets that carry wanted frames from the inputs to `path`, rewritten to
    carry only those frames (kanalyze/export/pcap_rewrite.py); returns the count."""
    wanted = cov.packets()
    maps = {k: StreamMap(cov.wanted.get(k, []), cov.bases.get(k)) for k in cov.bases}
    writer = None
    n = 0
    try:
        for pkt in read_captures(paths, CaptureStats()):
            if pkt.no not in wanted:
                continue
            where = wanted[pkt.no]
            if where is None:  # a handshake packet: no payload, numbers already right
                data = bytes(pkt.data)
            else:
                key, lo = where
                data = rewrite(
                    pkt.linktype, pkt.data, lo, maps[key], maps.get((key[0], not key[1]))
                )
            if writer is None:
                writer = _writer(path, cov.linktypes, pkt.linktype)
            writer.write(pkt.ts_ns, data, pkt.linktype)
            n += 1
        if writer is None:  # nothing selected: an empty, valid capture
            writer = _writer(path, cov.linktypes, 1)
    finally:
        if writer is not None:
            writer.close()
    return n


class _Pcap:
    """pcap (nanosecond) of one link type, through the live writer."""

    def __init__(self, path: str, linktype: int) -> None:
        from kanalyze.capture.writer import PcapWriter

        self.w = PcapWriter(path, linktype, 262_144)

    def write(self, ts_ns: int, data: bytes, _linktype: int) -> None:
        self.w.write(ts_ns, data)

    def close(self) -> None:
        self.w.close()


class PcapngWriter:
    """pcapng with one interface per link type (for inputs that mix link types), ns times."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "wb")  # noqa: SIM115
        self.ifaces: dict[int, int] = {}
        body = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
        self._block(0x0A0D0D0A, body)

    def _block(self, kind: int, body: bytes) -> None:
        pad = -len(body) % 4
        total = 12 + len(body) + pad
        self.f.write(
            struct.pack("<II", kind, total) + body + b"\0" * pad + struct.pack("<I", total)
        )

    def write(self, ts_ns: int, data: bytes, linktype: int) -> None:
        iface = self.ifaces.get(linktype)
        if iface is None:
            iface = self.ifaces[linktype] = len(self.ifaces)
            tsresol = struct.pack("<HHB3x", 9, 1, 9)  # if_tsresol: 10^-9
            self._block(
                1, struct.pack("<HHI", linktype, 0, 262_144) + tsresol + struct.pack("<HH", 0, 0)
            )
        self._block(
            6, struct.pack("<IIIII", iface, ts_ns >> 32, ts_ns & MASK, len(data), len(data)) + data
        )

    def close(self) -> None:
        self.f.close()


def _writer(path: str, linktypes: set[int], first: int) -> _Pcap | PcapngWriter:
    return PcapngWriter(path) if len(linktypes) > 1 else _Pcap(path, first)


def export_pcap(
    path: str,
    paths: Sequence[str],
    opts: EngineOptions,
    keep: Callable[[Exchange], bool],
    stats: CaptureStats,
) -> tuple[int, int]:
    """(exchanges selected, packets written)."""
    if "-" in paths:
        raise PcapWriteError("-w needs capture files: standard input cannot be read twice")
    cov = Coverage()
    selected = 0
    for ex in run_with_coverage(paths, opts, cov, stats):
        if keep(ex):
            cov.want(ex)
            selected += 1
    return selected, write_pcap(path, paths, cov)
