"""`export -T parquet -o FILE`: one typed row per exchange, the columns of the Spark
`exchanges` table (kanalyze/spark/rows.py builds both), written with pyarrow alone.

So a capture too small for a cluster lands in the same table shape as a large one: the same
queries run on both. File pointers name the first input (one capture file per export is the
common case; with several inputs, frame numbers are those of the merged order).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from kanalyze.spark.rows import RowBuilder
from kanalyze.spark.schemas import BATCH_ROWS, EXCHANGE_SCHEMA
from kanalyze.spark.units import default_capture_id


def write_parquet(path: str, session) -> int:  # noqa: ANN001 - a Session
    """Write the session's (selected) exchanges to `path` with the table's own decode policy
    (as Spark's); returns the row count."""
    files = [str(p) for p in session.paths]
    builder = RowBuilder(files, capture_id=default_capture_id(files[0]) if files else "")
    seen: dict[tuple[str, str], int] = {}
    incarnation: dict[int, int] = {}
    rows: list[dict] = []
    n = 0
    # the unselected exchanges that teach topic-id names are still read (as Spark sees them)
    base = getattr(session, "base", session)
    keep = getattr(session, "selection", None)
    with pq.ParquetWriter(path, EXCHANGE_SCHEMA) as writer:
        for ex in base.exchanges():
            if keep is not None and not keep(ex):
                builder.bodies.learn(ex)
                continue
            c = ex.conn
            inc = incarnation.get(c.id)
            if inc is None:
                pair = (c.client, c.broker)
                inc = incarnation[c.id] = seen[pair] = seen.get(pair, 0) + 1
            rows.append(builder.row(ex, builder.conn_id(0, c.id, c.client, c.broker, inc)))
            if len(rows) >= BATCH_ROWS:
                writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA))
                n += len(rows)
                rows = []
        if rows:
            writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA))
            n += len(rows)
    return n
