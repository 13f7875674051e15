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

    The stream is read with `readinto` into two blocks used in turn (`_Blocks`): a fresh
    4 MB `bytes` per read cost a quarter of the header index's CPU (the allocator hands
    every block back to the kernel, so each read page-faulted 1,024 new zeroed pages, and
    the leftover of each block was copied to a third). A block is reused only when no packet
    view into it is alive (a consumer may keep one: it then keeps that block to itself)."""
    hdr = parse_header(magic, f.read(GLOBAL_HEADER - 4), name)
    ns_mult, linktype = hdr.ns_mult, hdr.linktype
    unpack = hdr.record().unpack_from
    blocks = _Blocks()
    buf = blocks.buf
    mv = memoryview(buf)
    n = 0  # bytes of buf filled
    pos = 0
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
                    data = mv[pos + RECORD_HEADER : end]
                    yield Packet(
                        no,
                        sec * 1_000_000_000 + frac * ns_mult,
                        linktype,
                        data if views else data.tobytes(),  # type: ignore[arg-type]
                        fi,
                        no,
                    )
                    pos = end
                    continue
                need = RECORD_HEADER + incl
            # refill: the rest of this block to the front of a free one, then read after it
            mv = data = None  # type: ignore[assignment]
            buf = blocks.next(buf, pos, n, need)
            base += pos
            n -= pos
            pos = 0
            got = f.readinto(memoryview(buf)[n:])
            if not got:
                if not n:
                    return
                if n < RECORD_HEADER:
                    stats.damage(name, base, f"truncated packet record header ({n} bytes)")
                else:
                    stats.damage(
                        name,
                        base,
                        f"truncated packet record: {need - RECORD_HEADER} bytes announced, "
                        f"{n - 16} present",
                    )
                return
            n += got
            mv = memoryview(buf)
    finally:
        stats.packets += no
        stats.bytes += nbytes


class _Blocks:
    """The read blocks of `read_pcap`: two `bytearray`s used in turn (the consumer still holds
    the last packet of the block just finished while the next is filled), each reused once no
    view into it is left, else replaced by a new one."""

    __slots__ = ("buf", "spare")

    def __init__(self) -> None:
        self.buf = bytearray(BLOCK)
        self.spare: bytearray | None = None

    def next(self, old: bytearray, pos: int, n: int, need: int) -> bytearray:
        """A free block of at least `need` bytes (and BLOCK) holding old[pos:n] at its start."""
        new = self.spare
        size = max(BLOCK, need)
        if new is None or len(new) < size or _viewed(new):
            new = bytearray(size)
        if n > pos:
            new[: n - pos] = old[pos:n]
        self.spare = old
        self.buf = new
        return new


def _viewed(block: bytearray) -> bool:
    """Whether a memoryview of `block` is alive (a bytearray with exports cannot be resized)."""
    try:
        block.append(0)
    except BufferError:
        return True
    block.pop()
    return False


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
            yield Packet(no, sec * 1_000_000_000 + frac * ns_mult, linktype, data, fi, no)  # type: ignore[arg-type]
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
