"""The tables the Spark pipeline writes from stage 2's rows: partitions (the HW/LEO timeline),
files (capture quality per input), the aggregates, and the DDL of the JSON side rows.
Driver-side DataFrame code; pyspark is imported when a table is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kanalyze.spark.units import Plan

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

TABLES = ("exchanges", "partitions", "connections", "files")
AGGREGATES = ("api_latency", "partition_hw", "client_topic_usage", "errors")

CONNECTION_DDL = (
    "capture_id STRING, conn_id STRING, client STRING, broker STRING, incarnation INT, "
    "first_ns BIGINT, last_ns BIGINT, packets BIGINT, exchanges BIGINT, first_file STRING, "
    "first_frame BIGINT, incarnations INT, kafka BOOLEAN, syn_seen BOOLEAN, "
    "fin_seen BOOLEAN, rst_seen BOOLEAN, "
    "files_spanned INT, client_stream_bytes BIGINT, "
    "broker_stream_bytes BIGINT, client_frame_bytes BIGINT, broker_frame_bytes BIGINT, "
    "skipped_bytes BIGINT, "
    "gap_bytes BIGINT, gaps BIGINT, retransmitted_bytes BIGINT, requests BIGINT, responses BIGINT, "
    "non_kafka_bytes BIGINT"
)
UNIT_DDL = (
    "rank INT, unit INT, whole BOOLEAN, start BIGINT, `end` BIGINT, packets BIGINT, "
    "tcp_packets BIGINT, other_packets BIGINT, fragments BIGINT, not_ip BIGINT, first_ns BIGINT, "
    "last_ns BIGINT, error STRING, diagnostics ARRAY<STRING>"
)


def write_parquet(
    df: DataFrame,
    path: str,
    partition_by: tuple[str, ...] | None = None,
    mode: str = "overwrite",
) -> None:
    w = df.write.mode(mode).format("parquet")
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(path)


def partitions_table(exchanges: DataFrame, topics: DataFrame) -> DataFrame:
    """HW/LEO timeline rows: one per (exchange, topic partition) that carries an offset fact.

    `leo` is the log end offset after a successful Produce (base_offset + record_count), or the
    fetch offset of a follower's Fetch (`replica_id` >= 0: the follower's LEO);
    `high_watermark`/`last_stable_offset`/`log_start_offset` come from Fetch responses, `offset`
    from ListOffsets.
    """
    from pyspark.sql import functions as F

    p = exchanges.select(
        F.coalesce("response_ts", "request_ts").alias("ts"),
        F.coalesce("response_last_ns", "request_last_ns").alias("ts_ns"),
        "dt", "hour", "capture_id", "conn_id", "client", "broker", "client_id", "api",
        "api_version", "correlation_id", "status", "request_file", "request_frame", "response_file",
        "response_frame", "acks", "replica_id", F.explode("partitions").alias("p"),
    )  # fmt: skip
    p = p.select("*", "p.*").drop("p")
    p = p.join(F.broadcast(topics), on="topic_id", how="left")
    p = p.withColumn("topic", F.coalesce("topic", "topic_name")).drop("topic_name")
    follower_fetch = (F.col("api") == "Fetch") & (F.col("replica_id") >= 0)
    leo = F.when(
        (F.col("api") == "Produce") & (F.col("error_code") == 0) & F.col("base_offset").isNotNull()
        & (F.col("base_offset") >= 0) & F.col("record_count").isNotNull(),
        F.col("base_offset") + F.col("record_count"),
    ).when(follower_fetch, F.col("fetch_offset"))  # fmt: skip
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


def aggregates(exchanges: DataFrame, parts: DataFrame,
               only: Sequence[str] = AGGREGATES) -> dict[str, DataFrame]:
    """The summary tables (`AGGREGATES`) over the exchanges and partitions tables; `only`:
    just those (the others' DataFrames are not built: each costs the JVM an analysis)."""
    build = {"api_latency": _api_latency, "partition_hw": _partition_hw,
             "client_topic_usage": _client_topic_usage, "errors": _errors}
    return {name: build[name](exchanges, parts) for name in only}


def _api_latency(exchanges: DataFrame, parts: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    err = (F.col("error_code").isNotNull() & (F.col("error_code") != 0)) | (
        F.col("partition_error_count") > 0
    )
    return exchanges.groupBy("api", "api_version", "broker").agg(
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


def _partition_hw(exchanges: DataFrame, parts: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

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
    return partition_hw.join(leo, on=["topic", "partition"], how="full_outer").withColumn(
        "hw_per_second",
        (F.col("hw_last") - F.col("hw_first"))
        / F.greatest(
            F.lit(1e-3), F.col("last_ts").cast("double") - F.col("first_ts").cast("double")
        ),
    )


def _client_topic_usage(exchanges: DataFrame, parts: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return parts.groupBy("client_id", "client", "topic", "api").agg(
        F.countDistinct("conn_id", "correlation_id").alias("requests"),
        # exact, as on the driver (driver_aggregates): a group's partitions are few
        F.size(F.collect_set("partition")).cast("long").alias("partitions"),
        F.sum("record_count").alias("records"),
        F.sum("records_bytes").alias("records_bytes"),
        F.sum(F.when(F.col("error_code") != 0, 1).otherwise(0)).alias("errors"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
    )


def _errors(exchanges: DataFrame, parts: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

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
    return (
        top.unionByName(per_part)
        .groupBy("api", "error_code", "client_id", "topic")
        .agg(
            F.count("*").alias("count"),
            F.min("request_ts").alias("first_ts"),
            F.max("request_ts").alias("last_ts"),
        )
    )


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
            f.file_id,
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
        "rank INT, path STRING, file_id STRING, capture_id STRING, format STRING, "
        "compressed BOOLEAN, size BIGINT, linktype INT, snaplen BIGINT, probe_error STRING",
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
        .coalesce(1)  # one row per input: one task, no sampling job for a global sort
        .sortWithinPartitions("rank")
    )
