"""Capture files in, packets out: opening (gzip detected by magic, `-` for stdin), telling pcap
from pcapng, merging several files by timestamp.

Readers stream: a file is read in large blocks and cut into packets without holding more than
one block plus one packet. Problems inside a file (a truncated record, an absurd length) end
that file with a diagnostic; a file that is not a capture at all raises `CaptureError` with a
clear reason.
"""

from __future__ import annotations

import gzip
import heapq
import io
import mmap
import os
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from kanalyze.capture.packets import CaptureError, CaptureStats, Packet
from kanalyze.capture.pcap import PCAP_MAGICS, read_pcap, read_pcap_mapped
from kanalyze.capture.pcapng import SHB, read_pcapng

GZIP_MAGIC = b"\x1f\x8b"
READ_ERRORS = (OSError, EOFError, gzip.BadGzipFile, zlib.error)  # what a damaged file raises


def open_capture(path: str) -> tuple[BinaryIO, str, list[BinaryIO]]:
    """Open a path ('-' is stdin), transparently un-gzipping: (stream, display name, to close)."""
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
    f, name, owned = open_capture(path)
    stats.files.append(name)
    try:
        try:
            magic = f.read(4)
        except READ_ERRORS as e:
            raise CaptureError(f"{name}: cannot read: {e}") from None
        if len(magic) < 4:
            raise CaptureError(f"{name}: empty or too short to be a capture ({len(magic)} bytes)")
        m = _mapped(f) if magic in PCAP_MAGICS else None
        if m is not None:
            gen = read_pcap_mapped(m, name, stats, file_index, views)
        elif magic in PCAP_MAGICS:
            gen = read_pcap(f, magic, name, stats, file_index, views)
        elif magic == SHB:
            gen = read_pcapng(f, magic, name, stats, file_index)
        else:
            raise CaptureError(
                f"{name}: not a pcap or pcapng file (starts with {magic.hex()}); "
                "kanalyze reads pcap, pcapng and their gzip-compressed forms"
            )
        try:
            yield from gen
        except (*READ_ERRORS, ValueError) as e:
            stats.damage(name, 0, f"read error: {e}")
    finally:
        for g in owned:
            g.close()


def _mapped(f: BinaryIO) -> mmap.mmap | None:
    """The whole of `f` mapped read-only when asked for (`KANALYZE_MMAP=1`) and it is a plain
    regular file (not stdin, a pipe or a gzip stream), else None: a mapped pcap is cut into
    packets without copying it. Opt-in, because a file truncated while mapped (a `tcpdump -W`
    ring reusing it) kills the process with SIGBUS instead of giving a damage diagnostic."""
    if type(f) is not io.BufferedReader or not os.environ.get("KANALYZE_MMAP"):
        return None
    try:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size < 4:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def read_captures(
    paths: Iterable[str], stats: CaptureStats | None = None, views: bool = False
) -> Iterator[Packet]:
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
    if len(gens) == 1:  # numbered by its reader already (`no` is `file_no`)
        yield from gens[0]
        return
    merged = heapq.merge(*gens, key=lambda p: (p.ts_ns, p.file_index, p.file_no))
    for n, pkt in enumerate(merged, 1):
        pkt.no = n
        yield pkt


def _prepend(first: Packet, rest: Iterator[Packet]) -> Iterator[Packet]:
    yield first
    yield from rest
