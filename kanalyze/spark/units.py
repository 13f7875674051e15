"""Work units for stage 1: which files, in which order, cut where. Pure Python (no pyspark).

A *plan* lists the input files ranked by (capture group, first packet time,
path) — the order of a rotation chain whatever its names — and cuts big
uncompressed files into byte ranges at **verified** record boundaries:

* ``sync(x)`` is the first offset ≥ x where a chain of plausible records
  starts (8 pcap records / 4 pcapng blocks, or a chain that ends exactly at
  end of file). It is deterministic, so every task computes the same cuts.
* Each range is walked record by record from its start; the walk must land
  exactly on the next range's start. Range 0 starts at the first record, so
  by induction every cut lies on the true record chain. A walk that misses
  (or a pcapng range that meets a new section or interface block) makes the
  planner fall back to reading that file as one unit.
* The walk also counts records, which gives every range the frame number of
  its first packet: pointers back into the files are real frame numbers.

Whole files (small, gzip-compressed, or unsplittable) are read with
``kanalyze.capture.read_capture``, the offline reader itself.
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import BinaryIO

from kanalyze.capture import (
    MAX_RECORD,
    PCAP_MAGICS,
    PCAPNG_SHB,
    CaptureError,
    CaptureStats,
    Packet,
    _idb_resolution,
    read_capture,
)

SPLIT_BYTES = 128 * 1024 * 1024
PCAP_CHAIN = 8
PCAPNG_CHAIN = 4
MAX_ORIG = 16 * 1024 * 1024  # an original length above this is not a real packet
DAY = 86_400
PACKET_BLOCKS = (2, 3, 6)
KNOWN_BLOCKS = frozenset({1, 2, 3, 4, 5, 6, 0x0BAD, 0x40000BAD, 0x0A0D0D0A})


# --------------------------------------------------------------------------- file access
def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def open_input(path: str) -> BinaryIO:
    """A seekable binary stream: local paths directly, URIs (s3://, hdfs://, gs://, ...) through pyarrow.fs."""
    if is_uri(path):
        try:
            from pyarrow import fs as pafs
        except ImportError:  # pragma: no cover - pyarrow comes with the spark extra
            raise CaptureError(f"{path}: reading URIs needs pyarrow") from None
        try:
            filesystem, inner = pafs.FileSystem.from_uri(path)
            return filesystem.open_input_file(inner)  # type: ignore[return-value]
        except (OSError, ValueError) as e:
            raise CaptureError(f"{path}: cannot open: {e}") from None
    try:
        return open(_local(path), "rb", buffering=0)  # noqa: SIM115 - caller closes
    except OSError as e:
        raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None


def file_size(path: str) -> int:
    if is_uri(path):
        from pyarrow import fs as pafs

        filesystem, inner = pafs.FileSystem.from_uri(path)
        return int(filesystem.get_file_info(inner).size or 0)
    return os.path.getsize(_local(path))


def list_inputs(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Expand directories (recursively) and globs; URIs go through pyarrow.fs. Sorted, deduplicated."""
    out: list[str] = []
    for p in paths:
        if is_uri(p):
            from pyarrow import fs as pafs

            filesystem, inner = pafs.FileSystem.from_uri(p)
            info = filesystem.get_file_info(inner)
            if info.type == pafs.FileType.Directory:
                scheme = p.split("://", 1)[0]
                sel = pafs.FileSelector(inner, recursive=True)
                out.extend(
                    f"{scheme}://{i.path}"
                    for i in filesystem.get_file_info(sel)
                    if i.type == pafs.FileType.File
                )
            else:
                out.append(p)
            continue
        p = _local(p)
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                out.extend(os.path.join(root, f) for f in files if not f.startswith("."))
        elif any(c in p for c in "*?["):
            out.extend(x for x in glob.glob(p, recursive=True) if os.path.isfile(x))
        else:
            out.append(p)
    return sorted(dict.fromkeys(out))


def default_capture_id(path: str) -> str:
    """The capture group: the parent directory (files captured at one point live together)."""
    return os.path.dirname(path.rstrip("/")) or "."


# --------------------------------------------------------------------------- probing
@dataclass(slots=True)
class FileInfo:
    """What the planner knows about one input file (JSON-serializable, shipped to tasks)."""

    path: str
    capture_id: str = ""
    size: int = 0
    format: str = ""  # pcap, pcapng, or "" when not a capture
    compressed: bool = False
    endian: str = "<"
    ns_mult: int = 1000
    linktype: int = -1
    snaplen: int = 0
    data_start: int = 0  # offset of the first packet record/block
    first_ts_ns: int = 0
    ifaces: list[list[int]] = field(default_factory=list)  # pcapng: [linktype, num, den, offset]
    error: str = ""
    rank: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> FileInfo:
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def probe(path: str, capture_id: str | None = None) -> FileInfo:
    """Read the header and first packet of a file (cheap); errors are recorded, not raised."""
    info = FileInfo(
        path=path, capture_id=capture_id if capture_id is not None else default_capture_id(path)
    )
    try:
        info.size = file_size(path)
        with open_input(path) as f:
            head = f.read(2)
            if head == b"\x1f\x8b":
                info.compressed = True
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as gz:
                    _probe_stream(info, io.BufferedReader(gz, 1 << 16))  # type: ignore[arg-type]
            else:
                f.seek(0)
                _probe_stream(info, f)
    except (CaptureError, OSError, EOFError, ValueError, struct.error) as e:
        info.error = str(e)
    return info


def _probe_stream(info: FileInfo, f: BinaryIO) -> None:
    magic = f.read(4)
    if magic in PCAP_MAGICS:
        info.format = "pcap"
        info.endian, info.ns_mult = PCAP_MAGICS[magic]
        hdr = f.read(20)
        if len(hdr) < 20:
            raise CaptureError("pcap global header is truncated")
        _a, _b, _z, _s, info.snaplen, network = struct.unpack(info.endian + "HHiIII", hdr)
        info.linktype = network & 0x0FFFFFFF
        info.data_start = 24
        rec = f.read(16)
        if len(rec) == 16:
            sec, frac, _i, _o = struct.unpack(info.endian + "IIII", rec)
            info.first_ts_ns = sec * 1_000_000_000 + frac * info.ns_mult
        return
    if magic == PCAPNG_SHB:
        info.format = "pcapng"
        _probe_pcapng(info, f, magic)
        return
    raise CaptureError(f"not a pcap or pcapng file (starts with {magic.hex()})")


def _probe_pcapng(info: FileInfo, f: BinaryIO, magic: bytes) -> None:
    blen_raw = f.read(4)
    bom = f.read(4)
    if bom == b"\x4d\x3c\x2b\x1a":
        endian = "<"
    elif bom == b"\x1a\x2b\x3c\x4d":
        endian = ">"
    else:
        raise CaptureError("pcapng section header has a bad byte-order magic")
    info.endian = endian
    blen = struct.unpack(endian + "I", blen_raw)[0]
    if blen < 28 or blen % 4:
        raise CaptureError(f"pcapng section header length {blen} is invalid")
    f.read(blen - 12)
    off = blen
    while True:
        bh = f.read(8)
        if len(bh) < 8:
            info.data_start = off
            return
        btype, blen = struct.unpack(endian + "II", bh)
        if blen < 12 or blen % 4 or blen > MAX_RECORD:
            info.data_start = off
            return
        body = f.read(blen - 8)[:-4]
        if btype == 1 and len(body) >= 8:
            lt = struct.unpack_from(endian + "H", body, 0)[0]
            num, den, tsoff = _idb_resolution(body, endian)
            info.ifaces.append([lt, num, den, tsoff])
            if info.linktype < 0:
                info.linktype = lt
        elif btype in PACKET_BLOCKS:
            info.data_start = off
            if btype == 6 and len(body) >= 20:
                iface, hi, lo = struct.unpack_from(endian + "III", body, 0)
                if iface < len(info.ifaces):
                    _lt, num, den, tsoff = info.ifaces[iface]
                    info.first_ts_ns = ((hi << 32) | lo) * num // den + tsoff
            elif btype == 2 and len(body) >= 20:
                iface, _d, hi, lo = struct.unpack_from(endian + "HHII", body, 0)
                if iface < len(info.ifaces):
                    _lt, num, den, tsoff = info.ifaces[iface]
                    info.first_ts_ns = ((hi << 32) | lo) * num // den + tsoff
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


def _pcap_chain(w: _Window, info: FileInfo, off: int) -> bool:
    rec = struct.Struct(info.endian + "IIII")
    frac_max = 1_000_000 if info.ns_mult == 1000 else 1_000_000_000
    cap = info.snaplen if info.snaplen else MAX_RECORD
    anchor = info.first_ts_ns // 1_000_000_000
    prev = None
    for _ in range(PCAP_CHAIN):
        if off == info.size:
            return prev is not None  # the chain ends exactly at end of file
        h = w.get(off, 16)
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
        off += 16 + incl
        if off > info.size:
            return False
    return True


def _pcapng_chain(w: _Window, info: FileInfo, off: int) -> bool:
    e = info.endian
    for i in range(PCAPNG_CHAIN):
        if off == info.size:
            return i > 0
        h = w.get(off, 8)
        if h is None:
            return False
        btype, blen = struct.unpack(e + "II", h)
        if (
            btype not in KNOWN_BLOCKS
            or blen < 12
            or blen % 4
            or blen > MAX_RECORD
            or off + blen > info.size
        ):
            return False
        tail = w.get(off + blen - 4, 4)
        if tail is None or struct.unpack(e + "I", tail)[0] != blen:
            return False
        if btype == 6:
            eh = w.get(off + 8, 20)
            if eh is None:
                return False
            iface, _hi, _lo, caplen, _orig = struct.unpack(e + "IIIII", eh)
            if iface >= max(1, len(info.ifaces)) or 32 + caplen > blen:
                return False
        off += blen
    return True


def sync(f: BinaryIO, info: FileInfo, x: int) -> int:
    """The first offset ≥ x where a plausible record chain starts (info.size when none)."""
    x = max(x, info.data_start)
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
        if off - w.start > (64 << 20):  # keep the window bounded on hostile input
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
    info: FileInfo,
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
    no = base
    rank = info.rank
    if info.format == "pcap":
        rec = struct.Struct(info.endian + "IIII")
        mult, lt = info.ns_mult, info.linktype
        while rd.offset < end:
            h = rd.take(16)
            if h is None:
                break
            sec, frac, incl, _orig = rec.unpack(h)
            if incl > MAX_RECORD:
                result.error = f"offset {rd.offset - 16}: record claims {incl} bytes"
                break
            body = rd.take(incl)
            if body is None:
                result.error = f"offset {rd.offset - 16}: truncated record"
                break
            ts = sec * 1_000_000_000 + frac * mult
            no += 1
            if not result.first_ts_ns:
                result.first_ts_ns = ts
            result.last_ts_ns = ts
            if data:
                yield Packet(0, ts, lt, body, rank, no)
    else:
        e = info.endian
        hdr = struct.Struct(e + "II")
        ifaces = info.ifaces
        while rd.offset < end:
            off = rd.offset
            bh = rd.take(8)
            if bh is None:
                break
            btype, blen = hdr.unpack(bh)
            if bh[:4] == PCAPNG_SHB or btype == 1:
                result.whole_file_needed = True
                break
            if blen < 12 or blen % 4 or blen > MAX_RECORD:
                result.error = f"offset {off}: block length {blen} is invalid"
                break
            body = rd.take(blen - 8)
            if body is None:
                result.error = f"offset {off}: truncated block"
                break
            if btype in (6, 2):
                if btype == 6:
                    iface, hi, lo, caplen, _o = struct.unpack_from(e + "IIIII", body, 0)
                else:
                    iface, _d, hi, lo, caplen, _o = struct.unpack_from(e + "HHIIII", body, 0)
                if iface >= len(ifaces) or 20 + caplen > len(body) - 4:
                    result.error = f"offset {off}: bad packet block"
                    continue
                lt, num, den, tsoff = ifaces[iface]
                ts = ((hi << 32) | lo) * num // den + tsoff
                pkt_data = body[20 : 20 + caplen]
            elif btype == 3:
                if not ifaces:
                    continue
                lt, ts, pkt_data = ifaces[0][0], 0, body[4:-4]
            else:
                continue
            no += 1
            if not result.first_ts_ns:
                result.first_ts_ns = ts
            result.last_ts_ns = ts
            if data:
                yield Packet(0, ts, lt, pkt_data, rank, no)
    result.count = no - base
    result.stop = rd.offset


def walk_range(path: str, info: FileInfo, start: int, end: int) -> RangeResult:
    """Count the records of one range and say where the walk stopped (no packet objects kept)."""
    result = RangeResult()
    with open_input(path) as f:
        for _ in iter_range(f, info, start, end, result, data=False):
            pass
    return result


# --------------------------------------------------------------------------- the plan
@dataclass(slots=True)
class Unit:
    """One piece of stage-1 work: a whole file, or [start, end) of one with known frame base."""

    rank: int
    start: int = 0
    end: int = 0
    base: int = 0  # frame number of the packet before the range's first
    whole: bool = True
    index: int = 0  # position within its file

    def to_list(self) -> list[int]:
        return [self.rank, self.start, self.end, self.base, int(self.whole), self.index]

    @classmethod
    def from_list(cls, v: list[int]) -> Unit:
        return cls(v[0], v[1], v[2], v[3], bool(v[4]), v[5])


@dataclass(slots=True)
class Plan:
    files: list[FileInfo]
    units: list[Unit]
    partitions: list[list[int]]  # unit indices per stage-1 task

    def to_dict(self) -> dict:
        return {
            "files": [f.to_dict() for f in self.files],
            "units": [u.to_list() for u in self.units],
            "partitions": self.partitions,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        return cls(
            [FileInfo.from_dict(x) for x in d["files"]],
            [Unit.from_list(x) for x in d["units"]],
            [list(p) for p in d["partitions"]],
        )


def rank_files(paths: list[str], capture_id: str | None = None) -> list[FileInfo]:
    """Probe and order files: by capture group, then first packet time, then path."""
    infos = [probe(p, capture_id) for p in paths]
    infos.sort(key=lambda i: (i.capture_id, i.first_ts_ns, i.path))
    for r, info in enumerate(infos):
        info.rank = r
    return infos


def candidate_ranges(info: FileInfo, split_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges [s_i, s_i+1) of a splittable file, cut at sync points (one range when not split)."""
    if info.error or info.compressed or not info.format or info.size <= split_bytes:
        return [(0, info.size)]
    starts = [info.data_start]
    with open_input(info.path) as f:
        x = split_bytes
        while x < info.size:
            s = sync(f, info, x)
            if s >= info.size:
                break
            if s > starts[-1]:
                starts.append(s)
            x = max(x + split_bytes, s + 1)
    if len(starts) == 1:
        return [(0, info.size)]
    return [(s, e) for s, e in zip(starts, [*starts[1:], info.size], strict=True)]


def finish_units(
    info: FileInfo, ranges: list[tuple[int, int]], results: list[RangeResult]
) -> list[Unit]:
    """Turn counted ranges into units with frame bases; fall back to one whole unit when unverified."""
    if len(ranges) == 1:
        return [Unit(info.rank)]
    base = 0
    units = []
    for i, ((s, e), r) in enumerate(zip(ranges, results, strict=True)):
        ok = not r.whole_file_needed and not r.error and r.stop == e
        if not ok and not (
            i == len(ranges) - 1 and r.error
        ):  # damage at the very end is the offline behaviour too
            return [Unit(info.rank)]
        units.append(Unit(info.rank, s, e, base, False, i))
        base += r.count
    return units


def pack(
    units: list[Unit], files: list[FileInfo], parallelism: int, target_bytes: int = 128 << 20
) -> list[list[int]]:
    """Group units into stage-1 tasks: about 3 tasks per core, never one task per tiny file."""
    sizes = [(u.end - u.start) if not u.whole else files[u.rank].size for u in units]
    total = sum(sizes)
    target = max(1 << 20, min(target_bytes, total // max(1, 3 * parallelism) + 1))
    parts: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    for i, sz in enumerate(sizes):
        if cur and acc + sz > target:
            parts.append(cur)
            cur, acc = [], 0
        cur.append(i)
        acc += sz
    if cur:
        parts.append(cur)
    return parts


def plan_local(
    paths: list[str],
    split_bytes: int = SPLIT_BYTES,
    parallelism: int = 2,
    capture_id: str | None = None,
) -> Plan:
    """A complete plan computed in this process (range walks run sequentially here)."""
    files = rank_files(list_inputs(paths), capture_id)
    units: list[Unit] = []
    for info in files:
        ranges = candidate_ranges(info, split_bytes)
        results = [walk_range(info.path, info, s, e) for s, e in ranges] if len(ranges) > 1 else []
        units.extend(finish_units(info, ranges, results))
    return Plan(files, units, pack(units, files, parallelism))


# --------------------------------------------------------------------------- reading units
def iter_unit(plan: Plan, unit: Unit, stats: CaptureStats) -> Iterator[Packet]:
    """The packets of one unit with `file_index` = the file's rank and `file_no` = its frame number."""
    info = plan.files[unit.rank]
    if info.error:
        return
    if unit.whole:
        if is_uri(info.path):
            yield from _iter_remote_whole(info, stats)
            return
        yield from read_capture(_local(info.path), stats, info.rank)
        return
    result = RangeResult()
    with open_input(info.path) as f:
        yield from iter_range(f, info, unit.start, unit.end, result, unit.base)
    stats.files.append(info.path)
    stats.packets += result.count
    if result.error:
        from dissectors.diagnostics import Code, Diagnostic

        stats.diagnostics.append(
            (info.path, Diagnostic(Code.BAD_CAPTURE, result.stop, result.error))
        )


def _iter_remote_whole(info: FileInfo, stats: CaptureStats) -> Iterator[Packet]:
    """A remote whole file is staged to a local temporary file, then read by the offline reader."""
    with tempfile.NamedTemporaryFile(prefix="kanalyze-", suffix=".cap") as tmp:
        with open_input(info.path) as src:
            shutil.copyfileobj(src, tmp, 4 << 20)
        tmp.flush()
        yield from read_capture(tmp.name, stats, info.rank)
