"""Capture files in, packets out: pcap (µs/ns, both byte orders), pcapng, gzip, stdin.

Readers stream: a file is read in large blocks and cut into packets without
holding more than one block plus one packet. Problems inside a file (a
truncated record, an absurd length) end that file with a diagnostic; a file
that is not a capture at all raises `CaptureError` with a clear reason.
"""

from __future__ import annotations

import gzip
import heapq
import struct
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from dissectors.diagnostics import Code, Diagnostic

BLOCK = 4 * 1024 * 1024
MAX_RECORD = 256 * 1024 * 1024  # no sane packet record is larger

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000),  # little endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"


class CaptureError(Exception):
    """The input is not a readable capture (raised before any packet is produced)."""


@dataclass(slots=True)
class Packet:
    """One captured packet. `no` is 1-based in the merged input order (tshark's frame number)."""

    no: int
    ts_ns: int
    linktype: int
    data: bytes
    file_index: int = 0
    file_no: int = 0  # 1-based number within its own file (pointer back for Spark/Arkime-style use)


@dataclass(slots=True)
class CaptureStats:
    """What the readers saw, for the summary."""

    files: list[str] = field(default_factory=list)
    packets: int = 0
    bytes: int = 0
    diagnostics: list[tuple[str, Diagnostic]] = field(default_factory=list)


class _Blocks:
    """A forward-only byte source with cheap `take(n)` over large reads."""

    __slots__ = ("_f", "_buf", "_pos", "consumed")

    def __init__(self, f: BinaryIO, head: bytes = b"") -> None:
        self._f = f
        self._buf = head
        self._pos = 0
        self.consumed = 0  # absolute offset of _buf[_pos]

    def take(self, n: int) -> bytes | None:
        """Exactly n bytes, or None at end of input (a short tail is lost: check `at_eof`)."""
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


def _open(path: str) -> tuple[BinaryIO, str, list[BinaryIO]]:
    """Open a path ('-' is stdin), transparently un-gzipping; return (stream, display name, to close)."""
    if path == "-":
        raw: BinaryIO = sys.stdin.buffer
        name = "<stdin>"
    else:
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed by the reader generator
        except OSError as e:
            raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None
        name = path
    owned = [] if raw is sys.stdin.buffer else [raw]
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == GZIP_MAGIC:
        gz = gzip.GzipFile(fileobj=raw, mode="rb")
        return gz, name, [gz, *owned]  # type: ignore[list-item, return-value]
    return raw, name, owned


def read_capture(
    path: str, stats: CaptureStats | None = None, file_index: int = 0, views: bool = False
) -> Iterator[Packet]:
    """Packets of one capture file, in file order, numbered from 1.

    With `views`, pcap packet data are memoryviews into the read block (no copy);
    consumers must copy what they keep beyond the packet (the engine does).

    Raises CaptureError when the file is not a capture; later damage becomes a
    diagnostic in `stats` and ends the file.
    """
    stats = stats if stats is not None else CaptureStats()
    f, name, owned = _open(path)
    stats.files.append(name)
    try:
        try:
            magic = f.read(4)
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise CaptureError(f"{name}: cannot read: {e}") from None
        if len(magic) < 4:
            raise CaptureError(f"{name}: empty or too short to be a capture ({len(magic)} bytes)")
        if magic in PCAP_MAGICS:
            gen = _read_pcap(f, magic, name, stats, file_index, views)
        elif magic == PCAPNG_SHB:
            gen = _read_pcapng(f, magic, name, stats, file_index)
        else:
            raise CaptureError(
                f"{name}: not a pcap or pcapng file (starts with {magic.hex()}); "
                "kanalyze reads pcap, pcapng and their gzip-compressed forms"
            )
        try:
            yield from gen
        except (OSError, EOFError, gzip.BadGzipFile, ValueError, zlib.error) as e:
            _diag(stats, name, Code.BAD_CAPTURE, 0, f"read error: {e}")
    finally:
        for g in owned:
            g.close()


def _diag(stats: CaptureStats, name: str, code: Code, offset: int, msg: str) -> None:
    stats.diagnostics.append((name, Diagnostic(code, offset, msg)))


def _read_pcap(
    f: BinaryIO, magic: bytes, name: str, stats: CaptureStats, fi: int, views: bool = False
) -> Iterator[Packet]:
    endian, ns_mult = PCAP_MAGICS[magic]
    hdr = f.read(20)
    if len(hdr) < 20:
        raise CaptureError(f"{name}: pcap global header is truncated")
    _vmaj, _vmin, _zone, _sigfigs, _snap, network = struct.unpack(endian + "HHiIII", hdr)
    linktype = network & 0x0FFFFFFF
    unpack = struct.Struct(endian + "IIII").unpack_from
    buf = b""
    mv = memoryview(buf)
    pos = 0
    base = 24  # file offset of buf[0]
    no = 0
    nbytes = 0
    try:
        while True:
            n = len(buf)
            if n - pos < 16:
                more = f.read(BLOCK)
                if not more:
                    if n - pos:
                        _diag(stats, name, Code.BAD_CAPTURE, base + pos, f"truncated packet record header ({n - pos} bytes)")
                    return
                buf, base, pos = buf[pos:] + more, base + pos, 0
                mv = memoryview(buf)
                continue
            sec, frac, incl, _orig = unpack(buf, pos)
            if incl > MAX_RECORD:
                _diag(stats, name, Code.BAD_CAPTURE, base + pos, f"packet record claims {incl} bytes; file damaged, stopping")
                return
            end = pos + 16 + incl
            if end > n:
                more = f.read(max(BLOCK, end - n))
                if not more:
                    _diag(
                        stats, name, Code.BAD_CAPTURE, base + pos,
                        f"truncated packet record: {incl} bytes announced, {n - pos - 16} present",
                    )
                    return
                buf, base, pos = buf[pos:] + more, base + pos, 0
                mv = memoryview(buf)
                continue
            no += 1
            nbytes += incl
            data = mv[pos + 16 : end] if views else buf[pos + 16 : end]
            yield Packet(0, sec * 1_000_000_000 + frac * ns_mult, linktype, data, fi, no)  # type: ignore[arg-type]
            pos = end
    finally:
        stats.packets += no
        stats.bytes += nbytes


_TSRESOL_DEFAULT = 1_000  # ns per tick at the default 10^-6


def _read_pcapng(f: BinaryIO, magic: bytes, name: str, stats: CaptureStats, fi: int) -> Iterator[Packet]:
    src = _Blocks(f, magic)
    endian = "<"
    ifaces: list[tuple[int, int, int, int]] = []  # (linktype, ns numerator, ns denominator, offset ns)
    no = 0
    first = True
    while True:
        off = src.consumed
        bh = src.take(8)
        if bh is None:
            if src.leftover():
                _diag(stats, name, Code.BAD_CAPTURE, off, "truncated block header")
            return
        btype_raw = bh[:4]
        if btype_raw == PCAPNG_SHB:
            bom = src.take(4)
            if bom is None:
                _diag(stats, name, Code.BAD_CAPTURE, off, "truncated section header")
                return
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                if first:
                    raise CaptureError(f"{name}: pcapng section header has a bad byte-order magic")
                _diag(stats, name, Code.BAD_CAPTURE, off, "bad byte-order magic in section header")
                return
            blen = struct.unpack(endian + "I", bh[4:])[0]
            if blen < 28 or blen % 4 or blen > MAX_RECORD:
                _diag(stats, name, Code.BAD_CAPTURE, off, f"section header length {blen} is invalid")
                return
            if src.take(blen - 12) is None:
                _diag(stats, name, Code.BAD_CAPTURE, off, "truncated section header")
                return
            ifaces = []  # interfaces are per section
            first = False
            continue
        first = False
        btype, blen = struct.unpack(endian + "II", bh)
        if blen < 12 or blen % 4 or blen > MAX_RECORD:
            _diag(stats, name, Code.BAD_CAPTURE, off, f"block length {blen} is invalid; file damaged, stopping")
            return
        body = src.take(blen - 8)
        if body is None:
            _diag(stats, name, Code.BAD_CAPTURE, off, f"truncated block: {blen} bytes announced")
            return
        body = body[:-4]  # trailing length copy
        if btype == 1:  # interface description
            if len(body) < 8:
                _diag(stats, name, Code.BAD_CAPTURE, off, "interface block too short")
                continue
            linktype = struct.unpack_from(endian + "H", body, 0)[0]
            num, den, tsoff = _idb_resolution(body, endian)
            ifaces.append((linktype, num, den, tsoff))
        elif btype in (6, 2):  # enhanced packet / obsolete packet
            if btype == 6:
                if len(body) < 20:
                    _diag(stats, name, Code.BAD_CAPTURE, off, "enhanced packet block too short")
                    continue
                iface, hi, lo, caplen, _orig = struct.unpack_from(endian + "IIIII", body, 0)
            else:
                if len(body) < 20:
                    _diag(stats, name, Code.BAD_CAPTURE, off, "packet block too short")
                    continue
                iface, _drops, hi, lo, caplen, _orig = struct.unpack_from(endian + "HHIIII", body, 0)
            if iface >= len(ifaces):
                _diag(stats, name, Code.BAD_CAPTURE, off, f"packet names interface {iface}, which was not described")
                continue
            if 20 + caplen > len(body):
                _diag(stats, name, Code.BAD_CAPTURE, off, f"packet data length {caplen} exceeds its block")
                continue
            lt, num, den, tsoff = ifaces[iface]
            ticks = (hi << 32) | lo
            no += 1
            stats.packets += 1
            stats.bytes += caplen
            yield Packet(0, ticks * num // den + tsoff, lt, body[20 : 20 + caplen], fi, no)
        elif btype == 3:  # simple packet: interface 0, no timestamp
            if not ifaces or len(body) < 4:
                _diag(stats, name, Code.BAD_CAPTURE, off, "simple packet block without interface")
                continue
            lt = ifaces[0][0]
            no += 1
            stats.packets += 1
            stats.bytes += len(body) - 4
            yield Packet(0, 0, lt, body[4:], fi, no)
        # other block types (name resolution, statistics, custom, ...) carry no packets


def _idb_resolution(body: bytes, endian: str) -> tuple[int, int, int]:
    """(numerator, denominator, offset_ns) turning ticks into ns, from if_tsresol / if_tsoffset."""
    num, den, tsoff = _TSRESOL_DEFAULT, 1, 0
    pos = 8
    while pos + 4 <= len(body):
        code, olen = struct.unpack_from(endian + "HH", body, pos)
        pos += 4
        if code == 0:
            break
        val = body[pos : pos + olen]
        if len(val) < olen:
            break  # the option runs past the block: the options end here (fuzz finding)
        if code == 9 and olen >= 1:
            r = val[0]
            if r & 0x80:
                num, den = 1_000_000_000, 1 << (r & 0x7F)
            else:
                exp = r & 0x7F
                if exp <= 9:
                    num, den = 10 ** (9 - exp), 1
                else:
                    num, den = 1, 10 ** (exp - 9)
        elif code == 14 and olen >= 8:
            tsoff = struct.unpack(endian + "q", val[:8])[0] * 1_000_000_000
        pos += (olen + 3) & ~3
    return num, den, tsoff


def read_captures(paths: Iterable[str], stats: CaptureStats | None = None, views: bool = False) -> Iterator[Packet]:
    """Packets of several files merged by timestamp (rotated tcpdump -C/-G sets), renumbered from 1.

    Each file is opened up front so that a non-capture among them is reported
    before any output is produced.
    """
    stats = stats if stats is not None else CaptureStats()
    paths = list(paths)
    gens = []
    for i, p in enumerate(paths):
        g = read_capture(p, stats, i, views)
        first = next(g, None)  # raises CaptureError now for a bad file
        if first is not None:
            gens.append(_prepend(first, g))
    merged: Iterator[Packet] = (
        gens[0] if len(gens) == 1 else heapq.merge(*gens, key=lambda p: (p.ts_ns, p.file_index, p.file_no))
    )
    for n, pkt in enumerate(merged, 1):
        pkt.no = n
        yield pkt


def _prepend(first: Packet, rest: Iterator[Packet]) -> Iterator[Packet]:
    yield first
    yield from rest
