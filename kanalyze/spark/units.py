"""Work units for stage 1: which files, in which order, cut where. Pure Python (no pyspark).

A *plan* lists the input files ranked by (capture group, first packet time,
path) — the order of a rotation chain whatever its names — and cuts big
uncompressed files into byte ranges at **verified** record boundaries
(`kanalyze.capture.split`: sync points, range walks):

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

import gzip
import io
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from dissectors import Code, Diagnostic
from kanalyze.capture import GZIP_MAGIC, CaptureError, CaptureStats, Packet, read_capture
from kanalyze.capture.split import RangeResult, iter_range, probe_layout, sync
from kanalyze.spark.balance import lpt
from kanalyze.spark.inputs import (
    content_id,
    default_capture_id,
    file_size,
    is_uri,
    list_inputs,
    local_path,
    open_input,
)

# re-exported for the pipeline and the data source
__all__ = ["RangeResult", "is_uri", "list_inputs"]

SPLIT_BYTES = 128 * 1024 * 1024


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
    file_id: str = ""  # content identity (size + hash of both ends): stable connection ids

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
            info.file_id = content_id(f, info.size)
            f.seek(0)
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                info.compressed = True
                with gzip.GzipFile(fileobj=f) as gz:
                    probe_layout(info, io.BufferedReader(gz, 1 << 16))  # type: ignore[arg-type]
            else:
                probe_layout(info, f)
    except (CaptureError, OSError, EOFError, ValueError, struct.error) as e:
        info.error = str(e)
    return info


# --------------------------------------------------------------------------- range walking
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
    skipped: list[str] = field(default_factory=list)  # inputs left out (already written)

    def to_dict(self) -> dict:
        return {
            "files": [f.to_dict() for f in self.files],
            "units": [u.to_list() for u in self.units],
            "partitions": self.partitions,
            "skipped": self.skipped,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        return cls(
            [FileInfo.from_dict(x) for x in d["files"]],
            [Unit.from_list(x) for x in d["units"]],
            [list(p) for p in d["partitions"]],
            list(d.get("skipped", [])),
        )


def rank_files(paths: list[str], capture_id: str | None = None) -> list[FileInfo]:
    """Probe and order files: by capture group, then first packet time, then path."""
    infos = [probe(p, capture_id) for p in paths]
    infos.sort(key=lambda i: (i.capture_id, i.first_ts_ns, i.path))
    for r, info in enumerate(infos):
        info.rank = r
    return infos


def candidate_ranges(info: FileInfo, split_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges [s_i, s_i+1) of a splittable file, cut at sync points (one range when
    not split)."""
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
    """Turn counted ranges into units with frame bases; fall back to one whole unit when
    unverified."""
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


def unit_bytes(units: list[Unit], files: list[FileInfo]) -> list[int]:
    return [(u.end - u.start) if not u.whole else files[u.rank].size for u in units]


def pack(
    units: list[Unit], files: list[FileInfo], parallelism: int, target_bytes: int = 128 << 20
) -> list[list[int]]:
    """Group units into stage-1 tasks by bytes: about 3 tasks per core (never one task per
    tiny file), each unit placed largest first on the lightest task, units of a task in plan
    order."""
    sizes = unit_bytes(units, files)
    total = sum(sizes)
    if not units:
        return []
    target = max(1 << 20, min(target_bytes, total // max(1, 3 * parallelism) + 1))
    tasks = min(len(units), max(1, -(-total // target)))
    placed = lpt(sizes, tasks)
    parts: list[list[int]] = [[] for _ in range(tasks)]
    for i, b in enumerate(placed):
        parts[b].append(i)
    return [p for p in parts if p]


def balanced_split(total: int, split_bytes: int, parallelism: int) -> int:
    """The range size that gives every core about 3 stage-1 tasks of equal bytes (never more
    than `split_bytes`, never below 1 MiB)."""
    return min(split_bytes, max(1 << 20, -(-total // max(1, 3 * parallelism))))


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
    """The packets of one unit with `file_index` = the file's rank and `file_no` = its frame
    number."""
    info = plan.files[unit.rank]
    if info.error:
        return
    if unit.whole:
        if is_uri(info.path):
            yield from _iter_remote_whole(info, stats)
            return
        yield from read_capture(local_path(info.path), stats, info.rank)
        return
    result = RangeResult()
    with open_input(info.path) as f:
        yield from iter_range(f, info, unit.start, unit.end, result, unit.base)
    stats.files.append(info.path)
    stats.packets += result.count
    if result.error:
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
