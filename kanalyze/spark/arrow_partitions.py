"""The `partitions` table's rows built from exchange rows with pyarrow, in the task that writes
the exchanges (`direct_write`): the same columns, types and values as
`tables.partitions_table`, without a Spark job. On a 2-core machine that job's row-by-row work
in the JVM (explode, broadcast join, Parquet write: ~1.1 CPU-s per GB of capture) ran on the
cores the decoding needs. Pure pyarrow (no pyspark): it runs in the Python tasks.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kanalyze.spark.schemas import PARTITION_FIELDS, PARTITION_TYPE

_TS = pa.timestamp("us", tz="UTC")
# the exchange columns each partition fact carries, in `partitions_table`'s order (after the
# join key `topic_id`, which a Spark join on a column name moves to the front, and ts, ts_ns)
CARRIED = [
    ("dt", pa.date32()), ("hour", pa.int8()), ("capture_id", pa.string()),
    ("conn_id", pa.string()), ("client", pa.string()), ("broker", pa.string()),
    ("client_id", pa.string()), ("api", pa.string()), ("api_version", pa.int16()),
    ("correlation_id", pa.int32()), ("status", pa.string()), ("request_file", pa.string()),
    ("request_frame", pa.int64()), ("response_file", pa.string()),
    ("response_frame", pa.int64()), ("acks", pa.int16()), ("replica_id", pa.int32()),
]  # fmt: skip
FACT_FIELDS = [f for f in PARTITION_TYPE if f.name != "topic_id"]
PARTITIONS_SCHEMA = pa.schema(
    [("topic_id", pa.string()), ("ts", _TS), ("ts_ns", pa.int64()), *CARRIED, *FACT_FIELDS,
     ("leo", pa.int64())]
)  # fmt: skip
# a row is kept when one of these offsets is known (`partitions_table`'s filter)
OFFSET_FACTS = ("high_watermark", "last_stable_offset", "log_start_offset", "base_offset",
                "fetch_offset", "offset", "leo")  # fmt: skip


def _true(mask: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """SQL's WHEN/WHERE reading of a three-valued condition: null counts as false."""
    return pc.fill_null(mask, False)


def _leo(cols: dict[str, pa.Array]) -> pa.Array:
    """The log end offset a fact shows: base_offset + record_count after a successful Produce,
    the fetch offset of a follower's Fetch (replica_id >= 0), else null."""
    base, count = cols["base_offset"], cols["record_count"]
    produced = _true(pc.and_kleene(
        pc.and_kleene(pc.equal(cols["api"], "Produce"), pc.equal(cols["error_code"], 0)),
        pc.and_kleene(pc.greater_equal(base, 0), pc.is_valid(count)),
    ))  # fmt: skip
    follower = _true(pc.and_kleene(pc.equal(cols["api"], "Fetch"),
                                   pc.greater_equal(cols["replica_id"], 0)))
    none = pa.nulls(len(base), pa.int64())
    return pc.if_else(produced, pc.add(base, count),
                      pc.if_else(follower, cols["fetch_offset"], none))


def _chunked(col: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])


def partition_rows(exchanges: pa.Table, names: dict[str, str]) -> pa.Table:
    """One row per (exchange, partition fact) that carries an offset, as
    `tables.partitions_table` builds it: `names` (topic id -> name, the run's topics table)
    fills a fact's missing topic. Columns in `PARTITIONS_SCHEMA` order (dt, hour included)."""
    parts = exchanges.column("partitions").combine_chunks()
    facts = pc.list_flatten(parts)
    if len(facts) == 0:
        return PARTITIONS_SCHEMA.empty_table()
    parent = pc.list_parent_indices(parts)
    # a null fact (none are written, but explode gives one) has every field null
    cols: dict[str, pa.Array] = dict(zip(PARTITION_FIELDS, facts.flatten(), strict=True))
    for name in ("request_ts", "response_ts", "request_last_ns", "response_last_ns",
                 *(n for n, _t in CARRIED)):
        cols[name] = exchanges.column(name).take(parent)
    known = pa.array(list(names), pa.string())
    at = pc.index_in(cols["topic_id"], value_set=known)
    learned = pa.array(list(names.values()), pa.string()).take(at)
    cols["topic"] = pc.coalesce(cols["topic"], learned)
    cols["ts"] = pc.coalesce(cols["response_ts"], cols["request_ts"])
    cols["ts_ns"] = pc.coalesce(cols["response_last_ns"], cols["request_last_ns"])
    cols["leo"] = _leo(cols)
    keep = pc.is_valid(cols[OFFSET_FACTS[0]])
    for name in OFFSET_FACTS[1:]:
        keep = pc.or_(keep, pc.is_valid(cols[name]))
    table = pa.Table.from_arrays(
        [_chunked(cols[f.name]).cast(f.type) for f in PARTITIONS_SCHEMA],
        schema=PARTITIONS_SCHEMA,
    )
    return table.filter(keep)
