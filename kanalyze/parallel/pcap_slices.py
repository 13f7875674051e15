"""Every record header of a classic pcap, walked in slices by many workers and chained
exactly: what the byte-range planner reads (`range_plan._pcap_headers`) without one process
reading the whole file.

Why: the planner cuts at record starts, so it walks every record header of the file. For a
remote file (an object store, HDFS) that walk reads all of it through one stream on the
driver; for a large set that is the driver's cost before any task runs. Here the file is cut
into fixed byte slices and each slice is walked on its own (a Spark task: `walk_slice`):

* slice 0 starts right after the 24-byte file header, at a record: its walk is exact;
* any other slice finds a candidate first record by *resync*: the first offset from which a
  chain of `CHAIN` consecutive plausible record headers follows (captured length within the
  snap length and the original length, a sub-second fraction below one second, a time near
  the file's first packet), and walks record headers from there to past its end, as the
  planner's walk does (the same damage rules).

A resync can be fooled (packet data that look like record headers), so the driver does not
trust it: `chain` starts from slice 0 and, at each slice, takes the first exact record at or
past the slice's start and requires it among the offsets that slice walked (two walks that
share an offset agree from there on). When it is not (a false resync, a slice that found no
candidate, a walk that died on fake headers), the driver walks that gap itself, up to the
first offset the slice did walk or to its end. So the result is always exactly the single
walk's; the slices only save reading. The facts kept per record are the header's time and
captured length (`PcapFacts`: 12 bytes a record, half of what the planner's arrays hold).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import BinaryIO

from kanalyze.capture.packets import MAX_RECORD
from kanalyze.capture.source import open_source
from kanalyze.parallel.plan import BODY_US_PER_BYTE, BODY_US_PER_DATA_PACKET, ENGINE_US_PER_PACKET
from kanalyze.parallel.range_plan import (
    HEADER_US_PER_BYTE,
    HEADERS_ONLY,
    Costs,
    Layout,
    walk_costs,
)

SLICE_ENV = "KANALYZE_PLAN_SLICE_BYTES"  # bytes per slice ("0": never slice; tests: tiny)
SLICE_BYTES = 128 << 20  # a file this large or smaller is walked by one process
CHAIN = 6  # consecutive plausible record headers that make a resync candidate
BLOCK = 4 << 20  # bytes read at a time
DAY = 86_400
RESYNC_MAX = 1 << 20  # a resync believes no record longer (bounds its look-ahead's memory)
HEADER = 16


def slice_bytes() -> int:
    """The slice size from the environment (`SLICE_ENV`), else `SLICE_BYTES`; 0 turns the
    sliced walk off. A value that is not a number is ignored (the default)."""
    raw = os.environ.get(SLICE_ENV, "").strip()
    try:
        return max(0, int(raw)) if raw else SLICE_BYTES
    except ValueError:
        return SLICE_BYTES


def slices(lay: Layout, size: int) -> list[tuple[int, int]]:
    """[start, end) per slice of `size` bytes from the first record on (the last one takes
    the rest); one slice when the file is no larger than that."""
    out = []
    at = lay.data_start
    while at < lay.size:
        end = min(at + size, lay.size) if size > 0 else lay.size
        if lay.size - end < size // 4:  # no sliver at the end: the last slice takes it
            end = lay.size
        out.append((at, end))
        at = end
    return out


@dataclass(slots=True)
class SliceWalk:
    """One slice's walk: the records starting in [first, end) (their headers' seconds,
    fractions and captured lengths, little-endian uint32 bytes), then either the offset of
    the first record at or past `end` (`next`) or, when `damaged`, the offset of a record the
    planner's walk calls damaged (it ends the walk). `first` -1: no resync candidate."""

    start: int
    end: int
    first: int = -1
    sec: bytes = b""
    frac: bytes = b""
    incl: bytes = b""
    next: int = -1
    damaged: bool = False


def _le(a: array) -> bytes:
    if sys.byteorder == "big":  # pragma: no cover - every Spark host here is little-endian
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(raw: bytes) -> array:
    a = array("I")
    a.frombytes(raw)
    if sys.byteorder == "big":  # pragma: no cover
        a.byteswap()
    return a


class _Blocks:
    """Reads at mostly increasing offsets of a stream, a block at a time (`buf` starts at
    `at`): a resync looks ahead from a candidate and comes back to the next one, so the
    bytes from `keep` on stay."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size = f, size
        self.buf, self.at = b"", 0

    def ensure(self, pos: int, n: int, keep: int = -1) -> bool:
        """Make [pos, pos+n) readable in `buf` (and [keep, pos) when `keep` is in it); False
        when the file ends before that."""
        end = self.at + len(self.buf)
        if self.at <= pos and pos + n <= end:
            return True
        if pos + n > self.size:
            return False
        lo = keep if 0 <= keep <= pos else pos
        if self.at <= lo <= end and self.buf:  # go on from the buffer's end
            self.f.seek(end)
            self.buf = self.buf[lo - self.at :] + self.f.read(max(BLOCK, pos + n - end))
        else:  # a fresh block (what lies between is skipped: bodies are not needed)
            self.f.seek(lo)
            self.buf = self.f.read(max(BLOCK, pos + n - lo))
        self.at = lo
        return pos + n <= self.at + len(self.buf)


@dataclass(slots=True)
class _Walker:
    """The planner's walk over record headers (`range_plan._pcap_headers`'s rules), with the
    facts appended to three arrays."""

    blocks: _Blocks
    lay: Layout
    sec: array = field(default_factory=lambda: array("I"))
    frac: array = field(default_factory=lambda: array("I"))
    incl: array = field(default_factory=lambda: array("I"))

    def walk(self, pos: int, end: int, join: Sequence[int] = ()) -> tuple[int, bool]:
        """Records from `pos` while they start before `end` and not at an offset of `join`
        (sorted): (where it stopped, whether at a damaged record)."""
        unpack = struct.Struct(self.lay.endian + "IIII").unpack_from
        b, size = self.blocks, self.lay.size
        sec, frac, incl = self.sec.append, self.frac.append, self.incl.append
        lo = join[0] if join else size + 1
        buf, at, lim = b.buf, b.at, b.at + len(b.buf) - HEADER  # a header at <= lim is in buf
        while pos < end:
            if pos >= lo:
                i = bisect_left(join, pos)
                if i < len(join) and join[i] == pos:
                    return pos, False
            if not at <= pos <= lim:
                if size - pos < HEADER or not b.ensure(pos, HEADER):
                    return pos, True
                buf, at, lim = b.buf, b.at, b.at + len(b.buf) - HEADER
            s, fr, n, _o = unpack(buf, pos - at)
            if n > MAX_RECORD or pos + HEADER + n > size:
                return pos, True
            sec(s)
            frac(fr)
            incl(n)
            pos += HEADER + n
        return pos, False


def _plausible(lay: Layout) -> tuple[int, int, int, int]:
    """(most captured bytes, fraction bound, earliest and latest second) of a header a
    resync believes."""
    snap = lay.snaplen if 0 < lay.snaplen <= RESYNC_MAX else RESYNC_MAX
    first = lay.first_ts_ns // 1_000_000_000
    return snap, 1_000_000_000 // lay.ns_mult, first - DAY, first + 100 * 365 * DAY


def resync(blocks: _Blocks, lay: Layout, start: int, end: int) -> int:
    """The first offset in [start, end) where `CHAIN` plausible record headers follow one
    another (or end the file exactly); -1 when there is none. A record no longer than the
    snap length starts within that many bytes, so the search stops there (garbage or longer
    records: the driver walks the slice)."""
    unpack = struct.Struct(lay.endian + "IIII").unpack_from
    snap, fmax, lo, hi = _plausible(lay)
    size = lay.size
    for cand in range(start, min(end, start + HEADER + snap + 1)):
        if not blocks.ensure(cand, HEADER):
            return -1
        s, fr, n, o = unpack(blocks.buf, cand - blocks.at)
        if n > snap or n > o or fr >= fmax or not lo <= s <= hi:
            continue
        pos, prev, ok = cand, s, True
        for _ in range(CHAIN):
            if pos == size:
                break
            if not blocks.ensure(pos, HEADER, cand):
                ok = False
                break
            s, fr, n, o = unpack(blocks.buf, pos - blocks.at)
            if (n > snap or n > o or o > MAX_RECORD or fr >= fmax or not lo <= s <= hi
                    or abs(s - prev) > DAY or pos + HEADER + n > size):
                ok = False
                break
            prev, pos = s, pos + HEADER + n
        if ok:
            return cand
    return -1


def walk_slice(path: str, lay: Layout, start: int, end: int) -> SliceWalk:
    """A task's work: resync in [start, end) (none needed at the first record) and the
    record headers from there to past `end`. Never raises on bad bytes: a slice that cannot
    resync is returned empty (the driver walks it)."""
    out = SliceWalk(start, end)
    with open_source(path) as f:
        blocks = _Blocks(f, lay.size)
        first = start if start == lay.data_start else resync(blocks, lay, start, end)
        if first < 0:
            return out
        w = _Walker(blocks, lay)
        out.next, out.damaged = w.walk(first, end)
    out.first = first
    out.sec, out.frac, out.incl = _le(w.sec), _le(w.frac), _le(w.incl)
    return out


@dataclass(slots=True)
class PcapFacts:
    """Every record header of a classic pcap, from its first record on: what the planner's
    walk yields (`headers`). `damaged`: the offset of the record that ends the walk as
    damaged, or -1 when the walk reaches the end of the file."""

    start: int
    sec: array
    frac: array
    incl: array
    damaged: int = -1
    gaps: int = 0  # slices (or parts) the driver walked itself (a false or missing resync)

    def headers(self) -> Iterator[tuple[int, int, int, int]]:
        """(offset, seconds, fraction, captured length) per record, then (offset, 0, 0, -1)
        at a damaged record: `range_plan._pcap_headers`'s stream."""
        pos = self.start
        for s, fr, n in zip(self.sec, self.frac, self.incl, strict=True):
            yield pos, s, fr, n
            pos += HEADER + n
        if self.damaged >= 0:
            yield self.damaged, 0, 0, -1

    def costs(self, mult: int, bodies: bool, span: int | None) -> Costs | None:
        """`range_plan.walk_costs` of `headers()`, vectorized when numpy is there (it comes
        with the Spark extra): the same IEEE operations in the same order (a cumulative sum
        is a running sum, not a pairwise one), so the same numbers; at 100 M records the
        loop costs the driver about a minute."""
        if self.damaged >= 0:
            return None
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - the Spark extra brings numpy
            return walk_costs(self.headers(), mult, bodies, span)
        incl = np.frombuffer(_le(self.incl), "<u4").astype(np.int64)
        size = incl + HEADER
        offs = np.empty(len(incl), np.int64)
        if len(incl):
            offs[0] = self.start
            np.cumsum(size[:-1], out=offs[1:])
            offs[1:] += self.start
        if span is not None:
            cost = size.astype(np.float64)
        else:
            cost = np.full(len(incl), ENGINE_US_PER_PACKET, np.float64)
            big = incl > HEADERS_ONLY
            per = incl[big].astype(np.float64)
            if bodies:  # E + (D + B * incl), as `_record_cost` adds it
                cost[big] += BODY_US_PER_DATA_PACKET + BODY_US_PER_BYTE * per
            else:
                cost[big] += HEADER_US_PER_BYTE * per
        costs = np.cumsum(cost)
        sec = np.frombuffer(_le(self.sec), "<u4").astype(np.int64)
        frac = np.frombuffer(_le(self.frac), "<u4").astype(np.int64)
        times = sec * 1_000_000_000 + frac * mult
        out: tuple[array, array, array] = (array("q"), array("d"), array("q"))
        for a, v in zip(out, (offs, costs, times), strict=True):
            a.frombytes(v.tobytes())  # native order, as array's
        return out[0], out[1], out[2], float(costs[-1]) if len(costs) else 0.0


def _offsets(first: int, incl: array) -> list[int]:
    """The offsets of a walk's records."""
    return list(accumulate((HEADER + n for n in incl[:-1]), initial=first)) if incl else []


def chain(path: str, lay: Layout, walks: Sequence[SliceWalk]) -> PcapFacts:
    """The exact header stream from the slices' walks (sorted by start, covering the file
    from its first record); gaps the walks cannot prove are walked here, through
    `open_source` (see the module docstring)."""
    facts = PcapFacts(lay.data_start, array("I"), array("I"), array("I"))
    pos = lay.data_start
    with open_source(path) as f:
        driver = _Walker(_Blocks(f, lay.size), lay, facts.sec, facts.frac, facts.incl)
        for w in walks:
            if pos >= w.end:  # one record spans this whole slice
                continue
            incl = _from_le(w.incl)
            i = 0
            if pos != w.first:  # the common case: the resync found the exact record
                offs = _offsets(w.first, incl) if w.first >= 0 else []
                i = bisect_left(offs, pos)
                if i == len(offs) or offs[i] != pos:
                    facts.gaps += 1
                    pos, damaged = driver.walk(pos, w.end, offs)
                    if damaged:
                        facts.damaged = pos
                        return facts
                    if pos >= w.end:  # walked all of it: the slice's walk never joined
                        continue
                    i = bisect_left(offs, pos)  # joined: the rest is the slice's
            facts.sec.extend(_from_le(w.sec)[i:])
            facts.frac.extend(_from_le(w.frac)[i:])
            facts.incl.extend(incl[i:])
            if w.damaged:
                facts.damaged = w.next
                return facts
            pos = w.next
    return facts


__all__ = ["CHAIN", "SLICE_BYTES", "SLICE_ENV", "PcapFacts", "SliceWalk", "chain", "resync",
           "slice_bytes", "slices", "walk_slice"]
