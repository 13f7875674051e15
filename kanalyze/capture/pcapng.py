"""The pcapng format: sections, interface descriptions, packet blocks.

One description of the blocks for the streaming reader (below) and the Spark probe and split
walker (`split.py`): `section_endian`, `interface` and `packet` decode the block bodies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO, NamedTuple

from kanalyze.capture.packets import BLOCK, MAX_RECORD, CaptureError, CaptureStats, Packet

SHB = b"\x0a\x0d\x0d\x0a"  # section header block type (also the file's magic)
# block types: interface description, (obsolete) packet, simple and enhanced packet
IDB, PB, SPB, EPB = 1, 2, 3, 6
PACKET_BLOCKS = (PB, SPB, EPB)
BOM_LE, BOM_BE = b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"
MIN_SHB = 28  # type, length, byte-order magic, versions, section length, trailing length
TSRESOL_DEFAULT = 1_000  # ns per tick at the default 10^-6
OPT_END, OPT_TSRESOL, OPT_TSOFFSET = 0, 9, 14


class BlockError(Exception):
    """A packet block that cannot be used (its reason is the message); reading goes on."""


class Interface(NamedTuple):
    """An interface: its link type and how ticks become ns (ticks * num // den + offset_ns)."""

    linktype: int
    num: int
    den: int
    offset_ns: int


def section_endian(bom: bytes) -> str | None:
    """The byte order a section header's byte-order magic announces (None: not a magic)."""
    if bom == BOM_LE:
        return "<"
    if bom == BOM_BE:
        return ">"
    return None


def block_length_ok(blen: int) -> bool:
    return blen >= 12 and not blen % 4 and blen <= MAX_RECORD


def interface(body: bytes, endian: str) -> Interface:
    """An interface description block's body (at least 8 bytes): link type and timestamp
    resolution and offset (options if_tsresol and if_tsoffset)."""
    linktype = struct.unpack_from(endian + "H", body, 0)[0]
    num, den, tsoff = TSRESOL_DEFAULT, 1, 0
    pos = 8
    while pos + 4 <= len(body):
        code, olen = struct.unpack_from(endian + "HH", body, pos)
        pos += 4
        if code == OPT_END:
            break
        val = body[pos : pos + olen]
        if len(val) < olen:
            break  # the option runs past the block: the options end here (fuzz finding)
        if code == OPT_TSRESOL and olen >= 1:
            r = val[0]
            if r & 0x80:
                num, den = 1_000_000_000, 1 << (r & 0x7F)
            else:
                exp = r & 0x7F
                if exp <= 9:
                    num, den = 10 ** (9 - exp), 1
                else:
                    num, den = 1, 10 ** (exp - 9)
        elif code == OPT_TSOFFSET and olen >= 8:
            tsoff = struct.unpack(endian + "q", val[:8])[0] * 1_000_000_000
        pos += (olen + 3) & ~3
    return Interface(linktype, num, den, tsoff)


def packet(
    btype: int, body: bytes, endian: str, ifaces: Sequence[Sequence[int]]
) -> tuple[int, int, bytes]:
    """(link type, timestamp in ns, data) of a packet block's body (without the trailing
    length copy). Raises BlockError when the block is unusable. A simple packet block has no
    timestamp (0) and belongs to interface 0."""
    if btype == SPB:
        if not ifaces or len(body) < 4:
            raise BlockError("simple packet block without interface")
        return ifaces[0][0], 0, body[4:]
    if len(body) < 20:
        raise BlockError(
            "enhanced packet block too short" if btype == EPB else "packet block too short"
        )
    if btype == EPB:
        iface, hi, lo, caplen, _orig = struct.unpack_from(endian + "IIIII", body, 0)
    else:
        iface, _drops, hi, lo, caplen, _orig = struct.unpack_from(endian + "HHIIII", body, 0)
    if iface >= len(ifaces):
        raise BlockError(f"packet names interface {iface}, which was not described")
    if 20 + caplen > len(body):
        raise BlockError(f"packet data length {caplen} exceeds its block")
    lt, num, den, tsoff = ifaces[iface]
    return lt, ((hi << 32) | lo) * num // den + tsoff, body[20 : 20 + caplen]


class _Blocks:
    """A forward-only byte source with cheap `take(n)` over large reads."""

    __slots__ = ("_f", "_buf", "_pos", "consumed")

    def __init__(self, f: BinaryIO, head: bytes = b"") -> None:
        self._f = f
        self._buf = head
        self._pos = 0
        self.consumed = 0  # absolute offset of _buf[_pos]

    def take(self, n: int) -> bytes | None:
        """Exactly n bytes, or None at end of input (a short tail is lost: check `leftover`)."""
        end = self._pos + n
        if end <= len(self._buf):
            out = self._buf[self._pos : end]
            self._pos = end
            self.consumed += n
            return out
        parts = [self._buf[self._pos :]]
        have = len(parts[0])
        while have < n:
            chunk = self._f.read(max(BLOCK, n - have))
            if not chunk:
                self._buf, self._pos = b"".join(parts), 0
                return None
            parts.append(chunk)
            have += len(chunk)
        joined = b"".join(parts)
        out = joined[:n]
        self._buf, self._pos = joined, n
        self.consumed += n
        return out

    def leftover(self) -> int:
        return len(self._buf) - self._pos


def read_pcapng(
    f: BinaryIO, magic: bytes, name: str, stats: CaptureStats, fi: int
) -> Iterator[Packet]:
    """The packets of a pcapng stream whose first 4 bytes (`magic`) were already read."""
    src = _Blocks(f, magic)
    endian = "<"
    ifaces: list[Interface] = []
    no = 0
    first = True
    while True:
        off = src.consumed
        bh = src.take(8)
        if bh is None:
            if src.leftover():
                stats.damage(name, off, "truncated block header")
            return
        if bh[:4] == SHB:
            bom = src.take(4)
            if bom is None:
                stats.damage(name, off, "truncated section header")
                return
            e = section_endian(bom)
            if e is None:
                if first:
                    raise CaptureError(f"{name}: pcapng section header has a bad byte-order magic")
                stats.damage(name, off, "bad byte-order magic in section header")
                return
            endian = e
            blen = struct.unpack(endian + "I", bh[4:])[0]
            if blen < MIN_SHB or blen % 4 or blen > MAX_RECORD:
                stats.damage(name, off, f"section header length {blen} is invalid")
                return
            if src.take(blen - 12) is None:
                stats.damage(name, off, "truncated section header")
                return
            ifaces = []  # interfaces are per section
            first = False
            continue
        first = False
        btype, blen = struct.unpack(endian + "II", bh)
        if not block_length_ok(blen):
            stats.damage(name, off, f"block length {blen} is invalid; file damaged, stopping")
            return
        body = src.take(blen - 8)
        if body is None:
            stats.damage(name, off, f"truncated block: {blen} bytes announced")
            return
        body = body[:-4]  # trailing length copy
        if btype == IDB:
            if len(body) < 8:
                stats.damage(name, off, "interface block too short")
                continue
            ifaces.append(interface(body, endian))
        elif btype in PACKET_BLOCKS:
            try:
                lt, ts, data = packet(btype, body, endian, ifaces)
            except BlockError as e:
                stats.damage(name, off, str(e))
                continue
            no += 1
            stats.packets += 1
            stats.bytes += len(data)
            yield Packet(no, ts, lt, data, fi, no)
        # other block types (name resolution, statistics, custom, ...) carry no packets
