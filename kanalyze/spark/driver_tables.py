"""The range path's small tables (`connections`, `files`) built and written on the driver with
pyarrow, from the side rows the stitch already brought there: the same columns, types and
values as the DataFrame code in `pipeline.build` and `tables.files_table`, without a Spark job.
Those tables hold one row per connection or input, yet cost seven Spark jobs (the files table's
aggregation alone five): on a 2-core machine each job's planning and scheduling in the JVM
competed with the decoding. Pure pyarrow; used for a local `--out` only (`direct_write`).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Sequence

import pyarrow as pa

from kanalyze.spark.direct_write import publish
from kanalyze.spark.schemas import DECODED_SCHEMA
from kanalyze.spark.tables import CONNECTION_DDL
from kanalyze.spark.units import Plan

_TS = pa.timestamp("us", tz="UTC")
_TYPES = {"STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_()}
_KIND = DECODED_SCHEMA.names.index("kind")
_EXTRA = DECODED_SCHEMA.names.index("extra")


def _ddl_fields(ddl: str) -> list[pa.Field]:
    """The Arrow fields of a flat Spark DDL string (`name TYPE, ...`)."""
    out = []
    for part in ddl.split(","):
        name, kind = part.split()
        out.append(pa.field(name.strip("`"), _TYPES[kind]))
    return out


CONNECTIONS_SCHEMA = pa.schema(
    [*_ddl_fields(CONNECTION_DDL), pa.field("first_ts", _TS), pa.field("last_ts", _TS)])
FILES_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("path", pa.string()), ("file_id", pa.string()),
    ("capture_id", pa.string()), ("format", pa.string()), ("compressed", pa.bool_()),
    ("size", pa.int64()), ("linktype", pa.int32()), ("snaplen", pa.int64()),
    ("units", pa.int64()), ("packets", pa.int64()), ("tcp_packets", pa.int64()),
    ("other_packets", pa.int64()), ("ip_fragments", pa.int64()), ("first_ns", pa.int64()),
    ("last_ns", pa.int64()), ("diagnostics", pa.list_(pa.string())),
    ("split_verified", pa.bool_()), pa.field("error", pa.string(), nullable=False),
    ("first_ts", _TS), ("last_ts", _TS),
])  # fmt: skip


def _extras(side: Sequence[tuple], kind: str) -> list[dict]:
    return [json.loads(r[_EXTRA]) for r in side if r[_KIND] == kind]


def _micros(ns: int | None, floor: bool) -> int | None:
    """Spark's `ns / 1000` (a double) as micros: floored (F.floor) or truncated (a cast)."""
    if ns is None:
        return None
    us = float(ns) / 1000.0
    return math.floor(us) if floor else int(us)


def connections(side: Sequence[tuple]) -> pa.Table:
    """The `connections` table: the side rows' JSON as `from_json(CONNECTION_DDL)` reads it,
    first_ts / last_ts from the nanoseconds, sorted by first_ns (nulls first)."""
    names = [f.name for f in CONNECTIONS_SCHEMA][:-2]
    rows = [{n: c.get(n) for n in names} for c in _extras(side, "connection")]
    for row in rows:
        row["first_ts"] = _micros(row["first_ns"], True)
        row["last_ts"] = _micros(row["last_ns"], True)
    rows.sort(key=lambda r: (r["first_ns"] is not None, r["first_ns"] or 0))
    return _table(rows, CONNECTIONS_SCHEMA)


def _table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    cols = {f.name: [r[f.name] for r in rows] for f in schema}
    ts = {f.name for f in schema if pa.types.is_timestamp(f.type)}
    return pa.table(
        [pa.array(cols[f.name], pa.int64() if f.name in ts else f.type).cast(f.type)
         for f in schema],
        schema=schema,
    )


def _sum(values: list) -> int | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def files(side: Sequence[tuple], plan: Plan) -> pa.Table:
    """The `files` table (`tables.files_table`): one row per input of the plan, its units'
    reading statistics summed, in rank order."""
    units: dict[int, list[dict]] = {}
    for u in _extras(side, "unit"):
        units.setdefault(u.get("rank"), []).append(u)
    split = {f.rank for f in plan.files} - {u.rank for u in plan.units if u.whole}
    rows = []
    for f in plan.files:
        got = units.get(f.rank)
        row = {"rank": f.rank, "path": f.path, "file_id": f.file_id, "capture_id": f.capture_id,
               "format": f.format, "compressed": f.compressed, "size": f.size,
               "linktype": f.linktype, "snaplen": f.snaplen, "split_verified": f.rank in split}
        read_error = None
        if got is None:  # no unit read it (a left join's nulls)
            row.update(dict.fromkeys(("units", "packets", "tcp_packets", "other_packets",
                                      "ip_fragments", "first_ns", "last_ns", "diagnostics")))
        else:
            col = {k: [u.get(k) for u in got] for k in (
                "packets", "tcp_packets", "other_packets", "fragments", "first_ns", "last_ns",
                "error", "diagnostics")}  # fmt: skip
            firsts = [v for v in col["first_ns"] if v is not None]
            lasts = [v for v in col["last_ns"] if v is not None]
            errors = [e for e in col["error"] if e is not None and e != ""]
            read_error = "; ".join(dict.fromkeys(errors))  # collect_set: distinct
            row.update(
                units=len(got), packets=_sum(col["packets"]),
                tcp_packets=_sum(col["tcp_packets"]), other_packets=_sum(col["other_packets"]),
                ip_fragments=_sum(col["fragments"]), first_ns=min(firsts) if firsts else None,
                last_ns=max(lasts) if lasts else None,
                diagnostics=[d for ds in col["diagnostics"] if ds is not None for d in ds],
            )  # fmt: skip
        probe = f.error or ""
        row["error"] = "; ".join(e for e in (probe or None, read_error) if e is not None)
        row["first_ts"] = _micros(row["first_ns"], False)
        row["last_ts"] = _micros(row["last_ns"], False)
        rows.append(row)
    rows.sort(key=lambda r: r["rank"])
    return _table(rows, FILES_SCHEMA)


def write_table(table: pa.Table, path: str, mode: str) -> None:
    """`table` as one zstd Parquet file of the table directory `path` (a local directory),
    as Spark's writer lays it out (overwrite clears the directory, append adds a file)."""
    import pyarrow.parquet as pq

    run = uuid.uuid4().hex
    scratch = os.path.join(path, f"_temporary-{run}")
    os.makedirs(scratch, exist_ok=True)
    name = f"part-00000-{run}.zstd.parquet"
    pq.write_table(table, os.path.join(scratch, name), compression="zstd")
    publish(path, scratch, [name], mode)
