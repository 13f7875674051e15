"""The Arrow layouts of the Spark tables (segments, exchanges, stage 2's output) and their Spark
DDL, plus the packet numbering both stages share. Pure pyarrow (no pyspark).

`Packet.no` inside the engine is ``rank << 40 | frame``: it keeps file order and maps back to
(file, frame number) without a side table.
"""

from __future__ import annotations

import pyarrow as pa

from kanalyze.bodies import PARTITION_FIELDS as _FACT_FIELDS

FRAME_BITS = 40
FRAME_MASK = (1 << FRAME_BITS) - 1
BATCH_ROWS = 4096

KIND_PACKET, KIND_UNIT = 0, 1


def pointer(no: int) -> tuple[int, int]:
    """(file rank, frame number) of an engine packet number."""
    return no >> FRAME_BITS, no & FRAME_MASK


# --------------------------------------------------------------------------- schemas
SEGMENT_SCHEMA = pa.schema(
    [
        ("kind", pa.int8()),
        ("capture_id", pa.string()),
        ("conn_key", pa.binary()),
        ("ts_ns", pa.int64()),
        ("order_ns", pa.int64()),  # running max of ts_ns in the unit: file order within a file
        ("file_rank", pa.int32()),
        ("file_no", pa.int64()),
        ("flags", pa.int16()),  # TCP flags | payload.FROM_FIRST (direction within conn_key)
        ("seq", pa.int64()),
        ("ack", pa.int64()),
        ("cut", pa.int32()),  # payload bytes the snaplen cut off
        ("hint", pa.bool_()),  # the payload starts like a Kafka request (payload.kafka_hint)
        ("data", pa.binary()),  # the TCP payload (a unit row: its statistics as JSON)
    ]
)

PARTITION_TYPE = pa.struct(
    [
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("error_code", pa.int16()),
        ("fetch_offset", pa.int64()),
        ("high_watermark", pa.int64()),
        ("last_stable_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("base_offset", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("record_batches", pa.int32()),
        ("record_count", pa.int64()),
        ("records_bytes", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
    ]
)
PARTITION_FIELDS = [f.name for f in PARTITION_TYPE]
# the partitions column is `kanalyze.bodies.PartitionFacts`, field for field
assert tuple(PARTITION_FIELDS) == _FACT_FIELDS
_TS = pa.timestamp("us", tz="UTC")

EXCHANGE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("capture_id", pa.string()),
    ("conn_id", pa.string()),
    ("client", pa.string()),
    ("broker", pa.string()),
    ("client_ip", pa.string()),
    ("client_port", pa.int32()),
    ("broker_ip", pa.string()),
    ("broker_port", pa.int32()),
    ("api_key", pa.int16()),
    ("api", pa.string()),
    ("api_version", pa.int16()),
    ("correlation_id", pa.int32()),
    ("client_id", pa.string()),
    ("status", pa.string()),
    ("inferred", pa.bool_()),  # request_missing whose api was inferred (NDJSON `inferred`)
    ("acks", pa.int16()),
    ("latency_ms", pa.float64()),
    ("request_ts", _TS),
    ("response_ts", _TS),
    ("request_first_ns", pa.int64()),
    ("request_last_ns", pa.int64()),
    ("response_first_ns", pa.int64()),
    ("response_last_ns", pa.int64()),
    ("request_size", pa.int32()),
    ("response_size", pa.int32()),
    ("request_file", pa.string()),
    ("request_frame", pa.int64()),
    ("request_first_file", pa.string()),
    ("request_first_frame", pa.int64()),
    ("response_file", pa.string()),
    ("response_frame", pa.int64()),
    ("response_first_file", pa.string()),
    ("response_first_frame", pa.int64()),
    ("error_code", pa.int16()),
    ("throttle_time_ms", pa.int32()),
    ("partition_error_count", pa.int32()),
    ("replica_id", pa.int32()),
    ("topics", pa.list_(pa.string())),
    ("partitions", pa.list_(PARTITION_TYPE)),
    ("diagnostics", pa.list_(pa.string())),
    ("request_body", pa.string()),  # JSON, redacted, only with --with-bodies
    ("response_body", pa.string()),
    ("dt", pa.date32()),  # UTC date and hour of the exchange's first message: the partitions
    ("hour", pa.int8()),
]
EXCHANGE_SCHEMA = pa.schema(EXCHANGE_FIELDS)
EXCHANGE_COLUMNS = [n for n, _ in EXCHANGE_FIELDS]

# stage 2 output: the exchange columns plus a discriminator and a JSON payload for small rows
DECODED_SCHEMA = pa.schema([("kind", pa.string()), *EXCHANGE_FIELDS, ("extra", pa.string())])


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string of a pyarrow schema (the subset of types used here)."""
    return ", ".join(f"`{f.name}` {_ddl(f.type)}" for f in schema)


def _ddl(t: pa.DataType) -> str:
    simple = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.string(): "STRING",
        pa.binary(): "BINARY",
        pa.date32(): "DATE",
        pa.bool_(): "BOOLEAN",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    if pa.types.is_list(t):
        return f"ARRAY<{_ddl(t.value_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {_ddl(f.type)}" for f in t) + ">"
    raise TypeError(f"no DDL for {t}")
