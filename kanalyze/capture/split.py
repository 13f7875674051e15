"""Cutting one capture file into byte ranges that can be read independently (Spark stage 1).

* ``sync(x)`` is the first offset >= x where a chain of plausible records starts (8 pcap
  records / 4 pcapng blocks, or a chain that ends exactly at end of file). It is
  deterministic, so every task computes the same cuts.
* ``iter_range`` walks a range record by record from its start and says where it stopped; the
  planner (`kanalyze.spark.units`) checks that the walk lands exactly on the next range's
  start, so by induction every cut lies on the true record chain. A pcapng range that meets a
  new section or interface block needs the whole file.

Records and blocks are decoded by `pcap.py` and `pcapng.py`, as the offline reader does.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from kanalyze.capture import pcapng
from kanalyze.capture.packets import MAX_RECORD, CaptureError, Packet
from kanalyze.capture.pcap import GLOBAL_HEADER, PCAP_MAGICS, RECORD_HEADER, parse_header

PCAP_CHAIN = 8
PCAPNG_CHAIN = 4
MAX_ORIG = 16 * 1024 * 1024  # an original length above this is not a real packet
DAY = 86_400
KNOWN_BLOCKS = frozenset({1, 2, 3, 4, 5, 6, 0x0BAD, 0x40000BAD, 0x0A0D0D0A})
WINDOW_LIMIT = 64 << 20  # bytes a sync search reads ahead before restarting its window


class Layout(Protocol):
    """What the split walker needs to know about a file (`kanalyze.spark.units.FileInfo`)."""

    size: int
    format: str  # "pcap" or "pcapng"
    endian: str
    ns_mult: int
    linktype: int
    snaplen: int
    data_start: int  # offset of the first packet record/block
    first_ts_ns: int
    ifaces: list[list[int]]  # pcapng: [linktype, num, den, offset_ns] per interface
    rank: int


def probe_layout(info: Layout, f: BinaryIO) -> None:
    """Fill `info` from the start of a capture stream: format, byte order, link type(s), where
    the packets start and the first packet's time. Raises CaptureError when it is no capture."""
    magic = f.read(4)
    if magic in PCAP_MAGICS:
        info.format = "pcap"
        hdr = parse_header(magic, f.read(GLOBAL_HEADER - 4))
        info.endian, info.ns_mult, info.snaplen, info.linktype = hdr
        info.data_start = GLOBAL_HEADER
        rec = f.read(RECORD_HEADER)
        if len(rec) == RECORD_HEADER:
            sec, frac, _i, _o = hdr.record().unpack(rec)
            info.first_ts_ns = sec * 1_000_000_000 + frac * info.ns_mult
        return
    if magic == pcapng.SHB:
        info.format = "pcapng"
        _probe_pcapng(info, f)
        return
    raise CaptureError(f"not a pcap or pcapng file (starts with {magic.hex()})")


def _probe_pcapng(info: Layout, f: BinaryIO) -> None:
    blen_raw = f.read(4)
    endian = pcapng.section_endian(f.read(4))
    if endian is None:
        raise CaptureError("pcapng section header has a bad byte-order magic")
    info.endian = endian
    blen = struct.unpack(endian + "I", blen_raw)[0]
    if blen < pcapng.MIN_SHB or blen % 4:
        raise CaptureError(f"pcapng section header length {blen} is invalid")
    f.read(blen - 12)
    off = blen
    while True:
        bh = f.read(8)
        if len(bh) < 8:
            info.data_start = off
            return
        btype, blen = struct.unpack(endian + "II", bh)
        if not pcapng.block_length_ok(blen):
            info.data_start = off
            return
        body = f.read(blen - 8)[:-4]
        if btype == pcapng.IDB and len(body) >= 8:
            iface = pcapng.interface(body, endian)
            info.ifaces.append(list(iface))
            if info.linktype < 0:
                info.linktype = iface.linktype
        elif btype in pcapng.PACKET_BLOCKS:
            info.data_start = off
            if btype != pcapng.SPB:
                with contextlib.suppress(pcapng.BlockError):  # a damaged first block: time unknown
                    info.first_ts_ns = pcapng.packet(btype, body, endian, info.ifaces)[1]
            return
        off += blen


# --------------------------------------------------------------------------- sync points
class _Window:
    """Random access to a file through one growing read-ahead window."""

    __slots__ = ("f", "start", "buf", "size")

    def __init__(self, f: BinaryIO, start: int, size: int) -> None:
        self.f, self.start, self.size = f, start, size
        self.buf = b""

    def get(self, off: int, n: int) -> bytes | None:
        """n bytes at absolute offset off, or None past end of file."""
        if off + n > self.size:
            return None
        end = off - self.start + n
        if end > len(self.buf):
            want = max(end, 2 * len(self.buf), 1 << 20)
            self.f.seek(self.start)
            self.buf = self.f.read(min(want, self.size - self.start))
        return self.buf[off - self.start : end]


def _pcap_chain(w: _Window, info: Layout, off: int) -> bool:
    rec = struct.Struct(info.endian + "IIII")
    frac_max = 1_000_000 if info.ns_mult == 1000 else 1_000_000_000
    cap = info.snaplen if info.snaplen else MAX_RECORD
    anchor = info.first_ts_ns // 1_000_000_000
    prev = None
    for _ in range(PCAP_CHAIN):
        if off == info.size:
            return prev is not None  # the chain ends exactly at end of file
        h = w.get(off, RECORD_HEADER)
        if h is None:
            return False
        sec, frac, incl, orig = rec.unpack(h)
        if frac >= frac_max or incl > cap or incl > orig or orig > MAX_ORIG or incl > MAX_RECORD:
            return False
        if anchor and not anchor - DAY <= sec <= anchor + 366 * DAY:
            return False
        if prev is not None and not prev - 2 <= sec <= prev + DAY:
            return False
        prev = sec
        off += RECORD_HEADER + incl
        if off > info.size:
            return False
    return True


def _pcapng_chain(w: _Window, info: Layout, off: int) -> bool:
    e = info.endian
    for i in range(PCAPNG_CHAIN):
        if off == info.size:
            return i > 0
        h = w.get(off, 8)
        if h is None:
            return False
        btype, blen = struct.unpack(e + "II", h)
        if btype not in KNOWN_BLOCKS or not pcapng.block_length_ok(blen) or off + blen > info.size:
            return False
        tail = w.get(off + blen - 4, 4)
        if tail is None or struct.unpack(e + "I", tail)[0] != blen:
            return False
        if btype == pcapng.EPB:
            eh = w.get(off + 8, 20)
            if eh is None:
                return False
            iface, _hi, _lo, caplen, _orig = struct.unpack(e + "IIIII", eh)
            if iface >= max(1, len(info.ifaces)) or 32 + caplen > blen:
                return False
        off += blen
    return True


def sync(f: BinaryIO, info: Layout, x: int) -> int:
    """The first offset >= x where a plausible record chain starts (info.size when none)."""
    x = max(x, info.data_start)
    chain: Callable[[_Window, Layout, int], bool]
    if info.format == "pcapng":
        x += (-x) % 4
        step, chain = 4, _pcapng_chain
    else:
        step, chain = 1, _pcap_chain
    w = _Window(f, x, info.size)
    off = x
    while off < info.size:
        if chain(w, info, off):
            return off
        off += step
        if off - w.start > WINDOW_LIMIT:  # keep the window bounded on hostile input
            w = _Window(f, off, info.size)
    return info.size


# --------------------------------------------------------------------------- range walking
class _Reader:
    """Sequential reads from an absolute offset, in large blocks."""

    __slots__ = ("f", "buf", "pos", "offset")

    def __init__(self, f: BinaryIO, start: int) -> None:
        f.seek(start)
        self.f, self.buf, self.pos, self.offset = f, b"", 0, start

    def take(self, n: int) -> bytes | None:
        end = self.pos + n
        if end > len(self.buf):
            rest = self.buf[self.pos :]
            more = self.f.read(max(4 << 20, n - len(rest)))
            self.buf, self.pos = rest + more, 0
            end = n
            if end > len(self.buf):
                return None
        out = self.buf[self.pos : end]
        self.pos = end
        self.offset += n
        return out


@dataclass(slots=True)
class RangeResult:
    """What walking one byte range found."""

    count: int = 0
    stop: int = 0  # offset where the walk stopped (must equal the next range's start)
    first_ts_ns: int = 0
    last_ts_ns: int = 0
    whole_file_needed: bool = False  # pcapng: a new section or interface inside the range
    error: str = ""


def iter_range(
    f: BinaryIO,
    info: Layout,
    start: int,
    end: int,
    result: RangeResult,
    base: int = 0,
    data: bool = True,
) -> Iterator[Packet]:
    """Packets whose record starts in [start, end) (start must be a sync point); numbered base+1...

    Reads past `end` to finish the last record. `result.stop` says where the walk stopped.
    """
    rd = _Reader(f, start)
    walk = _pcap_records if info.format == "pcap" else _pcapng_blocks
    no = base
    rank = info.rank
    for ts, lt, body in walk(rd, info, end, result):
        no += 1
        if not result.first_ts_ns:
            result.first_ts_ns = ts
        result.last_ts_ns = ts
        if data:
            yield Packet(0, ts, lt, body, rank, no)
    result.count = no - base
    result.stop = rd.offset


def _pcap_records(
    rd: _Reader, info: Layout, end: int, result: RangeResult
) -> Iterator[tuple[int, int, bytes]]:
    rec = struct.Struct(info.endian + "IIII")
    mult, lt = info.ns_mult, info.linktype
    while rd.offset < end:
        h = rd.take(RECORD_HEADER)
        if h is None:
            return
        sec, frac, incl, _orig = rec.unpack(h)
        if incl > MAX_RECORD:
            result.error = f"offset {rd.offset - RECORD_HEADER}: record claims {incl} bytes"
            return
        body = rd.take(incl)
        if body is None:
            result.error = f"offset {rd.offset - RECORD_HEADER}: truncated record"
            return
        yield sec * 1_000_000_000 + frac * mult, lt, body


def _pcapng_blocks(
    rd: _Reader, info: Layout, end: int, result: RangeResult
) -> Iterator[tuple[int, int, bytes]]:
    e = info.endian
    hdr = struct.Struct(e + "II")
    ifaces = info.ifaces
    while rd.offset < end:
        off = rd.offset
        bh = rd.take(8)
        if bh is None:
            return
        btype, blen = hdr.unpack(bh)
        if bh[:4] == pcapng.SHB or btype == pcapng.IDB:
            result.whole_file_needed = True
            return
        if not pcapng.block_length_ok(blen):
            result.error = f"offset {off}: block length {blen} is invalid"
            return
        body = rd.take(blen - 8)
        if body is None:
            result.error = f"offset {off}: truncated block"
            return
        if btype not in pcapng.PACKET_BLOCKS:
            continue
        try:
            lt, ts, pkt_data = pcapng.packet(btype, body[:-4], e, ifaces)
        except pcapng.BlockError as why:
            if btype != pcapng.SPB:  # as the offline reader, which reports it and goes on
                result.error = f"offset {off}: bad packet block ({why})"
            continue
        yield ts, lt, pkt_data
