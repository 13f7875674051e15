"""The classic pcap format: global header, packet records, the magic numbers.

One description of the format for the streaming reader, the Spark probe and split walker
(`split.py`) and the writer (`writer.py`).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from kanalyze.capture.packets import BLOCK, MAX_RECORD, CaptureError, CaptureStats, Packet

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),  # little endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
NS_MAGIC_LE = 0xA1B23C4D  # written little endian: b"\x4d\x3c\xb2\xa1"
GLOBAL_HEADER = 24
RECORD_HEADER = 16
LINKTYPE_MASK = 0x0FFFFFFF  # the upper bits of the network field carry FCS information


class PcapHeader(NamedTuple):
    """A pcap global header: byte order, ns per timestamp fraction unit, snap length, link type."""

    endian: str
    ns_mult: int
    snaplen: int
    linktype: int

    def record(self) -> struct.Struct:
        """The packet record header: seconds, fraction, captured length, original length."""
        return struct.Struct(self.endian + "IIII")


def parse_header(magic: bytes, rest: bytes, name: str = "") -> PcapHeader:
    """The global header from its magic and the 20 bytes after it (CaptureError if short)."""
    endian, ns_mult = PCAP_MAGICS[magic]
    if len(rest) < GLOBAL_HEADER - 4:
        raise CaptureError(
            f"{name}: pcap global header is truncated"
            if name
            else "pcap global header is truncated"
        )
    _vmaj, _vmin, _zone, _sigfigs, snaplen, network = struct.unpack(endian + "HHiIII", rest[:20])
    return PcapHeader(endian, ns_mult, snaplen, network & LINKTYPE_MASK)


def header_bytes(linktype: int, snaplen: int) -> bytes:
    """A nanosecond, little-endian pcap global header (what the writer produces)."""
    return struct.pack("<IHHiIII", NS_MAGIC_LE, 2, 4, 0, 0, snaplen, linktype)


def read_pcap(
    f: BinaryIO, magic: bytes, name: str, stats: CaptureStats, fi: int, views: bool = False
) -> Iterator[Packet]:
    """The packets of a pcap stream whose 4-byte magic was already read.

    The stream is read in blocks of BLOCK bytes, each a new `bytes` (packets are views of
    it with `views`, or slices); a record cut by the end of a block is completed on its own
    (its start and the bytes it still needs, a copy of one record) before the next block is
    read. Joining each block's leftover to the next block cost a second 4 MB copy and
    allocation per block (a tenth of the header index's CPU). New blocks rather than one
    reused: freeing each block lets the allocator give memory back (5,000 partial frames
    peaked at 1.9 GB RSS with a reused block against 1.1 GB, tests/functional/
    test_memory_bounds.py), and a view a consumer keeps stays valid."""
    hdr = parse_header(magic, f.read(GLOBAL_HEADER - 4), name)
    ns_mult, linktype = hdr.ns_mult, hdr.linktype
    unpack = hdr.record().unpack_from
    buf = b""
    mv = memoryview(buf)
    n = pos = 0
    base = GLOBAL_HEADER  # file offset of buf[0]
    no = 0
    nbytes = 0
    try:
        while True:
            if n - pos < RECORD_HEADER:
                need = RECORD_HEADER
            else:
                sec, frac, incl, _orig = unpack(buf, pos)
                if incl > MAX_RECORD:
                    stats.damage(
                        name,
                        base + pos,
                        f"packet record claims {incl} bytes; file damaged, stopping",
                    )
                    return
                end = pos + RECORD_HEADER + incl
                if end <= n:
                    no += 1
                    nbytes += incl
                    start = pos + RECORD_HEADER
                    data = mv[start:end] if views else buf[start:end]
                    ts = sec * 1_000_000_000 + frac * ns_mult
                    yield Packet(no, ts, linktype, data, fi, no)
                    pos = end
                    continue
                need = RECORD_HEADER + incl
            # this block is used up: a new one, or the cut record's start and its rest
            base += pos
            more = f.read(need - (n - pos) if n > pos else BLOCK)
            if not more:
                n -= pos
                if n and n < RECORD_HEADER:
                    stats.damage(name, base, f"truncated packet record header ({n} bytes)")
                elif n:
                    stats.damage(
                        name,
                        base,
                        f"truncated packet record: {need - RECORD_HEADER} bytes announced, "
                        f"{n - 16} present",
                    )
                return
            buf = buf[pos:] + more if n > pos else more
            mv = memoryview(buf)
            n = len(buf)
            pos = 0
    finally:
        stats.packets += no
        stats.bytes += nbytes


MAP_RELEASE = 16 * 1024 * 1024  # mapped bytes walked past before their pages are given back


def read_pcap_mapped(
    m: mmap.mmap, name: str, stats: CaptureStats, fi: int, views: bool = False
) -> Iterator[Packet]:
    """The packets of a pcap file mapped into memory (`m`, from its first byte): what
    `read_pcap` yields for the same file, with the same damage diagnostics, but without
    copying the file into read blocks (with `views`, packet data are views of the map).

    The map is never closed here: consumers may still hold views of it (it goes when the
    last one does). Pages walked past are handed back to the kernel every `MAP_RELEASE`
    bytes (the views stay valid; a later access maps the page again), so the resident
    memory stays flat however large the file."""
    n = len(m)
    hdr = parse_header(m[:4], m[4:GLOBAL_HEADER], name)
    ns_mult, linktype = hdr.ns_mult, hdr.linktype
    unpack = hdr.record().unpack_from
    mv = memoryview(m)
    pos = GLOBAL_HEADER
    release_at = MAP_RELEASE
    released = 0
    no = 0
    nbytes = 0
    try:
        while True:
            if n - pos < RECORD_HEADER:
                if n - pos:
                    stats.damage(name, pos, f"truncated packet record header ({n - pos} bytes)")
                return
            sec, frac, incl, _orig = unpack(m, pos)
            if incl > MAX_RECORD:
                stats.damage(
                    name, pos, f"packet record claims {incl} bytes; file damaged, stopping"
                )
                return
            end = pos + RECORD_HEADER + incl
            if end > n:
                stats.damage(
                    name,
                    pos,
                    f"truncated packet record: {incl} bytes announced, {n - pos - 16} present",
                )
                return
            no += 1
            nbytes += incl
            data = mv[pos + RECORD_HEADER : end] if views else m[pos + RECORD_HEADER : end]
            ts = sec * 1_000_000_000 + frac * ns_mult
            yield Packet(no, ts, linktype, data, fi, no)
            pos = end
            if pos >= release_at:
                upto = (pos - MAP_RELEASE // 2) & ~(mmap.PAGESIZE - 1)
                if upto > released:
                    m.madvise(mmap.MADV_DONTNEED, released, upto - released)
                    released = upto
                release_at = pos + MAP_RELEASE
    finally:
        stats.packets += no
        stats.bytes += nbytes
