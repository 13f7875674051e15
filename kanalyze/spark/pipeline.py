"""The two-stage Spark pipeline: extract → shuffle by connection → reassemble and decode.

    plan (driver)      list and rank files; cut big uncompressed files at verified sync points
    units              count the records of each candidate range (frame bases, verification)
    stage 1            spark.range(n, n).mapInArrow: TCP packets, one task per unit group
    shuffle            repartition(n, capture_id, conn_key)
                       + sortWithinPartitions(..., ts, file, frame)
    stage 2            mapInArrow: one kanalyze Engine per connection (the offline code)
    tables             exchanges, partitions, connections, files, aggregates/* as Parquet under DIR

File contents never travel through the JVM as one value: tasks open files by
path. A connection's packets end up in one task, in capture order, however
many rotated files or byte ranges they came from.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kanalyze.engine import EngineOptions
from kanalyze.spark import schemas as R
from kanalyze.spark.arrow_partitions import PARTITIONS_SCHEMA
from kanalyze.spark.balance import bucket_values, max_share, place
from kanalyze.spark.direct_write import write_exchanges
from kanalyze.spark.inputs import qualify_output, use_hadoop
from kanalyze.spark.schemas import KIND_PACKET
from kanalyze.spark.tables import (
    CONNECTION_DDL,
    aggregates,
    files_table,
    partitions_table,
    write_parquet,
)
from kanalyze.spark.units import (
    SPLIT_BYTES,
    FileInfo,
    Plan,
    RangeResult,
    balanced_split,
    candidate_ranges,
    finish_units,
    is_uri,
    list_inputs,
    pack,
    rank_files,
    unit_bytes,
    walk_range,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, Observation, SparkSession

    from kanalyze.spark.range_stage import Ranged

DRIVER_WALK_BYTES = 2 << 30  # below this, local split files are counted on the driver
# stage 2's input order: one connection's packets together, in capture order
# (order_ns, not ts_ns: a packet stamped before its predecessor in the same file stays after it,
# as offline, which reads each file in file order and merges files by time)
SHUFFLE_ORDER = ("capture_id", "conn_key", "order_ns", "file_rank", "file_no")


@dataclass(slots=True)
class PipelineResult:
    out_dir: str
    plan: Plan
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # what the run did differently from its plan (a capture group the range path refused)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # inputs an earlier run already wrote
    balance: dict[str, float] = field(default_factory=dict)  # task byte shares, flows kept


# --------------------------------------------------------------------------- planning
def make_plan(
    spark: SparkSession,
    inputs: Sequence[str],
    split_bytes: int = SPLIT_BYTES,
    capture_id: str | None = None,
    driver_walk_bytes: int = DRIVER_WALK_BYTES,
    skip_file_ids: frozenset[str] = frozenset(),
) -> Plan:
    """Rank the files, cut big ones, verify and count the cuts, pack the units.

    Counting walks every record header of the files being split: on the driver when they are
    local and small enough (a Spark job costs more below a few GB), else as a Spark job.
    """
    files, skipped = rank_inputs(spark, inputs, capture_id, skip_file_ids)
    return plan_files(spark, files, skipped, split_bytes, driver_walk_bytes)


def rank_inputs(
    spark: SparkSession,
    inputs: Sequence[str],
    capture_id: str | None = None,
    skip_file_ids: frozenset[str] = frozenset(),
) -> tuple[list[FileInfo], list[str]]:
    """The input files ranked in capture order, without those an earlier run wrote (and
    those, by path)."""
    use_hadoop(spark)
    files = rank_files(list_inputs(list(inputs)), capture_id)
    skipped = [f.path for f in files if f.file_id and f.file_id in skip_file_ids and not f.error]
    if skipped:
        files = [f for f in files if f.path not in set(skipped)]
        for r, f in enumerate(files):
            f.rank = r
    return files, skipped


def plan_files(
    spark: SparkSession,
    files: list[FileInfo],
    skipped: list[str],
    split_bytes: int = SPLIT_BYTES,
    driver_walk_bytes: int = DRIVER_WALK_BYTES,
    only: frozenset[int] | None = None,
) -> Plan:
    """`make_plan` after the ranking: cut, verify, count and pack (with `only`: the units of
    the files of those ranks, the plan still lists every file)."""
    parallelism = spark.sparkContext.defaultParallelism
    todo_files = [f for f in files if only is None or f.rank in only]
    split = balanced_split(sum(f.size for f in todo_files), split_bytes, parallelism)
    ranges = {f.rank: candidate_ranges(f, split) for f in todo_files}
    todo = [(r, i, s, e) for r, rs in ranges.items() if len(rs) > 1 for i, (s, e) in enumerate(rs)]
    results: dict[tuple[int, int], RangeResult] = {}
    walk_bytes = sum(e - s for _r, _i, s, e in todo)
    if todo and (walk_bytes > driver_walk_bytes or any(is_uri(files[r].path) for r, *_ in todo)):
        results = _count_ranges_on_spark(spark, files, todo)
    else:
        for r, i, s, e in todo:
            results[(r, i)] = walk_range(files[r].path, files[r], s, e)
    units = []
    for f in todo_files:
        rs = ranges[f.rank]
        units.extend(
            finish_units(
                f, rs, [results[(f.rank, i)] for i in range(len(rs))] if len(rs) > 1 else []
            )
        )
    return Plan(files, units, pack(units, files, parallelism), skipped)


def _by_index(spark: SparkSession, n: int, fn, ddl: str) -> DataFrame:  # noqa: ANN001
    """One task per index 0..n-1, each running `fn` over its index (no Data Source planning
    round trips; works on Spark Connect)."""
    return spark.range(0, max(n, 1), 1, max(n, 1)).where(f"id < {n}").mapInArrow(fn, ddl)


def _worker_settings(spark: SparkSession, paths: list[str]) -> dict[str, str] | None:
    """The Hadoop settings a task needs to read remote inputs through its own Hadoop reader
    (`kanalyze.spark.hadoop_read`), when any input is remote and this driver has a JVM."""
    from kanalyze.spark.hadoop_read import hadoop_settings

    if not any(is_uri(p) for p in paths) or not use_hadoop(spark):
        return None
    return hadoop_settings(spark)


def _count_ranges_on_spark(
    spark: SparkSession, files: list, todo: list[tuple[int, int, int, int]]
) -> dict[tuple[int, int], RangeResult]:
    ddl = "rank INT, idx INT, count BIGINT, stop BIGINT, whole BOOLEAN, error STRING"
    settings = _worker_settings(spark, [f.path for f in files])

    def count(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from kanalyze.spark.inputs import use_worker_hadoop
        from kanalyze.spark.units import walk_range

        use_worker_hadoop(settings)
        for b in batches:
            out = []
            for i in b.column("id").to_pylist():
                r, idx, s, e = todo[i]
                res = walk_range(files[r].path, files[r], s, e)
                out.append((r, idx, res.count, res.stop, res.whole_file_needed, res.error))
            if out:
                cols = list(zip(*out, strict=True))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(cols[0], pa.int32()), pa.array(cols[1], pa.int32()),
                     pa.array(cols[2], pa.int64()), pa.array(cols[3], pa.int64()),
                     pa.array(cols[4], pa.bool_()), pa.array(cols[5], pa.string())],
                    names=["rank", "idx", "count", "stop", "whole", "error"],
                )  # fmt: skip

    rows = _by_index(spark, len(todo), count, ddl).collect()
    return {
        (r["rank"], r["idx"]): RangeResult(
            r["count"], r["stop"], 0, 0, r["whole"], r["error"] or ""
        )
        for r in rows
    }


# --------------------------------------------------------------------------- stages
def segments(spark: SparkSession, plan: Plan, opts: EngineOptions | None = None) -> DataFrame:
    """Stage 1: one task per packed group of units, opening the files by path (the rows of the
    Data Source's `segments` table): TCP numbers and payload, no link or IP headers."""
    opts = opts or EngineOptions()
    ports, max_frame = frozenset(opts.ports), opts.max_frame
    settings = _worker_settings(spark, [f.path for f in plan.files])

    def stage1(batches: Iterator) -> Iterator:
        from kanalyze.spark.extract import extract
        from kanalyze.spark.inputs import use_worker_hadoop

        use_worker_hadoop(settings)
        for b in batches:
            for i in b.column("id").to_pylist():
                yield from extract(plan, plan.partitions[i], ports, max_frame)

    return _by_index(spark, len(plan.partitions), stage1, R.spark_ddl(R.SEGMENT_SCHEMA))


# the columns stage 2 reads: what crosses the shuffle (`hint` stays behind)
SHUFFLED = (
    "kind", "capture_id", "conn_key", "ts_ns", "order_ns", "file_rank", "file_no", "flags",
    "seq", "ack", "cut", "data",
)  # fmt: skip
ROW_OVERHEAD = 48  # bytes a shuffled segment row costs besides its payload (for balancing)


@dataclass(slots=True)
class Placement:
    """Which stage-2 task decodes which connection, and the bytes each task got."""

    flows: int = 0
    loads: list[int] = field(default_factory=list)
    dropped_flows: int = 0  # TCP flows never showing a Kafka request: not shuffled
    dropped_bytes: int = 0

    @property
    def max_share(self) -> float:
        return max_share(self.loads)


def place_flows(
    spark: SparkSession, seg: DataFrame, partitions: int
) -> tuple[DataFrame, Placement]:
    """Decide before the shuffle which flows are Kafka (a payload starting with a plausible
    request header anywhere in the run, `payload.kafka_hint`) and place them on `partitions`
    stage-2 tasks by bytes (LPT). Returns (capture_id, conn_key, part) rows to join on, with
    `part` values that Spark's hash partitioner sends to the intended task."""
    from pyspark.sql import functions as F

    flows = (
        seg.where(F.col("kind") == KIND_PACKET)
        .groupBy("capture_id", "conn_key")
        .agg(
            F.max("hint").alias("kafka"),
            F.sum(F.length("data") + ROW_OVERHEAD).alias("bytes"),
        )
        .cache()
    )  # only the Kafka flows come to the driver; the others are counted
    kafka = {(r["capture_id"], r["conn_key"]): r["bytes"] for r in flows.where("kafka").collect()}
    other = flows.where("NOT kafka").agg(F.count("*").alias("n"), F.sum("bytes").alias("b"))
    dropped = other.first()
    flows.unpersist()
    where, loads = place(kafka, partitions)  # type: ignore[arg-type]
    hashed = (
        spark.range(0, 64 * partitions)
        .select("id", F.expr(f"pmod(hash(id), {partitions})").alias("b"))
        .collect()
    )
    values = bucket_values([(r["id"], r["b"]) for r in hashed], partitions)
    rows = [(cap, bytes(key), values[b]) for (cap, key), b in where.items()]
    placed = spark.createDataFrame(rows, "capture_id STRING, conn_key BINARY, part BIGINT")
    res = Placement(len(kafka), loads)
    res.dropped_flows = int(dropped["n"] or 0) if dropped else 0
    res.dropped_bytes = int(dropped["b"] or 0) if dropped else 0
    return placed, res


def decode_segments(
    spark: SparkSession,
    seg: DataFrame,
    plan: Plan,
    opts: EngineOptions | None = None,
    decode_bodies: bool = True,
    shuffle_partitions: int | None = None,
    topic_ids: dict[str, str] | None = None,
    with_bodies: bool = False,
) -> tuple[DataFrame, Placement]:
    """Keep the Kafka flows, shuffle them to tasks balanced by bytes, sort each connection into
    capture order, run the engine per connection (stage 2); `topic_ids` (--topic-ids)
    preloads every capture group's topic-name registry. `seg` should be persisted: it is read
    twice (the flow census, then the shuffle)."""
    from pyspark.sql import functions as F

    files = [f.path for f in plan.files]
    file_ids = [f.file_id for f in plan.files]
    opts = opts or EngineOptions()
    if shuffle_partitions is None:
        total = sum(f.size for f in plan.files)
        shuffle_partitions = max(2 * spark.sparkContext.defaultParallelism, total // (128 << 20))

    def stage2(batches: Iterator) -> Iterator:
        from kanalyze.spark.decode import decode
        from kanalyze.spark.rows import row_context

        yield from decode(
            batches, files, opts, decode_bodies, row_context(topic_ids), file_ids, with_bodies
        )

    placed, placement = place_flows(spark, seg, shuffle_partitions)
    packets = seg.where(F.col("kind") == KIND_PACKET).join(
        F.broadcast(placed), ["capture_id", "conn_key"], "inner"
    )
    units = seg.where(F.col("kind") != KIND_PACKET).withColumn("part", F.lit(0).cast("long"))
    ordered = (
        packets.select(*SHUFFLED, "part")
        .unionByName(units.select(*SHUFFLED, "part"))
        .repartition(shuffle_partitions, "part")
        .sortWithinPartitions(*SHUFFLE_ORDER)
    )
    return ordered.mapInArrow(stage2, R.spark_ddl(R.DECODED_SCHEMA)), placement


@dataclass(slots=True)
class Staged:
    """The range path's rows on the driver's file system, for the tasks and the driver to
    write the tables themselves (`direct_write`, `driver_tables`): the staged rows' directory,
    the ranges, the stitch's kept rows, the side rows (connections, units, topic names) and
    the run's topic names (topic id -> name)."""

    stage: str
    ranges: int
    keep: list[tuple]
    side: list[tuple]
    names: dict[str, str]


@dataclass(slots=True)
class Tables:
    """The pipeline's tables as DataFrames over one persisted stage-2 result (nothing written).

    `exchanges`, `partitions`, `connections`, `files` and `topics` (topic id -> name learned
    from Metadata responses); `aggregates()` derives the summary tables. Call `unpersist()`
    when done with them. From `build(frames=False)` on the range path the DataFrames are
    None and `staged` holds what the tables are written from."""

    plan: Plan
    decoded: DataFrame
    exchanges: DataFrame
    partitions: DataFrame
    connections: DataFrame
    files: DataFrame
    topics: DataFrame
    segments: DataFrame  # stage 1's rows (persisted: read by the flow census and the shuffle)
    placement: Placement  # which flows were shuffled, and each stage-2 task's bytes
    balance: dict[str, float] | None = None  # set by the range path (no placement)
    ranged: DataFrame | None = None  # the range path's persisted task output, with a fallback
    persisted: list[DataFrame] = field(default_factory=list)  # other caches to drop
    scratch: list[str] = field(default_factory=list)  # directories the DataFrames read
    # the range path's staged rows: the tasks and the driver can write the tables themselves
    staged: Staged | None = None
    notes: list[str] = field(default_factory=list)  # `PipelineResult.notes`

    def aggregates(self) -> dict[str, DataFrame]:
        return aggregates(self.exchanges, self.partitions)

    def unpersist(self) -> None:
        """Free the caches and scratch files (the DataFrames cannot be read after this)."""
        for df in (*self.persisted, self.segments, self.ranged):
            if df is not None:
                df.unpersist()
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)


def build(
    spark: SparkSession,
    inputs: Sequence[str],
    *,
    ports: Sequence[int] = (),
    split_bytes: int = SPLIT_BYTES,
    decode_bodies: bool = True,
    with_bodies: bool = False,
    capture_id: str | None = None,
    shuffle_partitions: int | None = None,
    max_frame: int = 256 * 1024 * 1024,
    topic_ids: dict[str, str] | None = None,
    skip_file_ids: frozenset[str] = frozenset(),
    ranges: bool | None = None,
    frames: bool = True,
) -> Tables:
    """Plan, run both stages and return every table as a DataFrame (the public API's core).

    `ranges` (default on; the environment's KANALYZE_SPARK_RANGES=0 turns it off): local
    captures (one file or a rotated set per capture group) are decoded by byte ranges and
    stitched, without a shuffle (`kanalyze.spark.range_stage`); anything that path cannot
    prove equal to one process runs the shuffle pipeline. Raises
    `kanalyze.spark.inputs.InputError` at once for a missing or unreadable input.

    `frames` False (`run_pipeline` with a local output): when the range path alone ran with
    staged rows (`Tables.staged`: the tasks and the driver write the tables from them), the
    table DataFrames are not built and are None; building them costs the driver and the JVM
    a DataFrame of every kept row and an analysis of each table's plan."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from kanalyze.spark.range_stage import RANGES_ENV, plan_groups, run_ranges
    from kanalyze.spark.remote_walk import pcapng_walker, walk_remote
    from kanalyze.spark.session import register

    register(spark)
    if ranges is None:
        ranges = os.environ.get(RANGES_ENV, "") != "0"
    files, skipped = rank_inputs(spark, inputs, capture_id, skip_file_ids)
    opts = EngineOptions(ports=frozenset(ports), max_frame=max_frame)
    walking: dict[str, float] = {}  # the planner's walk of large remote pcaps, by tasks
    walked = walk_remote(spark, files, walking) if ranges else {}
    walker = pcapng_walker(spark, files, walking) if ranges else None
    cut, left = plan_groups(files, spark.sparkContext.defaultParallelism,
                            walked, walker) if ranges else ([], [])
    waste: dict[str, float] = {}  # range work the stitch refused (also when it refused all)
    why: list[str] = []  # each refused group's first file and the stitch's reason
    got = cut and run_ranges(spark, cut, files, opts, decode_bodies, topic_ids, with_bodies,
                             left, waste, frames, why)
    if got:
        got.balance.update(walking)
    balance = None
    ranged = None
    persisted: list[DataFrame] = []
    scratch = [got.stage] if got and got.stage else []
    staged = None
    side_rows = got.side if got else []
    if got and not got.refused:  # the range path alone: no second cache, side rows local
        plan = Plan(files, [], [], skipped)
        seg, placement, balance = got.tasks, Placement(), got.balance
        if got.exchanges is None:  # not built (frames=False): the staged rows are written
            staged = _staged(got)
            return Tables(plan, None, None, None, None, None, None, seg, placement, balance,
                          None, persisted, scratch, staged)  # type: ignore[arg-type]
        side = spark.createDataFrame(got.side, R.spark_ddl(R.DECODED_SCHEMA))
        decoded = got.exchanges.unionByName(side)
        ex_rows = got.exchanges
    else:  # the shuffle pipeline: for everything, or for the groups whose stitch refused
        only = frozenset(got.refused) if got else None
        plan = plan_files(spark, files, skipped, split_bytes, only=only)
        seg = segments(spark, plan, opts).persist(StorageLevel.MEMORY_AND_DISK)
        decoded, placement = decode_segments(
            spark, seg, plan, opts, decode_bodies, shuffle_partitions, topic_ids, with_bodies
        )
        if got:
            side = spark.createDataFrame(got.side, R.spark_ddl(R.DECODED_SCHEMA))
            decoded = got.exchanges.unionByName(side).unionByName(decoded)
            ranged, balance = got.tasks, {**balance_report(plan, placement), **got.balance}
        elif waste:
            balance = {**balance_report(plan, placement), **waste}
        decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
        persisted.append(decoded)
        side = decoded.where(F.col("kind") != "exchange")
        ex_rows = decoded.where(F.col("kind") == "exchange")
    exchanges = ex_rows.select(*R.EXCHANGE_COLUMNS)
    if persisted:
        topics = (
            side.where(F.col("kind") == "topic")
            .select(F.from_json("extra", "ARRAY<STRING>").alias("t"))
            .select(F.col("t")[0].alias("topic_id"), F.col("t")[1].alias("topic_name"))
            .dropDuplicates(["topic_id"])
        )
    else:  # the names are on the driver already: no job to de-duplicate them
        names = _topic_names(side_rows)
        topics = spark.createDataFrame(list(names.items()), "topic_id STRING, topic_name STRING")
        if got and got.stage:
            staged = _staged(got)
    conns = (
        side.where(F.col("kind") == "connection")
        .select(F.from_json("extra", CONNECTION_DDL).alias("c"))
        .select("c.*")
        .withColumn("first_ts", F.timestamp_micros(F.floor(F.col("first_ns") / 1000).cast("long")))
        .withColumn("last_ts", F.timestamp_micros(F.floor(F.col("last_ns") / 1000).cast("long")))
    )
    notes = [f"{w}: the range path's stitch refused this capture group; the shuffle path"
             " decoded it" for w in why]
    return Tables(
        plan, decoded, exchanges, partitions_table(exchanges, topics), conns,
        files_table(spark, side, plan), topics, seg, placement, balance, ranged, persisted,
        scratch, staged, notes,
    )  # fmt: skip


def _topic_names(side: list[tuple]) -> dict[str, str]:
    """Topic id -> name from the side rows (the first name a range reported wins)."""
    kind, extra = R.DECODED_SCHEMA.names.index("kind"), R.DECODED_SCHEMA.names.index("extra")
    return dict(reversed([json.loads(r[extra]) for r in side if r[kind] == "topic"]))


def _staged(got: Ranged) -> Staged:
    """The range path's staged rows and side rows, for the direct writers."""
    assert got.stage is not None
    return Staged(got.stage, int(got.balance["ranges"]), got.keep, got.side,
                  _topic_names(got.side))


def balance_report(plan: Plan, placement: Placement) -> dict[str, float]:
    """How evenly the bytes were spread: the largest stage-1 and stage-2 task's share (1/N is
    perfect), and how many flows and bytes stayed out of the shuffle."""
    sizes = unit_bytes(plan.units, plan.files)
    stage1 = [sum(sizes[i] for i in p) for p in plan.partitions]
    return {
        "stage1_tasks": len(stage1),
        "stage1_max_share": round(max_share(stage1), 3),
        "stage2_tasks": len(placement.loads),
        "stage2_max_share": round(placement.max_share, 3),
        "flows_shuffled": placement.flows,
        "flows_dropped": placement.dropped_flows,
        "bytes_shuffled_est": sum(placement.loads),
        "bytes_dropped_est": placement.dropped_bytes,
    }


def _sorted(df: DataFrame, ns: list[str], tasks: int | None = None) -> DataFrame:
    """Rows in time order within each (dt, hour) file: partition columns first, so Spark's
    writer keeps this order. `tasks`: the rows merged into at most that many write tasks
    first (no shuffle), so a run writes a few files per hour rather than one per range."""
    from pyspark.sql import functions as F

    if tasks:
        df = df.coalesce(tasks)
    return df.sortWithinPartitions("dt", "hour", F.coalesce(*ns))


def _counted(df: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    """`df` with a row count observed while it is written (no extra Spark job)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    obs = Observation(name)
    return df.observe(obs, F.count(F.lit(1)).alias("rows")), obs


def _in_parallel(*work: Callable[[], object]) -> list[object]:
    """Run independent Spark actions from driver threads at once: each job is small, so its
    fixed cost (planning, scheduling, commit) overlaps the others' instead of adding up."""
    if len(work) == 1:
        return [work[0]()]
    with ThreadPoolExecutor(len(work)) as pool:
        return [f.result() for f in [pool.submit(w) for w in work]]


def _write_tables(spark: SparkSession, t: Tables, out: str, mode: str,
                  res: PipelineResult) -> None:
    """Every table in the fewest Spark jobs: on the range path with a local `out`, the tasks
    write exchanges and partitions and the driver the small tables (`_write_direct`: one job);
    otherwise exchanges, partitions and connections written at once (row counts observed
    during the writes) and the small files table collected once. Then the aggregates at once
    over what the tables now hold, and `files` last (it marks the inputs as done in append
    mode)."""
    tm = time.perf_counter()
    if t.staged and not is_uri(out):
        files, parts_schema = _write_direct(spark, t.staged, t.plan, out, mode, res), None
    else:
        files, parts_schema = _write_spark(spark, t, out, mode, res), t.partitions.schema
    res.seconds["tables"] = time.perf_counter() - tm
    tm = time.perf_counter()
    # aggregates cover everything in the tables (all runs), so they are rewritten each time
    if _small(out, ("exchanges", "partitions")):
        _write_exact(out)  # on the driver (pyarrow): no Spark job, no JVM rows
    else:
        all_ex = spark.read.schema(R.spark_ddl(R.EXCHANGE_SCHEMA)).parquet(f"{out}/exchanges")
        all_parts = spark.read.schema(parts_schema or R.spark_ddl(PARTITIONS_SCHEMA)).parquet(
            f"{out}/partitions")
        _in_parallel(*[
            (lambda df=df, name=name: write_parquet(df.coalesce(1), f"{out}/aggregates/{name}"))
            for name, df in aggregates(all_ex, all_parts).items()
        ])  # fmt: skip
    res.seconds["aggregates"] = time.perf_counter() - tm
    files()  # last: marks the inputs as done


def _file_problems(res: PipelineResult, rows: list[dict]) -> None:
    """The files table's rows counted and their errors reported (once per path)."""
    res.counts["files"] = len(rows)
    res.problems.extend(
        f"{r['path']}: {r['error']}" for r in rows
        if r["error"] and r["path"] and not any(r["path"] in p for p in res.problems)
    )  # fmt: skip


def _write_direct(spark: SparkSession, staged: Staged, plan: Plan, out: str, mode: str,
                  res: PipelineResult) -> Callable[[], None]:
    """The range path's tables without passing rows through the JVM: exchanges and
    partitions by the Python tasks (one Spark job), connections on the driver. Returns what
    writes the files table (on the driver too)."""
    from kanalyze.spark import driver_tables

    counts, _written = write_exchanges(spark, staged.stage, staged.ranges, staged.keep, out,
                                       mode, staged.names)
    res.counts.update(counts)
    conns = driver_tables.connections(staged.side)
    res.counts["connections"] = conns.num_rows
    driver_tables.write_table(conns, f"{out}/connections", mode)
    files = driver_tables.files(staged.side, plan)
    _file_problems(res, files.to_pylist())
    return lambda: driver_tables.write_table(files, f"{out}/files", mode)


def _write_spark(spark: SparkSession, t: Tables, out: str, mode: str,
                 res: PipelineResult) -> Callable[[], None]:
    """Exchanges, partitions and connections written by Spark at once, the files table
    collected. Returns what writes the files table."""
    ex_ns = ["request_last_ns", "response_last_ns"]
    cores = spark.sparkContext.defaultParallelism
    exchanges, ex_obs = _counted(_sorted(t.exchanges, ex_ns, cores), "exchanges")
    parts, parts_obs = _counted(_sorted(t.partitions, ["ts_ns"], cores), "partitions")
    # one task, sorted by time: the table is small (one row per connection incarnation)
    conns, conns_obs = _counted(
        t.connections.coalesce(1).sortWithinPartitions("first_ns"), "connections")
    files = t.files.persist()  # one row per input: built once, read, written last
    t.persisted.append(files)
    _in_parallel(
        lambda: write_parquet(exchanges, f"{out}/exchanges", ("dt", "hour"), mode),
        lambda: write_parquet(parts, f"{out}/partitions", ("dt", "hour"), mode),
        lambda: write_parquet(conns, f"{out}/connections", None, mode),
        lambda: _file_problems(res, [r.asDict() for r in files.collect()]),
    )
    for name, obs in (("exchanges", ex_obs), ("partitions", parts_obs),
                      ("connections", conns_obs)):
        res.counts[name] = int(obs.get.get("rows", 0))
    return lambda: write_parquet(files, f"{out}/files", None, mode)


SMALL_TABLES = 256 << 20  # aggregated in one task below this many bytes of Parquet


def _write_exact(out: str) -> None:
    """Every aggregate computed and written on the driver (`driver_aggregates`)."""
    from kanalyze.spark.driver_aggregates import exact_aggregates
    from kanalyze.spark.driver_tables import write_table

    for name, table in exact_aggregates(out).items():
        write_table(table, f"{out}/aggregates/{name}", "overwrite")


def _small(out: str, tables: tuple[str, ...]) -> bool:
    """Whether the local tables under `out` hold less than SMALL_TABLES bytes: then the
    driver reads them whole and computes the aggregates (`driver_aggregates`), faster than
    Spark's jobs, whose planning alone takes longer on a small capture."""
    if is_uri(out):
        return False
    total = 0
    for name in tables:
        for root, _dirs, names in os.walk(os.path.join(out, name)):
            total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
            if total >= SMALL_TABLES:
                return False
    return True


def _written_file_ids(spark: SparkSession, out: str) -> frozenset[str]:
    """Content ids of the inputs an earlier run already wrote to `out` (append mode)."""
    from pyspark.sql import functions as F

    try:
        files = spark.read.parquet(f"{out}/files")
    except Exception:  # noqa: BLE001 - no table yet (AnalysisException: path does not exist)
        return frozenset()
    if "file_id" not in files.columns:
        return frozenset()
    rows = files.where(F.col("error") == "").select("file_id").distinct().collect()
    return frozenset(r["file_id"] for r in rows)


def run_pipeline(
    spark: SparkSession,
    inputs: Sequence[str],
    out_dir: str,
    *,
    ports: Sequence[int] = (),
    split_bytes: int = SPLIT_BYTES,
    decode_bodies: bool = True,
    with_bodies: bool = False,
    capture_id: str | None = None,
    shuffle_partitions: int | None = None,
    max_frame: int = 256 * 1024 * 1024,
    topic_ids: dict[str, str] | None = None,
    mode: str = "overwrite",
    ranges: bool | None = None,
) -> PipelineResult:
    """Run both stages over `inputs` and write every table under `out_dir` (Parquet).

    `mode="append"` adds to the tables already there and skips every input whose content
    identity the `files` table already lists, so re-running the same input is a no-op; the
    `files` table is written last (a run that failed before it is re-done in full by the next,
    and the rows it had appended stay: rebuild with overwrite after a failed append)."""
    if mode not in ("overwrite", "append"):
        raise ValueError(f"mode must be 'overwrite' or 'append', not {mode!r}")
    t0 = time.perf_counter()
    out = qualify_output(out_dir)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    skip = _written_file_ids(spark, out) if mode == "append" else frozenset()
    t = build(
        spark, inputs, ports=ports, split_bytes=split_bytes, decode_bodies=decode_bodies,
        with_bodies=with_bodies, capture_id=capture_id, shuffle_partitions=shuffle_partitions,
        max_frame=max_frame, topic_ids=topic_ids, skip_file_ids=skip, ranges=ranges,
        frames=is_uri(out),  # a local output: the range path writes from its staged rows
    )  # fmt: skip
    plan = t.plan
    res = PipelineResult(out, plan)
    res.skipped = list(plan.skipped)
    res.balance = t.balance or balance_report(plan, t.placement)
    res.notes = list(t.notes)
    res.seconds["plan"] = time.perf_counter() - t0
    res.problems.extend(f"{f.path}: {f.error}" for f in plan.files if f.error)
    if not plan.files:  # everything was written by an earlier run
        t.unpersist()
        res.counts = dict.fromkeys(("exchanges", "partitions", "connections", "files"), 0)
        res.seconds["total"] = time.perf_counter() - t0
        return res
    try:
        _write_tables(spark, t, out, mode, res)
    finally:
        t.unpersist()
    res.seconds["total"] = time.perf_counter() - t0
    return res
