"""The aggregates (`tables.AGGREGATES`) computed on the driver with pyarrow from the local
tables, with the values `tables.aggregates` gives, without a Spark job. Local `--out` and small
tables only (`pipeline.SMALL_TABLES`): the driver reads the tables whole. Their Spark jobs cost
the JVM ~1 CPU-s per GB of capture on a 2-core machine, on the cores the decoding needs, and
~1.5 s of wall time at the end of a first run in a session (query planning and code generation,
cold), more than the rest of a small capture's pipeline.

Two differences are possible:

* `api_latency`'s percentiles are exact here by the definition of Spark's
  `percentile_approx` (the smallest value with at least p·n of the group's values at or below
  it), where Spark estimates: its estimate is that same value for groups of fewer than ~5,000
  latencies (`accuracy` 10,000) and within n/10,000 ranks of it above. Its average may differ
  from Spark's in the last bits (the order of a floating-point sum; Spark's own depends on
  how the rows are split into tasks).
* When two high-watermark observations of a partition share the first (or last) `ts_ns`,
  `hw_first` (`hw_last`, `lso_last`, `log_start_last`) is the first of them in the tables'
  order here, whichever Spark happens to read last there.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from kanalyze.spark.arrow_partitions import PARTITIONS_SCHEMA
from kanalyze.spark.schemas import EXCHANGE_SCHEMA

_TS = pa.timestamp("us", tz="UTC")
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
LATENCY_KEYS = ["api", "api_version", "broker"]
PERCENTILES = (0.5, 0.9, 0.99, 0.999)
API_LATENCY_SCHEMA = pa.schema([
    ("api", pa.string()), ("api_version", pa.int16()), ("broker", pa.string()),
    pa.field("exchanges", pa.int64(), nullable=False), ("ok", pa.int64()),
    ("no_response", pa.int64()), ("errors", pa.int64()),
    # Spark's array<double> with no null element, as its Parquet writer names it
    ("latency_ms_p50_p90_p99_p999", pa.list_(pa.field("element", pa.float64(), nullable=False))),
    ("latency_ms_max", pa.float64()), ("latency_ms_avg", pa.float64()),
    ("request_bytes", pa.int64()), ("response_bytes", pa.int64()),
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


def _flag(mask: pa.ChunkedArray) -> pa.ChunkedArray:
    """1 where `mask` is true, 0 where false or null (SQL's `when(mask, 1).otherwise(0)`)."""
    return pc.cast(pc.fill_null(mask, False), pa.int64())


def percentile(ordered: list[float], p: float) -> float:
    """Spark's `percentile_approx` definition, exactly: the smallest of the ascending
    `ordered` values with at least `p` of them at or below it (rank ceil(p·n), from 1)."""
    return ordered[max(math.ceil(p * len(ordered)), 1) - 1]


def api_latency(exchanges: pa.Table) -> pa.Table:
    """`tables.aggregates`'s `api_latency`: per (api, api_version, broker) the exchanges, how
    many were ok, unanswered or failed (a top-level error code or a partition error), the
    latency percentiles, maximum and average, and the bytes each way."""
    status, code = exchanges.column("status"), exchanges.column("error_code")
    failed = pc.or_kleene(pc.fill_null(pc.not_equal(code, 0), False),
                          pc.greater(exchanges.column("partition_error_count"), 0))
    cols = exchanges.select([*LATENCY_KEYS, "latency_ms", "request_size", "response_size"])
    for name, mask in (("is_ok", pc.equal(status, "ok")),
                       ("is_open", pc.equal(status, "no_response")), ("failed", failed)):
        cols = cols.append_column(name, _flag(mask))
    got = _grouped(cols, LATENCY_KEYS, [
        ([], "count_all"), ("is_ok", "sum"), ("is_open", "sum"), ("failed", "sum"),
        ("latency_ms", "max"), ("latency_ms", "mean"), ("request_size", "sum"),
        ("response_size", "sum"), ("latency_ms", "list"),
    ], ["exchanges", "ok", "no_response", "errors", "latency_ms_max", "latency_ms_avg",
        "request_bytes", "response_bytes", "latencies"])  # fmt: skip
    rows = []
    for key, v in got.items():
        ordered = sorted(x for x in v.pop("latencies") if x is not None)
        v["latency_ms_p50_p90_p99_p999"] = (
            [percentile(ordered, p) for p in PERCENTILES] if ordered else None)
        rows.append({**dict(zip(LATENCY_KEYS, key, strict=True)), **v})
    names = API_LATENCY_SCHEMA.names
    return pa.Table.from_pylist([{n: r[n] for n in names} for r in rows],
                                schema=API_LATENCY_SCHEMA)


def client_topic_usage(parts: pa.Table) -> pa.Table:
    """`tables.aggregates`'s `client_topic_usage`: per (client_id, client, topic, api) the
    distinct requests (conn_id, correlation_id pairs with neither null), the distinct
    partitions, records and record bytes (null when none is known), the facts with a non-zero
    error code, and the first and last time. Null keys form their own groups, as in SQL."""
    keys = USAGE_KEYS
    cols = parts.select([*keys, "partition", "record_count", "records_bytes", "ts"])
    cols = cols.append_column("failed", _flag(pc.not_equal(parts.column("error_code"), 0)))
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
    """Every aggregate (`tables.AGGREGATES`) over the local tables under `out` (every run's
    rows)."""
    parts = read_table(f"{out}/partitions", PARTITIONS_SCHEMA, [
        "topic", "partition", "high_watermark", "last_stable_offset", "log_start_offset",
        "ts", "ts_ns", "leo", "api", "client_id", "error_code", "client", "conn_id",
        "correlation_id", "record_count", "records_bytes"])  # fmt: skip
    ex = read_table(f"{out}/exchanges", EXCHANGE_SCHEMA, [
        "api", "client_id", "error_code", "request_ts", "api_version", "broker", "status",
        "partition_error_count", "latency_ms", "request_size", "response_size"])  # fmt: skip
    return {"api_latency": api_latency(ex), "partition_hw": partition_hw(parts),
            "errors": errors(ex, parts), "client_topic_usage": client_topic_usage(parts)}
