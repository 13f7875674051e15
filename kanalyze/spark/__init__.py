"""The Spark pipeline (optional extra `kanalyze[spark]`): the only package that imports pyspark.

Entry points: `kanalyze spark PATH... --out DIR`; the Python API below (DataFrames, nothing
written); `kanalyze.spark.pipeline.run_pipeline` (the CLI's Parquet writer); and
`spark.read.format("kafka-pcap")` (`kanalyze.spark.datasource`). Importing this package
imports nothing heavy (it makes the system allocator Arrow's default, unless one is chosen:
`arrow_memory`); `units` and `rows` need only pyarrow.

    from kanalyze.spark import build_tables, exchanges
    df = exchanges(spark, ["captures/"])                 # one row per exchange
    t = build_tables(spark, ["s3a://bucket/caps/"], with_bodies=True)
    t.connections.show(); t.partitions.groupBy("topic").count().show(); t.unpersist()
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kanalyze.spark.arrow_memory import prefer_system_pool

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from kanalyze.spark.pipeline import Tables

__all__ = ["build_tables", "connections", "exchanges", "files", "partitions"]

log = logging.getLogger("kanalyze.spark")
prefer_system_pool()  # before pyarrow starts, here and in the processes this one starts


def build_tables(spark: SparkSession, paths: Sequence[str] | str, **options: Any) -> Tables:
    """Every table of a run as DataFrames over one cached decode: `.exchanges`, `.partitions`,
    `.connections`, `.files`, `.topics`, `.aggregates()`; `.unpersist()` frees the cache.

    Options: ports, split_bytes, decode_bodies (False: header-only), with_bodies (JSON body
    columns), capture_id, shuffle_partitions, max_frame, topic_ids. A missing or unreadable
    input raises `kanalyze.spark.inputs.InputError` before any job runs. `.notes` names each
    capture group the range path's stitch refused (decoded by the shuffle path instead) and
    why; each is also logged as a warning on the `kanalyze.spark` logger, so the one-table
    functions below do not hide them. (Not named `tables`: that is the submodule
    `kanalyze.spark.tables`.)"""
    from kanalyze.spark.pipeline import build

    t = build(spark, [paths] if isinstance(paths, str) else list(paths), **options)
    for note in t.notes:
        log.warning("%s", note)
    return t


def exchanges(spark: SparkSession, paths: Sequence[str] | str, **options: Any) -> DataFrame:
    """One row per exchange (the `exchanges` table; schema in docs/spark.md)."""
    return build_tables(spark, paths, **options).exchanges


def partitions(spark: SparkSession, paths: Sequence[str] | str, **options: Any) -> DataFrame:
    """The HW/LEO timeline: one row per (exchange, topic partition) with an offset fact."""
    return build_tables(spark, paths, **options).partitions


def connections(spark: SparkSession, paths: Sequence[str] | str, **options: Any) -> DataFrame:
    """One row per connection incarnation."""
    return build_tables(spark, paths, **options).connections


def files(spark: SparkSession, paths: Sequence[str] | str, **options: Any) -> DataFrame:
    """Capture quality per input file."""
    return build_tables(spark, paths, **options).files
