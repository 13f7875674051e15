"""The two-stage Spark pipeline: extract → shuffle by connection → reassemble and decode.

    plan (driver)      list and rank files; cut big uncompressed files at verified sync points
    units              count the records of each candidate range (frame bases, verification)
    stage 1            spark.range(n, n).mapInArrow: TCP packets, one task per unit group
    shuffle            repartition(n, capture_id, conn_key) + sortWithinPartitions(..., ts, file, frame)
    stage 2            mapInArrow: one kanalyze Engine per connection (the offline code)
    tables             exchanges, partitions, connections, files, aggregates/* as Parquet under DIR

File contents never travel through the JVM as one value: tasks open files by
path. A connection's packets end up in one task, in capture order, however
many rotated files or byte ranges they came from.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kanalyze.engine import EngineOptions
from kanalyze.spark import schemas as R
from kanalyze.spark.units import (
    SPLIT_BYTES,
    Plan,
    RangeResult,
    candidate_ranges,
    finish_units,
    is_uri,
    list_inputs,
    pack,
    rank_files,
    walk_range,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

DRIVER_WALK_BYTES = 2 << 30  # below this, local split files are counted on the driver
TABLES = ("exchanges", "partitions", "connections", "files")
AGGREGATES = ("api_latency", "partition_hw", "client_topic_usage", "errors")

CONNECTION_DDL = (
    "capture_id STRING, conn_id STRING, client STRING, broker STRING, incarnations INT, kafka BOOLEAN, "
    "first_ns BIGINT, last_ns BIGINT, packets BIGINT, syn_seen BOOLEAN, fin_seen BOOLEAN, rst_seen BOOLEAN, "
    "files_spanned INT, first_file STRING, first_frame BIGINT, client_stream_bytes BIGINT, "
    "broker_stream_bytes BIGINT, client_frame_bytes BIGINT, broker_frame_bytes BIGINT, skipped_bytes BIGINT, "
    "gap_bytes BIGINT, gaps BIGINT, retransmitted_bytes BIGINT, requests BIGINT, responses BIGINT, "
    "non_kafka_bytes BIGINT"
)
UNIT_DDL = (
    "rank INT, unit INT, whole BOOLEAN, start BIGINT, `end` BIGINT, packets BIGINT, tcp_packets BIGINT, "
    "other_packets BIGINT, fragments BIGINT, not_ip BIGINT, first_ns BIGINT, last_ns BIGINT, error STRING, "
    "diagnostics ARRAY<STRING>"
)


@dataclass(slots=True)
class PipelineResult:
    out_dir: str
    plan: Plan
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- planning
def make_plan(
    spark: SparkSession,
    inputs: Sequence[str],
    split_bytes: int = SPLIT_BYTES,
    capture_id: str | None = None,
    driver_walk_bytes: int = DRIVER_WALK_BYTES,
) -> Plan:
    """Rank the files, cut big ones, verify and count the cuts, pack the units.

    Counting walks every record header of the files being split: on the driver when they are
    local and small enough (a Spark job costs more below a few GB), else as a Spark job.
    """
    files = rank_files(list_inputs(list(inputs)), capture_id)
    ranges = {f.rank: candidate_ranges(f, split_bytes) for f in files}
    todo = [(r, i, s, e) for r, rs in ranges.items() if len(rs) > 1 for i, (s, e) in enumerate(rs)]
    results: dict[tuple[int, int], RangeResult] = {}
    walk_bytes = sum(e - s for _r, _i, s, e in todo)
    if todo and (walk_bytes > driver_walk_bytes or any(is_uri(files[r].path) for r, *_ in todo)):
        results = _count_ranges_on_spark(spark, files, todo)
    else:
        for r, i, s, e in todo:
            results[(r, i)] = walk_range(files[r].path, files[r], s, e)
    units = []
    for f in files:
        rs = ranges[f.rank]
        units.extend(
            finish_units(
                f, rs, [results[(f.rank, i)] for i in range(len(rs))] if len(rs) > 1 else []
            )
        )
    parallelism = spark.sparkContext.defaultParallelism
    return Plan(files, units, pack(units, files, parallelism))


def _by_index(spark: SparkSession, n: int, fn, ddl: str) -> DataFrame:  # noqa: ANN001
    """One task per index 0..n-1, each running `fn` over its index (no Data Source planning
    round trips; works on Spark Connect)."""
    return spark.range(0, max(n, 1), 1, max(n, 1)).where(f"id < {n}").mapInArrow(fn, ddl)


def _count_ranges_on_spark(
    spark: SparkSession, files: list, todo: list[tuple[int, int, int, int]]
) -> dict[tuple[int, int], RangeResult]:
    ddl = "rank INT, idx INT, count BIGINT, stop BIGINT, whole BOOLEAN, error STRING"

    def count(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from kanalyze.spark.units import walk_range

        for b in batches:
            out = []
            for i in b.column("id").to_pylist():
                r, idx, s, e = todo[i]
                res = walk_range(files[r].path, files[r], s, e)
                out.append((r, idx, res.count, res.stop, res.whole_file_needed, res.error))
            if out:
                cols = list(zip(*out, strict=True))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(cols[0], pa.int32()), pa.array(cols[1], pa.int32()), pa.array(cols[2], pa.int64()),
                     pa.array(cols[3], pa.int64()), pa.array(cols[4], pa.bool_()), pa.array(cols[5], pa.string())],
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
def segments(spark: SparkSession, plan: Plan) -> DataFrame:
    """Stage 1: one task per packed group of units, opening the files by path (the rows of the
    Data Source's `segments` table)."""

    def stage1(batches: Iterator) -> Iterator:
        from kanalyze.spark.extract import extract

        for b in batches:
            for i in b.column("id").to_pylist():
                yield from extract(plan, plan.partitions[i])

    return _by_index(spark, len(plan.partitions), stage1, R.spark_ddl(R.SEGMENT_SCHEMA))


def decode_segments(
    spark: SparkSession,
    seg: DataFrame,
    plan: Plan,
    opts: EngineOptions | None = None,
    decode_bodies: bool = True,
    shuffle_partitions: int | None = None,
) -> DataFrame:
    """Shuffle by connection, sort into capture order, run the engine per connection (stage 2)."""
    files = [f.path for f in plan.files]
    opts = opts or EngineOptions()
    if shuffle_partitions is None:
        total = sum(f.size for f in plan.files)
        shuffle_partitions = max(2 * spark.sparkContext.defaultParallelism, total // (128 << 20))

    def stage2(batches: Iterator) -> Iterator:
        from kanalyze.spark.decode import decode

        yield from decode(batches, files, opts, decode_bodies)

    ordered = seg.repartition(shuffle_partitions, "capture_id", "conn_key").sortWithinPartitions(
        "capture_id", "conn_key", "ts_ns", "file_rank", "file_no"
    )
    return ordered.mapInArrow(stage2, R.spark_ddl(R.DECODED_SCHEMA))


# --------------------------------------------------------------------------- tables
def _write(df: DataFrame, path: str, partition_by: str | None = None) -> None:
    w = df.write.mode("overwrite").format("parquet")
    if partition_by:
        w = w.partitionBy(partition_by)
    w.save(path)


def partitions_table(exchanges: DataFrame, topics: DataFrame) -> DataFrame:
    """HW/LEO timeline rows: one per (exchange, topic partition) that carries an offset fact.

    `leo` is the log end offset after a successful Produce (base_offset + record_count), or the
    fetch offset of a follower's Fetch (`replica_id` >= 0: the follower's LEO); `high_watermark`/`last_stable_offset`/`log_start_offset`
    come from Fetch responses, `offset` from ListOffsets.
    """
    from pyspark.sql import functions as F

    p = exchanges.select(
        F.coalesce("response_ts", "request_ts").alias("ts"),
        F.coalesce("response_last_ns", "request_last_ns").alias("ts_ns"),
        "dt", "capture_id", "conn_id", "client", "broker", "client_id", "api", "api_version",
        "correlation_id", "status", "request_file", "request_frame", "response_file", "response_frame",
        "acks", "replica_id", F.explode("partitions").alias("p"),
    )  # fmt: skip
    p = p.select("*", "p.*").drop("p")
    p = p.join(F.broadcast(topics), on="topic_id", how="left")
    p = p.withColumn("topic", F.coalesce("topic", "topic_name")).drop("topic_name")
    leo = F.when(
        (F.col("api") == "Produce") & (F.col("error_code") == 0) & F.col("base_offset").isNotNull()
        & (F.col("base_offset") >= 0) & F.col("record_count").isNotNull(),
        F.col("base_offset") + F.col("record_count"),
    ).when((F.col("api") == "Fetch") & (F.col("replica_id") >= 0), F.col("fetch_offset"))  # fmt: skip
    p = p.withColumn("leo", leo)
    facts = [
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "base_offset",
        "fetch_offset",
        "offset",
        "leo",
    ]
    return p.where(F.greatest(*[F.col(c).isNotNull().cast("int") for c in facts]) == 1)


def aggregates(exchanges: DataFrame, parts: DataFrame) -> dict[str, DataFrame]:
    from pyspark.sql import functions as F

    err = (F.col("error_code").isNotNull() & (F.col("error_code") != 0)) | (
        F.col("partition_error_count") > 0
    )
    api_latency = exchanges.groupBy("api", "api_version", "broker").agg(
        F.count("*").alias("exchanges"),
        F.sum(F.when(F.col("status") == "ok", 1).otherwise(0)).alias("ok"),
        F.sum(F.when(F.col("status") == "no_response", 1).otherwise(0)).alias("no_response"),
        F.sum(F.when(err, 1).otherwise(0)).alias("errors"),
        F.percentile_approx("latency_ms", [0.5, 0.9, 0.99, 0.999], 10000).alias(
            "latency_ms_p50_p90_p99_p999"
        ),
        F.max("latency_ms").alias("latency_ms_max"),
        F.avg("latency_ms").alias("latency_ms_avg"),
        F.sum("request_size").alias("request_bytes"),
        F.sum("response_size").alias("response_bytes"),
    )
    hw = parts.where(F.col("high_watermark").isNotNull() & (F.col("high_watermark") >= 0))
    partition_hw = hw.groupBy("topic", "partition").agg(
        F.count("*").alias("observations"),
        F.min("high_watermark").alias("hw_min"),
        F.max("high_watermark").alias("hw_max"),
        F.min_by("high_watermark", "ts_ns").alias("hw_first"),
        F.max_by("high_watermark", "ts_ns").alias("hw_last"),
        F.max_by("last_stable_offset", "ts_ns").alias("lso_last"),
        F.max_by("log_start_offset", "ts_ns").alias("log_start_last"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
    )
    leo = (
        parts.where(F.col("leo").isNotNull())
        .groupBy("topic", "partition")
        .agg(F.max("leo").alias("leo_max"))
    )
    partition_hw = partition_hw.join(leo, on=["topic", "partition"], how="full_outer").withColumn(
        "hw_per_second",
        (F.col("hw_last") - F.col("hw_first"))
        / F.greatest(
            F.lit(1e-3), F.col("last_ts").cast("double") - F.col("first_ts").cast("double")
        ),
    )
    client_topic_usage = parts.groupBy("client_id", "client", "topic", "api").agg(
        F.countDistinct("conn_id", "correlation_id").alias("requests"),
        F.approx_count_distinct("partition").alias("partitions"),
        F.sum("record_count").alias("records"),
        F.sum("records_bytes").alias("records_bytes"),
        F.sum(F.when(F.col("error_code") != 0, 1).otherwise(0)).alias("errors"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
    )
    top = exchanges.where(F.col("error_code").isNotNull() & (F.col("error_code") != 0)).select(
        "api",
        "client_id",
        F.col("error_code"),
        F.lit(None).cast("string").alias("topic"),
        "request_ts",
    )
    per_part = parts.where(F.col("error_code").isNotNull() & (F.col("error_code") != 0)).select(
        "api", "client_id", "error_code", "topic", F.col("ts").alias("request_ts")
    )
    errors = (
        top.unionByName(per_part)
        .groupBy("api", "error_code", "client_id", "topic")
        .agg(
            F.count("*").alias("count"),
            F.min("request_ts").alias("first_ts"),
            F.max("request_ts").alias("last_ts"),
        )
    )
    return {
        "api_latency": api_latency,
        "partition_hw": partition_hw,
        "client_topic_usage": client_topic_usage,
        "errors": errors,
    }


def run_pipeline(
    spark: SparkSession,
    inputs: Sequence[str],
    out_dir: str,
    *,
    ports: Sequence[int] = (),
    split_bytes: int = SPLIT_BYTES,
    decode_bodies: bool = True,
    capture_id: str | None = None,
    shuffle_partitions: int | None = None,
    max_frame: int = 256 * 1024 * 1024,
) -> PipelineResult:
    """Run both stages over `inputs` and write every table under `out_dir` (Parquet)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from kanalyze.spark.session import register

    register(spark)
    t0 = time.perf_counter()
    out = out_dir.rstrip("/")
    plan = make_plan(spark, inputs, split_bytes, capture_id)
    res = PipelineResult(out, plan)
    res.seconds["plan"] = time.perf_counter() - t0
    res.problems.extend(f"{f.path}: {f.error}" for f in plan.files if f.error)
    opts = EngineOptions(ports=frozenset(ports), max_frame=max_frame)
    decoded = decode_segments(
        spark, segments(spark, plan), plan, opts, decode_bodies, shuffle_partitions
    )
    decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        t = time.perf_counter()
        ex = decoded.where(F.col("kind") == "exchange").select(*R.EXCHANGE_COLUMNS)
        _write(ex, f"{out}/exchanges", "dt")
        res.seconds["exchanges"] = time.perf_counter() - t
        t = time.perf_counter()
        # read back with the declared schema: an empty run still has a readable, typed table
        exchanges = spark.read.schema(R.spark_ddl(R.EXCHANGE_SCHEMA)).parquet(f"{out}/exchanges")
        topics = (
            decoded.where(F.col("kind") == "topic")
            .select(F.from_json("extra", "ARRAY<STRING>").alias("t"))
            .select(F.col("t")[0].alias("topic_id"), F.col("t")[1].alias("topic_name"))
            .dropDuplicates(["topic_id"])
        )
        parts = partitions_table(exchanges, topics)
        _write(parts, f"{out}/partitions", "dt")
        parts_schema = parts.schema
        conns = (
            decoded.where(F.col("kind") == "connection")
            .select(F.from_json("extra", CONNECTION_DDL).alias("c"))
            .select("c.*")
        )
        _write(conns, f"{out}/connections")
        _write(files_table(spark, decoded, plan), f"{out}/files")
        res.seconds["tables"] = time.perf_counter() - t
        t = time.perf_counter()
        parts = spark.read.schema(parts_schema).parquet(f"{out}/partitions")
        for name, df in aggregates(exchanges, parts).items():
            _write(df.coalesce(1), f"{out}/aggregates/{name}")
        res.seconds["aggregates"] = time.perf_counter() - t
        res.counts["exchanges"] = exchanges.count()
        res.counts["partitions"] = parts.count()
        res.counts["connections"] = (
            spark.read.schema(CONNECTION_DDL).parquet(f"{out}/connections").count()
        )
        files = spark.read.parquet(f"{out}/files")
        res.counts["files"] = files.count()
        res.problems.extend(
            f"{r['path']}: {r['error']}" for r in files.where(F.col("error") != "").collect() if r["path"]
            and not any(r["path"] in p for p in res.problems)
        )  # fmt: skip
    finally:
        decoded.unpersist()
    res.seconds["total"] = time.perf_counter() - t0
    return res


def files_table(spark: SparkSession, decoded: DataFrame, plan: Plan) -> DataFrame:
    """Capture quality per input file: format, link type, packets, time span, units, errors."""
    from pyspark.sql import functions as F

    units = (
        decoded.where(F.col("kind") == "unit")
        .select(F.from_json("extra", UNIT_DDL).alias("u"))
        .select("u.*")
    )
    per_file = units.groupBy("rank").agg(
        F.count("*").alias("units"),
        F.sum("packets").alias("packets"),
        F.sum("tcp_packets").alias("tcp_packets"),
        F.sum("other_packets").alias("other_packets"),
        F.sum("fragments").alias("ip_fragments"),
        F.min("first_ns").alias("first_ns"),
        F.max("last_ns").alias("last_ns"),
        F.max(F.col("whole").cast("int")).alias("whole"),
        F.concat_ws("; ", F.collect_set(F.when(F.col("error") != "", F.col("error")))).alias(
            "read_error"
        ),
        F.flatten(F.collect_list("diagnostics")).alias("diagnostics"),
    )
    info_rows = [
        (
            f.rank,
            f.path,
            f.capture_id,
            f.format,
            f.compressed,
            f.size,
            f.linktype,
            f.snaplen,
            f.error or "",
        )
        for f in plan.files
    ]
    info = spark.createDataFrame(
        info_rows,
        "rank INT, path STRING, capture_id STRING, format STRING, compressed BOOLEAN, size BIGINT, "
        "linktype INT, snaplen BIGINT, probe_error STRING",
    )
    split = {f.rank for f in plan.files} - {u.rank for u in plan.units if u.whole}
    return (
        info.join(per_file, on="rank", how="left")
        .withColumn("split_verified", F.col("rank").isin(sorted(split)) if split else F.lit(False))
        .withColumn(
            "error",
            F.concat_ws(
                "; ", F.when(F.col("probe_error") != "", F.col("probe_error")), F.col("read_error")
            ),
        )
        .drop("probe_error", "read_error", "whole")
        .withColumn("first_ts", F.timestamp_micros((F.col("first_ns") / 1000).cast("long")))
        .withColumn("last_ts", F.timestamp_micros((F.col("last_ns") / 1000).cast("long")))
        .orderBy("rank")
    )
