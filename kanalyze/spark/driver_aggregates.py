"""The aggregates `partition_hw`, `errors` and `client_topic_usage` computed on the driver with
pyarrow from the local tables, with the values `tables.aggregates` gives, without a Spark job
each. Local `--out` and small tables only (`pipeline.SMALL_TABLES`): the driver reads the tables
whole. On a 2-core machine their jobs cost the JVM ~1 CPU-s per GB of capture, on the cores the
decoding needs, and `client_topic_usage` alone ~0.6 s of wall time at the end of every run.
`api_latency` stays in Spark: its percentiles are Spark's approximation (`percentile_approx`),
which only Spark computes.

One difference is possible, and only for equal timestamps: when two high-watermark
observations of a partition share the first (or last) `ts_ns`, `hw_first` (`hw_last`,
`lso_last`, `log_start_last`) is the first of them in the tables' order here, whichever Spark
happens to read last there.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from kanalyze.spark.arrow_partitions import PARTITIONS_SCHEMA
from kanalyze.spark.schemas import EXCHANGE_SCHEMA

_TS = pa.timestamp("us", tz="UTC")
EXACT_AGGREGATES = ("partition_hw", "errors", "client_topic_usage")  # computed here
PARTITION_HW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("observations", pa.int64()),
    ("hw_min", pa.int64()), ("hw_max", pa.int64()), ("hw_first", pa.int64()),
    ("hw_last", pa.int64()), ("lso_last", pa.int64()), ("log_start_last", pa.int64()),
    ("first_ts", _TS), ("last_ts", _TS), ("leo_max", pa.int64()), ("hw_per_second", pa.float64()),
])  # fmt: skip
ERRORS_SCHEMA = pa.schema([
    ("api", pa.string()), ("error_code", pa.int16()), ("client_id", pa.string()),
    ("topic", pa.string()), pa.field("count", pa.int64(), nullable=False),
    ("first_ts", _TS), ("last_ts", _TS),
])  # fmt: skip
USAGE_KEYS = ["client_id", "client", "topic", "api"]
CLIENT_TOPIC_USAGE_SCHEMA = pa.schema([
    *[(k, pa.string()) for k in USAGE_KEYS], pa.field("requests", pa.int64(), nullable=False),
    pa.field("partitions", pa.int64(), nullable=False), ("records", pa.int64()),
    ("records_bytes", pa.int64()), ("errors", pa.int64()), ("first_seen", _TS),
    ("last_seen", _TS),
])  # fmt: skip
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_KEYS = ["topic", "partition"]
_WITH_NULLS = pc.ScalarAggregateOptions(skip_nulls=False)


def read_table(path: str, schema: pa.Schema, columns: list[str]) -> pa.Table:
    """`columns` of every Parquet file of the table directory `path` (all runs: files Spark
    wrote and files the tasks wrote alike), without its partition columns."""
    files = pa.schema([f for f in schema if f.name not in ("dt", "hour")])
    return ds.dataset(path, schema=files, format="parquet").to_table(columns=columns)


def _grouped(table: pa.Table, keys: list[str], aggs: list[tuple], names: list[str]) -> dict:
    """(key tuple) -> {name: value} of `table.group_by(keys).aggregate(aggs)` (in order)."""
    got = table.group_by(keys, use_threads=False).aggregate(aggs)
    out: dict = {}
    for row in got.to_pylist():
        out[tuple(row[k] for k in keys)] = {n: row[c] for n, c in zip(
            names, [c for c in got.column_names if c not in keys], strict=True)}
    return out


def partition_hw(parts: pa.Table) -> pa.Table:
    """`tables.aggregates`'s `partition_hw` from the partitions table's rows: per (topic,
    partition) the high watermarks seen (min, max, first and last by time, with the LSO and
    log start of the last), the largest LEO, the HW's rate; a full outer join of the HW and
    LEO groups, where null keys never match (SQL)."""
    hw = parts.filter(pc.fill_null(pc.greater_equal(parts.column("high_watermark"), 0), False))
    stats = _grouped(hw, _KEYS, [
        ([], "count_all"), ("high_watermark", "min"), ("high_watermark", "max"),
        ("ts", "min"), ("ts", "max")], ["observations", "hw_min", "hw_max", "first_ts",
                                        "last_ts"])  # fmt: skip
    timed = hw.filter(pc.is_valid(hw.column("ts_ns")))  # min_by / max_by skip a null order
    timed = timed.take(pc.sort_indices(timed, [("ts_ns", "ascending")]))
    ends = _grouped(timed, _KEYS, [
        ("high_watermark", "first", _WITH_NULLS), ("high_watermark", "last", _WITH_NULLS),
        ("last_stable_offset", "last", _WITH_NULLS), ("log_start_offset", "last", _WITH_NULLS),
    ], ["hw_first", "hw_last", "lso_last", "log_start_last"])  # fmt: skip
    leo = _grouped(parts.filter(pc.is_valid(parts.column("leo"))), _KEYS,
                   [("leo", "max")], ["leo_max"])
    rows = []
    matched = set()
    for key, got in stats.items():
        row = dict(zip(_KEYS, key, strict=True))
        row.update(got)
        row.update(ends.get(key, dict.fromkeys(("hw_first", "hw_last", "lso_last",
                                                "log_start_last"))))
        row["leo_max"] = None
        if None not in key and key in leo:
            row["leo_max"] = leo[key]["leo_max"]
            matched.add(key)
        rows.append(row)
    for key, got in leo.items():
        if key not in matched:
            rows.append({**dict(zip(_KEYS, key, strict=True)), **got})
    for row in rows:
        row["hw_per_second"] = _rate(row)
    names = PARTITION_HW_SCHEMA.names
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows],
                                schema=PARTITION_HW_SCHEMA)


def _rate(row: dict) -> float | None:
    """(hw_last - hw_first) / greatest(1e-3, last_ts - first_ts in seconds), as Spark
    computes it in doubles (a timestamp as a double is its microseconds / 1e6)."""
    first, last = row.get("hw_first"), row.get("hw_last")
    t0, t1 = row.get("first_ts"), row.get("last_ts")
    if first is None or last is None:
        return None
    span = None if t0 is None or t1 is None else _seconds(t1) - _seconds(t0)
    return float(last - first) / (1e-3 if span is None else max(1e-3, span))


def _seconds(ts: datetime) -> float:
    return ((ts - EPOCH) // timedelta(microseconds=1)) / 1e6


def errors(exchanges: pa.Table, parts: pa.Table) -> pa.Table:
    """`tables.aggregates`'s `errors`: exchanges with a top-level error code and partition
    facts with an error code, counted per (api, error_code, client_id, topic) with their
    first and last request time."""
    code = exchanges.column("error_code")
    top = exchanges.filter(pc.fill_null(pc.not_equal(code, 0), False))
    per_part = parts.filter(pc.fill_null(pc.not_equal(parts.column("error_code"), 0), False))
    both = pa.concat_tables([
        pa.table({"api": top.column("api"), "error_code": top.column("error_code"),
                  "client_id": top.column("client_id"),
                  "topic": pa.nulls(top.num_rows, pa.string()),
                  "request_ts": top.column("request_ts")}),
        pa.table({"api": per_part.column("api"), "error_code": per_part.column("error_code"),
                  "client_id": per_part.column("client_id"), "topic": per_part.column("topic"),
                  "request_ts": per_part.column("ts")}),
    ])  # fmt: skip
    keys = ["api", "error_code", "client_id", "topic"]
    got = _grouped(both, keys, [([], "count_all"), ("request_ts", "min"),
                                ("request_ts", "max")], ["count", "first_ts", "last_ts"])
    rows = [{**dict(zip(keys, k, strict=True)), **v} for k, v in got.items()]
    return pa.Table.from_pylist(rows, schema=ERRORS_SCHEMA)


def client_topic_usage(parts: pa.Table) -> pa.Table:
    """`tables.aggregates`'s `client_topic_usage`: per (client_id, client, topic, api) the
    distinct requests (conn_id, correlation_id pairs with neither null), the distinct
    partitions, records and record bytes (null when none is known), the facts with a non-zero
    error code, and the first and last time. Null keys form their own groups, as in SQL."""
    keys = USAGE_KEYS
    failed = pc.fill_null(pc.not_equal(parts.column("error_code"), 0), False)
    cols = parts.select([*keys, "partition", "record_count", "records_bytes", "ts"])
    cols = cols.append_column("failed", pc.cast(failed, pa.int64()))
    got = _grouped(cols, keys, [
        ("partition", "count_distinct"), ("record_count", "sum"), ("records_bytes", "sum"),
        ("failed", "sum"), ("ts", "min"), ("ts", "max"),
    ], ["partitions", "records", "records_bytes", "errors", "first_seen", "last_seen"])  # fmt: skip
    pairs = parts.filter(pc.and_(pc.is_valid(parts.column("conn_id")),
                                 pc.is_valid(parts.column("correlation_id"))))
    distinct = pairs.group_by([*keys, "conn_id", "correlation_id"], use_threads=False).aggregate([])
    requests = _grouped(distinct, keys, [([], "count_all")], ["requests"])
    rows = [{**dict(zip(keys, k, strict=True)), "requests": requests.get(k, {"requests": 0})[
        "requests"], **v} for k, v in got.items()]
    names = CLIENT_TOPIC_USAGE_SCHEMA.names
    return pa.Table.from_pylist([{n: r[n] for n in names} for r in rows],
                                schema=CLIENT_TOPIC_USAGE_SCHEMA)


def exact_aggregates(out: str) -> dict[str, pa.Table]:
    """`EXACT_AGGREGATES` over the local tables under `out` (every run's rows)."""
    parts = read_table(f"{out}/partitions", PARTITIONS_SCHEMA, [
        "topic", "partition", "high_watermark", "last_stable_offset", "log_start_offset",
        "ts", "ts_ns", "leo", "api", "client_id", "error_code", "client", "conn_id",
        "correlation_id", "record_count", "records_bytes"])  # fmt: skip
    ex = read_table(f"{out}/exchanges", EXCHANGE_SCHEMA,
                    ["api", "client_id", "error_code", "request_ts"])
    return {"partition_hw": partition_hw(parts), "errors": errors(ex, parts),
            "client_topic_usage": client_topic_usage(parts)}
