"""Shard by work, not by connection (issue 19): one local capture file cut into byte ranges
(`kanalyze.parallel.ranges.plan_ranges`), one Spark task per range running the unmodified
engine over it (`range_rows`), the ranges' edge states collected and stitched on the driver,
and only the exchange rows the stitch keeps joined back with the run's connection ids. No
packet bytes cross a shuffle; a long connection is decoded by as many tasks as it spans
ranges. `None` (the caller runs the shuffle pipeline) whenever this path cannot prove the
result equal to `kanalyze export`: several files, a remote, compressed or damaged input, or a
stitch that refuses. Driver-side; pyspark is imported when used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kanalyze.capture import CaptureError
from kanalyze.engine import EngineOptions
from kanalyze.flows import FIN, RST, SYN
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.ranges import Range, Unstitchable, plan_ranges, stitch
from kanalyze.spark import schemas as R
from kanalyze.spark.range_rows import RANGED_SCHEMA, Edge, unpack_edge
from kanalyze.spark.rows import stable_conn_id
from kanalyze.spark.units import FileInfo, is_uri

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

RANGES_ENV = "KANALYZE_SPARK_RANGES"  # "1": try the range path (default off, docs/spark.md)


@dataclass(slots=True)
class Ranged:
    """The range path's stage-2-shaped rows (`decoded`), its persisted task output, and how
    the work was spread."""

    decoded: DataFrame
    tasks: DataFrame  # persisted: unpersist when done
    balance: dict[str, float] = field(default_factory=dict)


def plan_file(files: list[FileInfo], parallelism: int) -> list[Range] | None:
    """The ranges of the one input when it is a local regular uncompressed capture that cuts
    into at least two ranges; None otherwise."""
    if len(files) != 1:
        return None
    f = files[0]
    if f.error or f.compressed or is_uri(f.path) or not os.path.isfile(f.path):
        return None
    range_bytes = int(os.environ.get(RANGE_BYTES_ENV) or 0) or None
    try:
        ranges = plan_ranges([f.path], max(parallelism, 2), range_bytes)
    except CaptureError:
        return None
    return ranges if ranges is not None and len(ranges) > 1 else None


def name_fixes(edges: list[Edge], sequence: list[tuple[int, int]], preloaded: dict[str, str],
               strict: bool) -> dict[tuple[int, int], dict[str, str]]:
    """Topic ids a range's decode could not name because another range's Metadata taught the
    name (one process knew it by then): per kept exchange, the names to fill into its
    partition facts. A name that differs from the run's, or any miss when the rows carry
    bodies (`strict`: JSON text cannot be patched), is `Unstitchable`."""
    known = dict(preloaded)
    fixes: dict[tuple[int, int], dict[str, str]] = {}
    for r, i in sequence:
        got = edges[r].names.get(i)
        if got is None:
            continue
        reads, writes = got
        for tid, name in reads.items():
            want = known.get(tid)
            if want == name:
                continue
            if name is not None or want is None or strict:
                raise Unstitchable("a topic name taught in another range")
            fixes.setdefault((r, i), {})[tid] = want
        known.update(writes)
    return fixes


def _conn_rows(edges: list[Edge], ids: list[dict[int, int]], counts: dict[int, int],
               f: FileInfo) -> tuple[dict[int, str], list[dict]]:
    """(run connection id -> stable conn_id, the connections-table rows): a connection is
    named by the first packet any range saw of it, as the shuffle path names it."""
    first: dict[int, tuple[int, int, int]] = {}  # run id -> (opened, range, local id)
    for r, (edge, local) in enumerate(zip(edges, ids, strict=True)):
        for lid, gid in local.items():
            conn = edge.result.conns.get(lid)
            if conn is not None and (gid not in first or conn.opened < first[gid][0]):
                first[gid] = (conn.opened, r, lid)
    roles: dict[int, tuple[str, str]] = {}
    for edge, local in zip(edges, ids, strict=True):
        for lid, role in edge.roles.items():
            roles.setdefault(local.get(lid, -1), role)
    flows: dict[tuple, list[int]] = {}  # 4-tuple -> [first ts, last ts, packets, flags]
    for edge in edges:
        for key, (t0, t1, n, flg) in edge.flows.items():
            got = flows.get(key)
            if got is None:
                flows[key] = [t0, t1, n, flg]
            else:
                got[0], got[1] = min(got[0], t0), max(got[1], t1)
                got[2] += n
                got[3] |= flg
    incarnations: dict[tuple, int] = {}
    for _o, r, lid in first.values():
        key = edges[r].result.conns[lid].key
        incarnations[key] = incarnations.get(key, 0) + 1
    names: dict[int, str] = {}
    rows: list[dict] = []
    seen: dict[tuple, int] = {}  # 4-tuple -> incarnations so far
    for gid in sorted(first):
        opened, r, lid = first[gid]
        conn = edges[r].result.conns[lid]
        if gid not in roles and not conn.kafka:
            continue
        client, broker = roles.get(gid, ("", ""))
        names[gid] = cid = stable_conn_id(f.file_id, opened, client, broker)
        n = seen[conn.key] = seen.get(conn.key, 0) + 1
        info = {
            "capture_id": f.capture_id, "conn_id": cid, "client": client, "broker": broker,
            "incarnation": n, "exchanges": counts.get(gid, 0), "first_file": f.path,
            "first_frame": opened, "kafka": conn.kafka or gid in roles, "syn_seen": conn.syn,
        }  # fmt: skip
        flow = flows.get(conn.key)
        if flow is not None and incarnations[conn.key] == 1:  # the 4-tuple's packets are its
            info.update(first_ns=flow[0], last_ns=flow[1], packets=flow[2],
                        syn_seen=bool(flow[3] & SYN), fin_seen=bool(flow[3] & FIN),
                        rst_seen=bool(flow[3] & RST), files_spanned=1, incarnations=1)
        rows.append({"kind": "connection", "capture_id": f.capture_id, "extra": json.dumps(info)})
    return names, rows


def _fill_names(df: DataFrame) -> DataFrame:
    """The partition facts' topic filled from the row's `fix` map, and `topics` rebuilt from
    them as `RowBuilder.row` builds it (sorted distinct topic, else topic id)."""
    from pyspark.sql import functions as F

    named = F.transform(
        "partitions",
        lambda p: p.withField("topic", F.coalesce(p["topic"], F.col("fix")[p["topic_id"]])),
    )
    df = df.withColumn("partitions", F.when(F.col("fix").isNull(), F.col("partitions"))
                       .otherwise(named))
    ids = F.filter(F.transform("partitions", lambda p: F.coalesce(p["topic"], p["topic_id"])),
                   lambda t: t.isNotNull())
    rebuilt = F.array_sort(F.array_distinct(ids))
    return df.withColumn("topics", F.when(F.col("fix").isNull() | (F.size("partitions") == 0),
                                          F.col("topics")).otherwise(rebuilt))


def run_ranges(spark: SparkSession, ranges: list[Range], f: FileInfo, opts: EngineOptions,
               decode: bool = True, topic_ids: dict[str, str] | None = None,
               with_bodies: bool = False) -> Ranged | None:
    """Stage 1 per range, the stitch on the driver, the kept rows; None when the stitch
    refuses (the task output is unpersisted; the caller runs the shuffle pipeline)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    paths, cap, whole = [f.path], f.capture_id, len(ranges) == 1

    def task(batches: Iterator) -> Iterator:
        from kanalyze.spark.range_rows import range_rows

        for b in batches:
            for i in b.column("id").to_pylist():
                yield from range_rows(ranges[i], opts, paths, cap, whole, decode, topic_ids,
                                      with_bodies)

    n = len(ranges)
    tasks = (spark.range(0, n, 1, n).mapInArrow(task, R.spark_ddl(RANGED_SCHEMA))
             .persist(StorageLevel.MEMORY_AND_DISK))
    got = {r["rng"]: unpack_edge(r["extra"])
           for r in tasks.where(F.col("kind") == "edge").select("rng", "extra").collect()}
    try:
        if sorted(got) != list(range(n)):
            raise Unstitchable("a range's task lost its edge state")
        edges = [got[i] for i in range(n)]
        st = stitch([e.result for e in edges], opts)
        fixes = name_fixes(edges, st.sequence, dict(topic_ids or {}), with_bodies)
    except Unstitchable:
        tasks.unpersist()
        return None
    counts: dict[int, int] = {}
    for r, i in st.sequence:
        gid = st.ids[r][edges[r].result.done[i][3]]
        counts[gid] = counts.get(gid, 0) + 1
    names, conn_rows = _conn_rows(edges, st.ids, counts, f)
    keep = [(r, i, names.get(st.ids[r][edges[r].result.done[i][3]]), fixes.get((r, i)))
            for r, i in st.sequence]
    kept = spark.createDataFrame(
        keep, "rng INT, idx INT, kept_conn_id STRING, fix MAP<STRING, STRING>")
    cols = [c.name for c in R.DECODED_SCHEMA]
    exchanges = (
        tasks.where(F.col("kind") == "exchange")
        .join(F.broadcast(kept), ["rng", "idx"], "inner")
        .withColumn("conn_id", F.col("kept_conn_id"))
    )
    if fixes:
        exchanges = _fill_names(exchanges)
    exchanges = exchanges.select(*cols)
    side = tasks.where(F.col("kind").isin("topic", "unit")).select(*cols)
    conns = spark.createDataFrame([tuple(row.get(c) for c in cols) for row in conn_rows],
                                  R.spark_ddl(R.DECODED_SCHEMA))
    size = f.size or 1
    sizes = [r.end - r.start for r in ranges]
    balance = {
        "stage1_tasks": n,
        "stage1_max_share": round(max(sizes) / size, 3),
        "stage2_tasks": 0,
        "stage2_max_share": 0.0,
        "bytes_shuffled_est": 0,
        "ranges": n,
        "handovers": st.handovers,
        "stale": st.stale,
        "cpu_max_share": round(max(e.result.cpu_s for e in edges)
                               / (sum(e.result.cpu_s for e in edges) or 1.0), 3),
    }
    return Ranged(exchanges.unionByName(side).unionByName(conns), tasks, balance)
