"""The byte-range planner's header walk of large remote classic pcaps, done by Spark tasks.

Why: the range path cuts every capture at record starts (`range_plan.plan_chain`), which walks
every record header of the file. For a remote input that walk read the whole file through
one stream on the driver before any task ran (an object store serves one stream at tens to
hundreds of MB/s: half an hour for 100 GB). Here each large remote classic pcap is cut into
fixed byte slices (`pcap_slices.slice_bytes`, 128 MB by default; `KANALYZE_PLAN_SLICE_BYTES`),
one task per slice walks its slice through the worker's own Hadoop reader (resync, then
record headers to past its end: `pcap_slices.walk_slice`), and the driver chains the walks
exactly (`pcap_slices.chain`: a slice whose resync it cannot prove is walked on the driver).
The planner then cuts from these headers as from its own walk: the plan is the same.

A large remote pcapng is cut at sync points the driver finds (a few small reads each), and
its ranges' walks (every block, to count the packets and check the range ends where the next
begins) are Spark tasks too (`pcapng_walker`). Files no larger than one slice, local files
and compressed ones stay on the driver's walk. Driver-side; pyspark is imported when used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kanalyze.capture import CaptureError
from kanalyze.parallel.pcap_slices import PcapFacts, SliceWalk, chain, slice_bytes, slices
from kanalyze.parallel.range_plan import Layout, RangeWalks
from kanalyze.spark.units import FileInfo, is_uri

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

DDL = "task INT, first BIGINT, next BIGINT, damaged BOOLEAN, sec BINARY, frac BINARY, incl BINARY"


def layout(f: FileInfo) -> Layout:
    """The planner's layout of a probed input (`units.rank_files` ran `probe_layout`)."""
    return Layout(size=f.size, format=f.format, endian=f.endian, ns_mult=f.ns_mult,
                  linktype=f.linktype, snaplen=f.snaplen, data_start=f.data_start,
                  first_ts_ns=f.first_ts_ns, rank=f.rank)


def wanted(files: list[FileInfo], size: int) -> list[FileInfo]:
    """The inputs worth a sliced walk: remote, uncompressed classic pcaps larger than a
    slice."""
    if size <= 0:
        return []
    return [f for f in files if not f.error and not f.compressed and f.format == "pcap"
            and is_uri(f.path) and f.data_start > 0 and len(slices(layout(f), size)) > 1]


def walk_remote(spark: SparkSession, files: list[FileInfo],
                report: dict[str, float] | None = None) -> dict[str, PcapFacts]:
    """Per large remote classic pcap (`wanted`), its record headers walked by one Spark job
    (a task per slice) and chained on the driver; `plan_chain(walked=...)` plans from them.
    A file whose chain fails to read, or every file when the job fails, is left out (the
    driver's own walk then runs as before, and meets the same errors). `report` gets
    `plan_walk_tasks`, `plan_walk_s` (wall, the job and the chain) and `plan_walk_gaps`
    (slices the driver walked itself)."""
    from kanalyze.spark.hadoop_read import hadoop_settings
    from kanalyze.spark.inputs import use_hadoop

    size = slice_bytes()
    todo = wanted(files, size)
    if not todo or not use_hadoop(spark):  # no JVM here (Spark Connect): the driver's walk
        return {}
    t0 = time.perf_counter()
    settings = hadoop_settings(spark)
    paths = [f.path for f in todo]
    lays = [layout(f) for f in todo]
    work = [(i, s, e) for i, lay in enumerate(lays) for s, e in slices(lay, size)]

    def task(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from kanalyze.parallel.pcap_slices import walk_slice
        from kanalyze.spark.inputs import use_worker_hadoop

        for b in batches:
            cols: list[list] = [[] for _ in range(7)]
            for t in b.column("id").to_pylist():
                i, s, e = work[t]
                try:
                    use_worker_hadoop(settings)
                    w = walk_slice(paths[i], lays[i], s, e)
                except (CaptureError, OSError):  # unreadable here: the driver walks it
                    w = SliceWalk(s, e)
                for col, v in zip(cols, (t, w.first, w.next, w.damaged, w.sec, w.frac, w.incl),
                                  strict=True):
                    col.append(v)
            types = [pa.int32(), pa.int64(), pa.int64(), pa.bool_()] + [pa.binary()] * 3
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, ty) for c, ty in zip(cols, types, strict=True)],
                names=["task", "first", "next", "damaged", "sec", "frac", "incl"])

    n = len(work)
    try:
        rows = spark.range(0, n, 1, n).mapInArrow(task, DDL).collect()
    except Exception:  # noqa: BLE001 - a failed job (py4j's errors): the driver walks, as before
        rows = []
    walks: list[list[SliceWalk]] = [[] for _ in todo]
    for r in rows:
        i, s, e = work[r["task"]]
        walks[i].append(SliceWalk(s, e, r["first"], bytes(r["sec"]), bytes(r["frac"]),
                                  bytes(r["incl"]), r["next"], r["damaged"]))
    out: dict[str, PcapFacts] = {}
    gaps = 0
    for path, lay, got in zip(paths, lays, walks, strict=True):
        got.sort(key=lambda w: w.start)
        if [(w.start, w.end) for w in got] != slices(lay, size):
            continue  # a task's row is missing: the driver walks this file
        try:
            facts = chain(path, lay, got)
        except CaptureError:
            continue
        gaps += facts.gaps
        out[path] = facts
    if report is not None:
        report.update(plan_walk_tasks=n, plan_walk_gaps=gaps,
                      plan_walk_s=round(time.perf_counter() - t0, 2))
    return out


def pcapng_walker(spark: SparkSession, files: list[FileInfo],
                  report: dict[str, float] | None = None) -> RangeWalks | None:
    """For `plan_chain(walker=...)`: the walks of a large remote pcapng's ranges (from the
    sync points the driver found, `range_plan._pcapng_cuts`), one Spark task per range
    running the planner's own range walk (`walk_pcapng_range`) through the worker's reader;
    a range whose task could not read it, or every range when the job fails, is walked on
    the driver. None when no input is a remote, uncompressed pcapng larger than a slice."""
    from kanalyze.spark.hadoop_read import hadoop_settings
    from kanalyze.spark.inputs import use_hadoop

    size = slice_bytes()
    big = {f.path for f in files if not f.error and not f.compressed and f.format == "pcapng"
           and is_uri(f.path) and f.size > size > 0}
    if not big or not use_hadoop(spark):
        return None
    settings = hadoop_settings(spark)
    ddl = "task INT, count BIGINT, latest BIGINT, ok BOOLEAN, walked BOOLEAN"

    def walk(path: str, lay: Layout, pairs: Sequence[tuple[int, int]],
             ) -> list[tuple[int, int, bool] | None] | None:
        if path not in big or len(pairs) < 2:
            return None
        t0 = time.perf_counter()

        def task(batches: Iterator) -> Iterator:
            import pyarrow as pa

            from kanalyze.capture.source import open_source
            from kanalyze.parallel.range_plan import walk_pcapng_range
            from kanalyze.spark.inputs import use_worker_hadoop

            for b in batches:
                rows = []
                for t in b.column("id").to_pylist():
                    s, e = pairs[t]
                    try:
                        use_worker_hadoop(settings)
                        with open_source(path) as f:
                            rows.append((t, *walk_pcapng_range(f, lay, s, e), True))
                    except (CaptureError, OSError):  # the driver walks this range
                        rows.append((t, 0, 0, False, False))
                cols = list(zip(*rows, strict=True)) if rows else [()] * 5
                types = [pa.int32(), pa.int64(), pa.int64(), pa.bool_(), pa.bool_()]
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, ty) for c, ty in zip(cols, types, strict=True)],
                    names=["task", "count", "latest", "ok", "walked"])

        n = len(pairs)
        try:
            rows = spark.range(0, n, 1, n).mapInArrow(task, ddl).collect()
        except Exception:  # noqa: BLE001 - a failed job (py4j's errors): the driver walks
            return None
        out: list[tuple[int, int, bool] | None] = [None] * n
        for r in rows:
            if r["walked"]:
                out[r["task"]] = (r["count"], r["latest"], r["ok"])
        if report is not None:
            report["plan_walk_tasks"] = report.get("plan_walk_tasks", 0) + n
            report["plan_walk_gaps"] = report.get("plan_walk_gaps", 0) + out.count(None)
            report["plan_walk_s"] = round(report.get("plan_walk_s", 0.0)
                                          + time.perf_counter() - t0, 2)
        return out

    return walk


__all__ = ["layout", "pcapng_walker", "walk_remote", "wanted"]
