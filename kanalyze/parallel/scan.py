"""The planner's one pass over the input: work per connection and, for an undamaged classic
pcap file, where each packet is (so a worker reads only its own packets, through mmap).

Anything else (pcapng, gzip, several files, stdin, a damaged record) is scanned through the
capture readers, and the workers then read the whole input and keep their connections: the
same output, more reading per worker.
"""

from __future__ import annotations

import mmap
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from kanalyze.capture import MAX_RECORD, PCAP_MAGICS, CaptureStats, read_captures
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.parallel.plan import ConnKey, Load, conn_key


@dataclass(slots=True)
class PcapLayout:
    """How to cut packets out of one classic pcap file (what the workers need to read it)."""

    path: str
    endian: str
    ns_mult: int
    linktype: int


@dataclass(slots=True)
class Scan:
    loads: dict[ConnKey, Load] = field(default_factory=dict)
    last_ts: int = 0  # the engine's clock at the end of input (latest TCP packet)
    captured: int = 0  # packet bytes in the file (the fast path; the readers count it otherwise)
    # the fast path: per packet (1-based no - 1), file offset of its record and its connection
    # (index into `keys`, -1: not a TCP segment); None when the input is not a classic pcap
    layout: PcapLayout | None = None
    offsets: array = field(default_factory=lambda: array("q"))
    conns: array = field(default_factory=lambda: array("i"))
    keys: list[ConnKey] = field(default_factory=list)
    # the engine's clock after each packet, for the order-window check of the merge
    clock: array = field(default_factory=lambda: array("q"))


def scan(paths: Sequence[str]) -> Scan:
    """Raises CaptureError (before any output) when an input is not a capture."""
    if len(paths) == 1 and paths[0] != "-":
        fast = _scan_pcap(paths[0])
        if fast is not None:
            return fast
    return _scan_any(paths)


def _add(loads: dict[ConnKey, Load], key: ConnKey, payload: int) -> None:
    load = loads.get(key)
    if load is None:
        load = loads[key] = Load()
    load.packets += 1
    if payload:
        load.data_packets += 1
        load.bytes += payload


def _scan_any(paths: Sequence[str]) -> Scan:
    out = Scan()
    flows = FlowStats()
    now = 0
    clock = out.clock
    for pkt in read_captures(list(paths), CaptureStats(), views=True):
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is not None:
            if pkt.ts_ns > now:
                now = pkt.ts_ns
            _add(out.loads, conn_key(seg), len(seg.payload))
        clock.append(now)
    out.last_ts = now
    return out


def _scan_pcap(path: str) -> Scan | None:
    """The fast pass over one plain, undamaged classic pcap; None for anything else."""
    try:
        with open(path, "rb") as f:
            if f.read(4) not in PCAP_MAGICS or f.seek(0, 2) < 24:
                return None
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        return _walk(path, m)
    finally:
        m.close()


def _walk(path: str, m: mmap.mmap) -> Scan | None:
    endian, ns_mult = PCAP_MAGICS[bytes(m[:4])]
    linktype = struct.unpack_from(endian + "I", m, 20)[0] & 0x0FFFFFFF
    out = Scan(layout=PcapLayout(path, endian, ns_mult, linktype))
    unpack = struct.Struct(endian + "IIII").unpack_from
    mv = memoryview(m)
    flows = FlowStats()
    ids: dict[ConnKey, int] = {}
    offsets, conns, clock, keys, loads = out.offsets, out.conns, out.clock, out.keys, out.loads
    size = len(m)
    pos = 24
    now = 0
    try:
        while pos < size:
            if size - pos < 16:
                return None  # damaged: the readers report it, the general path takes over
            sec, frac, incl, _orig = unpack(m, pos)
            end = pos + 16 + incl
            if incl > MAX_RECORD or end > size:
                return None
            # a view, as the pcap reader hands the engine (no copy)
            seg = decode_segment(linktype, mv[pos + 16 : end], flows)
            offsets.append(pos)
            out.captured += incl
            if seg is None:
                conns.append(-1)
            else:
                ts = sec * 1_000_000_000 + frac * ns_mult
                if ts > now:
                    now = ts
                key = conn_key(seg)
                kid = ids.get(key)
                if kid is None:
                    kid = ids[key] = len(keys)
                    keys.append(key)
                conns.append(kid)
                _add(loads, key, len(seg.payload))
                seg = None  # the payload view goes before the map closes
            clock.append(now)
            pos = end
    finally:
        mv.release()
    out.last_ts = now
    return out
