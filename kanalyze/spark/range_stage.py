"""Shard by work, not by connection (issue 19): each capture group (one file or a rotated set,
local or any Hadoop URI: `kanalyze.capture.source`) cut into byte ranges
(`kanalyze.parallel.range_plan.plan_chain`), one Spark task per range running the unmodified
engine over it (`range_rows`), the ranges' edge states collected and stitched on the driver,
and only the exchange rows the stitch keeps joined back with the run's connection ids. No
packet bytes cross a shuffle; a long connection is decoded by as many tasks as it spans
ranges. `None` (the caller runs the shuffle pipeline) whenever this path cannot prove the
result equal to `kanalyze export`: files that overlap in time (other than a file's end that
a merged edge covers: `kanalyze.parallel.range_edges`), a compressed or damaged
input, a URI no reader can open, or a stitch that refuses (flows that are not Kafka are
stitched: the view that saw each whole counts it). A file the plan does not walk
(`range_plan.UNCOUNTED`) shows damage or an overlap in time only in its run: its group is
refused then, after stage 1, and its range work counted in `refused_*`. Driver-side;
pyspark is imported when used.
"""

from __future__ import annotations

import atexit
import bisect
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kanalyze.capture import CaptureError
from kanalyze.capture.source import readable
from kanalyze.engine import EngineOptions
from kanalyze.flows import FIN, RST, SYN
from kanalyze.parallel.range_edges import edge_conflict
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.range_plan import (
    RANK_BITS,
    RangeWalks,
    WalkedHeaders,
    chain_ordered,
    plan_chain,
)
from kanalyze.parallel.ranges import Range, Unstitchable, stitch
from kanalyze.parallel.replay import INF
from kanalyze.spark import schemas as R
from kanalyze.spark.decode import key_roles
from kanalyze.spark.hadoop_read import hadoop_settings
from kanalyze.spark.range_rows import RANGED_SCHEMA, Edge, unpack_edge
from kanalyze.spark.rows import stable_conn_id
from kanalyze.spark.schemas import pointer
from kanalyze.spark.units import FileInfo, is_uri

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

RANGES_ENV = "KANALYZE_SPARK_RANGES"  # "0": never try the range path (docs/spark.md)


@dataclass(slots=True)
class Ranged:
    """The range path's stage-2-shaped rows: the exchanges (over the persisted task output)
    and the small side rows (connections, topic names, reading statistics) already on the
    driver, in `DECODED_SCHEMA`'s column order; and how the work was spread."""

    exchanges: DataFrame | None  # None: not built (`run_ranges(frames=False)`)
    side: list[tuple]
    tasks: DataFrame  # persisted, or read from `stage`: unpersist / remove it when done
    balance: dict[str, float] = field(default_factory=dict)
    # the file ranks of the capture groups whose stitch refused (their rows are not in
    # `decoded`: the caller decodes them with the shuffle pipeline)
    refused: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # per refused group: its first file, why
    stage: str | None = None  # the staged rows' directory (`tasks` reads it): remove when done
    keep: list[tuple] = field(default_factory=list)  # (range, index, conn_id, name fixes)


# ranges planned per core: enough for Spark to even out ranges of unequal cost (it hands the
# next task to the core that is free), few enough that the per-task cost stays small (each task
# ~0.1 CPU-s of its own: its engine's overlap and head, the worker's task set-up, the staged
# file). 8 per core made local[2] cut the 1 GB bench set into 17 ranges where 4 gives 9 (one
# per file): 0.5-1.0 CPU-s more in the workers, 4.8 s against 4.3 (docs/spark.md, E12)
RANGES_PER_CORE = 4


def plan_groups(files: list[FileInfo], parallelism: int,
                walked: Mapping[str, WalkedHeaders] | None = None,
                walker: RangeWalks | None = None) -> tuple[list[list[Range]], list[int]]:
    """Per capture group, the ranges of one run over its inputs (`plan_chain`: one file, or a
    rotated set whose files do not overlap in time, or only where a file's end is merged with
    the next file's head: `range_edges`), about `RANGES_PER_CORE` × `parallelism`
    ranges in all, each file at least one; and the ranks of the files of the groups this path
    cannot take (the shuffle pipeline decodes them): a compressed, irregular or damaged
    input, an unreadable URI, or files that overlap in time. `walked`: the record headers of
    large remote pcaps, walked by Spark tasks (`remote_walk.walk_remote`); `walker`: walks
    a large remote pcapng's ranges in Spark tasks (`remote_walk.pcapng_walker`)."""
    files = sorted(files, key=lambda f: f.rank)
    if not files or [f.rank for f in files] != list(range(len(files))):
        return [], [f.rank for f in files if not f.error]
    range_bytes = int(os.environ.get(RANGE_BYTES_ENV) or 0) or None
    groups: dict[str, list[FileInfo]] = {}
    for f in files:
        if not f.error:  # not captures: only the files table has them
            groups.setdefault(f.capture_id, []).append(f)
    total = sum(f.size for g in groups.values() for f in g) or 1
    n = RANGES_PER_CORE * max(parallelism, 1)
    out: list[list[Range]] = []
    left: list[int] = []
    for group in groups.values():
        got = None
        if all(not f.compressed and readable(f.path) for f in group):
            share = max(1, round(n * sum(f.size for f in group) / total))
            try:
                got = plan_chain([f.path for f in group], share, range_bytes,
                                 ranks=[f.rank for f in group], walked=walked,
                                 walker=walker, merge_edges=True)
            except CaptureError:
                got = None
        if got is None:
            left.extend(f.rank for f in group)
        else:
            out.append(got)
    return out, left


def plan_file(files: list[FileInfo], parallelism: int) -> list[list[Range]] | None:
    """`plan_groups` when it takes every group, else None."""
    out, left = plan_groups(files, parallelism)
    return out if out and not left else None


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


COUNTERS = ("client_stream_bytes", "broker_stream_bytes", "client_frame_bytes",
            "broker_frame_bytes", "skipped_bytes", "gap_bytes", "gaps", "retransmitted_bytes",
            "requests", "responses")  # `range_engine.table_counters`, in its order


def _totals(edges: list[Edge], ids: list[dict[int, int]],
            owners: list[dict[int, tuple[int, int]]]) -> dict[int, list[int]]:
    """Per run connection, its counters as one process counts them: each owner's counts at
    the end of its part (its close, or the handover) minus those at its start."""
    out: dict[int, list[int]] = {}
    for r, (edge, local) in enumerate(zip(edges, ids, strict=True)):
        got = edge.result.counters
        for lid, (lo, hi) in owners[r].items():
            end = got.get((lid, -1) if hi == INF else (lid, hi))
            start = got.get((lid, lo)) if lo else None
            if end is None or (lo and start is None):
                continue
            acc = out.setdefault(local[lid], [0] * len(COUNTERS))
            for k, v in enumerate(end):
                acc[k] += v - (start[k] if start else 0)
    return out


def _flows(edges: list[Edge], starts: dict[tuple, list[tuple[int, int]]]) -> dict:
    """The ranges' 4-tuple parts (`Edge.flows`) summed per incarnation (run id -> [first ts,
    last ts, packets]: a part belongs to the newest incarnation that started at or before its
    first packet, as the shuffle path counts a packet to the newest, and one before the
    4-tuple's first start to none) and per 4-tuple (key -> [first ts, last ts, packets, flags,
    file ranks]). The parts come in the order one engine reads their packets (the ranges in
    order, each range's in its order), so the times are those of the first and the last
    packet, as the shuffle path's (not the earliest and the latest: a capture's clock can
    step back)."""
    out: dict = {}

    def add(k: object, t0: int, t1: int, n: int) -> list:
        got = out.get(k)
        if got is None:
            got = out[k] = [t0, t1, n, 0, set()]
        else:
            got[1] = t1
            got[2] += n
        return got

    for edge in edges:
        for key, parts in edge.flows.items():
            inc = starts.get(key, [])
            for no, t0, t1, n, flg in parts:
                whole = add(key, t0, t1, n)
                whole[3] |= flg
                whole[4].add(no >> RANK_BITS)  # a part lies in one file
                at = bisect.bisect_right(inc, (no, INF)) - 1
                if at >= 0:
                    add(inc[at][1], t0, t1, n)
    return out


def _conn_rows(edges: list[Edge], ids: list[dict[int, int]], counts: dict[int, int],
               files: list[FileInfo], owners: list[dict[int, tuple[int, int]]],
               ) -> tuple[dict[int, str], list[dict]]:
    """(run connection id -> stable conn_id, the connections-table rows): a connection is
    named by the first packet any range saw of it, as the shuffle path names it. One without
    exchanges that is not Kafka (SSH, HTTP, TLS, a health check) has a row only on a 4-tuple
    the shuffle path's census ships (`Edge.hinted`), with what one engine counts for it: no
    stream counters, its bytes as not Kafka (`_other_bytes`), the roles it was opened with."""
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
    starts: dict[tuple, list[tuple[int, int]]] = {}  # 4-tuple -> (first packet, run id)
    for gid, (opened, r, lid) in first.items():
        starts.setdefault(edges[r].result.conns[lid].key, []).append((opened, gid))
    for got in starts.values():
        got.sort()
    flows = _flows(edges, starts)
    totals = _totals(edges, ids, owners)
    for r, own in enumerate(owners):  # one engine counts no stream of a flow judged not Kafka
        for lid in own:
            if edges[r].result.conns[lid].judged is not None:
                totals.pop(ids[r][lid], None)
    per_tuple: dict[tuple, list[int]] = {}  # the shuffle path's counters are the 4-tuple's
    for gid, (_o, r, lid) in first.items():
        got = totals.get(gid)
        if got is not None:
            acc = per_tuple.setdefault(edges[r].result.conns[lid].key, [0] * len(COUNTERS))
            for k, v in enumerate(got):
                acc[k] += v
    other = _other_bytes(edges, owners)
    hinted = set().union(*(e.hinted for e in edges))
    names: dict[int, str] = {}
    rows: list[dict] = []
    seen: dict[tuple, int] = {}  # 4-tuple -> incarnations so far
    for gid in sorted(first):
        opened, r, lid = first[gid]
        conn = edges[r].result.conns[lid]
        judged = gid not in roles and not conn.kafka  # not Kafka, or no request seen
        if judged and conn.key not in hinted:
            continue  # the shuffle path's census leaves its flow out (no row)
        client, broker = roles.get(gid) or conn.roles or _roles(conn.key)
        rank, frame = pointer(opened)
        names[gid] = cid = stable_conn_id(files[rank].file_id, frame, client, broker)
        cap = files[rank].capture_id
        n = seen[conn.key] = seen.get(conn.key, 0) + 1
        info = {
            "capture_id": cap, "conn_id": cid, "client": client, "broker": broker,
            "incarnation": n, "exchanges": counts.get(gid, 0), "first_file": files[rank].path,
            "first_frame": frame, "kafka": conn.kafka or gid in roles, "syn_seen": conn.syn,
        }  # fmt: skip
        if n == 1 and (conn.key in per_tuple or judged):  # the first incarnation's row, as
            # the shuffle path (which decodes the 4-tuple's flow with one engine)
            got = per_tuple.get(conn.key, [0] * len(COUNTERS))
            info.update(zip(COUNTERS, got, strict=True),
                        non_kafka_bytes=other.get(conn.key, 0))
        part = flows.get(gid)
        if part is not None:
            info.update(first_ns=part[0], last_ns=part[1], packets=part[2])
        whole = flows.get(conn.key)
        if n == 1 and whole is not None:  # the 4-tuple's, on its first row (the shuffle path's)
            info.update(syn_seen=bool(whole[3] & SYN), fin_seen=bool(whole[3] & FIN),
                        rst_seen=bool(whole[3] & RST), files_spanned=len(whole[4]),
                        incarnations=len(starts[conn.key]))
        elif n > 1:
            info.update(kafka=None, syn_seen=None)
        rows.append({"kind": "connection", "capture_id": cap, "extra": json.dumps(info)})
    return names, rows


def _other_bytes(edges: list[Edge], owners: list[dict[int, tuple[int, int]]]) -> dict[tuple, int]:
    """Per 4-tuple, the bytes one engine counts as not Kafka (`ConnEdge.other_bytes`), from the
    views the stitch kept: the view that saw such a flow whole counts it; a later range's view
    of it is dropped (`stitch`)."""
    out: dict[tuple, int] = {}
    for edge, own in zip(edges, owners, strict=True):
        for lid in own:
            conn = edge.result.conns[lid]
            if conn.other_bytes:
                out[conn.key] = out.get(conn.key, 0) + conn.other_bytes
    return out


def _roles(key: tuple) -> tuple[str, str]:
    """A 4-tuple's (client, broker) as the shuffle path guesses them for a connection its
    engine never opened (a flow held undecided to the end: `decode.key_roles` over the same
    direction-free key)."""
    a, pa_, b, pb = key
    return key_roles(a + pa_.to_bytes(2, "big") + b + pb.to_bytes(2, "big"))


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


@dataclass(slots=True)
class _Group:
    """One capture group's stitch: its first task, what to keep, its connection rows."""

    first: int
    keep: list[tuple] = field(default_factory=list)  # (task, index, conn_id, name fixes)
    conns: list[dict] = field(default_factory=list)
    handovers: int = 0
    stale: int = 0


def _stitch_group(edges: list[Edge], first: int, files: list[FileInfo], opts: EngineOptions,
                  topic_ids: dict[str, str] | None, with_bodies: bool) -> _Group:
    """Raises Unstitchable."""
    # the rows depend on one engine's release order only through the topic-id names one
    # exchange taught and another read (`name_fixes` walks the sequence): without any, the
    # release is not replayed (the tables are sorted by time)
    ordered = any(e.names for e in edges)
    st = stitch([e.result for e in edges], opts, others=True, ordered=ordered)
    conflict = edge_conflict([e.result for e in edges], st.own)
    if conflict is not None:
        raise Unstitchable(conflict)
    fixes = name_fixes(edges, st.sequence, dict(topic_ids or {}), with_bodies)
    counts: dict[int, int] = {}
    for r, i in st.sequence:
        gid = st.ids[r][edges[r].result.done[i][3]]
        counts[gid] = counts.get(gid, 0) + 1
    names, conn_rows = _conn_rows(edges, st.ids, counts, files, st.owners)
    keep = [(first + r, i, names.get(st.ids[r][edges[r].result.done[i][3]]), fixes.get((r, i)))
            for r, i in st.sequence]
    return _Group(first, keep, conn_rows, st.handovers, st.stale)


def run_ranges(spark: SparkSession, plan: list[list[Range]], files: list[FileInfo],
               opts: EngineOptions, decode: bool = True,
               topic_ids: dict[str, str] | None = None,
               with_bodies: bool = False, left: list[int] | None = None,
               report: dict[str, float] | None = None, frames: bool = True,
               refusals: list[str] | None = None) -> Ranged | None:
    """Stage 1 per range (all groups' ranges in one job), the stitch per capture group on the
    driver, the kept rows. A group whose stitch refuses is left out (`Ranged.refused`: the
    caller decodes only its files with the shuffle pipeline); None when every group refused
    (the task output is unpersisted). `report` gets what the refusals cost (`refused_*`: the
    groups, ranges, bytes and task CPU seconds whose range work was thrown away), also when
    every group refused. `frames` False: when every group stitched and the rows are staged,
    the caller writes the tables from the staged rows and gets no exchanges DataFrame (None:
    building it costs the driver and the JVM a DataFrame of every kept row). `refusals` gets
    each refused group's first file and the stitch's reason (`Ranged.reasons`), also when
    every group refused."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    files = sorted(files, key=lambda f: f.rank)
    paths = [f.path for f in files]
    ranges = [r for group in plan for r in group]
    caps = [files[r.layout.rank].capture_id for r in ranges]
    # the costliest first (the most packets, then bytes): a task that starts last should be
    # a short one (by bytes alone, a consumer's file of few large packets started before a
    # producer's of 4 times as many, and local[2]'s last task ended 0.15 s after the other)
    order = sorted(range(len(ranges)),
                   key=lambda t: (-ranges[t].packets, ranges[t].start - ranges[t].end))
    # remote inputs: the tasks read them through their own Hadoop reader, with these settings
    settings = hadoop_settings(spark) if any(is_uri(p) for p in paths) else None

    # local masters: the tasks leave their rows in files the write job reads back, so only
    # the edges cross into the JVM before the stitch (no cache of every row)
    stage = _staging(spark)

    def task(batches: Iterator) -> Iterator:
        from kanalyze.spark.inputs import use_worker_hadoop
        from kanalyze.spark.range_rows import range_rows

        use_worker_hadoop(settings)
        for b in batches:
            for t in b.column("id").to_pylist():
                t = order[t]
                yield from range_rows(ranges[t], opts, paths, caps[t], decode, topic_ids,
                                      with_bodies, key=t, stage=stage)

    def staged(batches: Iterator) -> Iterator:
        from kanalyze.spark.range_rows import read_staged

        for b in batches:
            yield from read_staged(stage, iter(b.column("id").to_pylist()))  # type: ignore[arg-type]

    n = len(ranges)
    t0 = time.perf_counter()
    ddl = R.spark_ddl(RANGED_SCHEMA)
    out = spark.range(0, n, 1, n).mapInArrow(task, ddl)
    if stage is None:
        tasks = out.persist(StorageLevel.MEMORY_AND_DISK)
        edge_rows = tasks.where(F.col("kind") == "edge")
    else:
        tasks, edge_rows = spark.range(0, n, 1, n).mapInArrow(staged, ddl), out
    try:
        got = {r["rng"]: unpack_edge(r["extra"])
               for r in edge_rows.select("rng", "extra").collect()}
    except BaseException:
        _drop(tasks, stage)
        raise
    t1 = time.perf_counter()
    groups: list[_Group] = []
    refused: list[int] = list(left or [])  # the planner's leftovers: the shuffle path's too
    reasons: list[str] = []
    first = 0
    waste = dict.fromkeys(("refused_groups", "refused_ranges", "refused_bytes"), 0)
    waste["refused_task_cpu_s"] = 0.0
    for group in plan:
        try:
            if any(first + i not in got for i in range(len(group))):
                raise Unstitchable("a range's task lost its edge state")
            edges = [got[first + i] for i in range(len(group))]
            if not chain_ordered(group, [e.result for e in edges]):
                raise Unstitchable("its files overlap in time (one process interleaves them)")
            groups.append(_stitch_group(edges, first, files, opts, topic_ids, with_bodies))
        except Unstitchable as e:
            ranks = sorted({r.layout.rank for r in group})
            refused.extend(ranks)
            reasons.append(f"{files[ranks[0]].path}: {e}")
            # this work is redone by the shuffle pipeline (measured: docs/spark.md)
            waste["refused_groups"] += 1
            waste["refused_ranges"] += len(group)
            waste["refused_bytes"] += sum(r.end - r.start for r in group)
            waste["refused_task_cpu_s"] += sum(
                got[first + i].task_s[1] for i in range(len(group)) if first + i in got)
        first += len(group)
    waste["refused_task_cpu_s"] = round(waste["refused_task_cpu_s"], 2)
    if report is not None:
        report.update(waste)
    if refusals is not None:
        refusals.extend(reasons)
    if not groups:
        _drop(tasks, stage)
        return None
    t2 = time.perf_counter()
    keep = [k for g in groups for k in g.keep]
    fixed = any(k[3] for k in keep)
    cols = [c.name for c in R.DECODED_SCHEMA]
    exchanges = None
    if frames or refused or stage is None:
        kept = spark.createDataFrame(
            keep, "rng INT, idx INT, kept_conn_id STRING, fix MAP<STRING, STRING>")
        exchanges = (
            tasks.where(F.col("kind") == "exchange")
            .join(F.broadcast(kept), ["rng", "idx"], "inner")
            .withColumn("conn_id", F.col("kept_conn_id"))
        )
        if fixed:
            exchanges = _fill_names(exchanges)
        exchanges = exchanges.select(*cols)
    side = [row for g in groups for row in g.conns]
    lost = set(refused)  # the refused groups' statistics and names come from the shuffle path
    for t, r in enumerate(ranges):
        if r.layout.rank not in lost and t in got:
            cap = caps[t]
            side.extend({"kind": "topic", "capture_id": cap, "extra": json.dumps([tid, name])}
                        for tid, name in got[t].topics.items())
            side.append({"kind": "unit", "capture_id": cap, "extra": got[t].unit})
    size = sum(f.size for f in files) or 1
    sizes = [r.end - r.start for r in ranges]
    cpu = [got[t].result.cpu_s for t in range(n)]
    balance = {
        "stage1_tasks": n,
        "stage1_max_share": round(max(sizes) / size, 3),
        "stage2_tasks": 0,
        "stage2_max_share": 0.0,
        "bytes_shuffled_est": 0,
        "ranges": n,
        "handovers": sum(g.handovers for g in groups),
        "stale": sum(g.stale for g in groups),
        "cpu_max_share": round(max(cpu) / (sum(cpu) or 1.0), 3),
        "cpu_s": round(sum(cpu), 1),  # the engine runs' CPU seconds (all tasks)
        "task_wall_s": round(sum(got[t].task_s[0] for t in range(n)), 1),  # Python, all tasks
        "task_cpu_s": round(sum(got[t].task_s[1] for t in range(n)), 1),
        "stage1_s": round(t1 - t0, 1),  # wall: the tasks and the edges' collect
        "stitch_s": round(t2 - t1, 1),
        "join_s": round(time.perf_counter() - t2, 1),  # the kept table built and sent
    }
    balance["refused_files"] = len(refused)
    balance.update(waste)
    return Ranged(exchanges, [tuple(row.get(c) for c in cols) for row in side], tasks, balance,
                  refused, reasons, stage, keep)


STAGE_ENV = "KANALYZE_SPARK_STAGE"  # "0": keep the range rows in Spark's cache, local or not


def _staging(spark: SparkSession) -> str | None:
    """A scratch directory for the ranges' rows when the driver and every task share this
    machine's file system (local masters), else None."""
    if not (spark.sparkContext.master or "").startswith("local") or \
            os.environ.get(STAGE_ENV) == "0":
        return None
    where = spark.conf.get("spark.local.dir", None) or None
    path = tempfile.mkdtemp(prefix="kanalyze-ranges-", dir=where.split(",")[0] if where else None)
    atexit.register(shutil.rmtree, path, True)  # an API user who never unpersists
    return path


def _drop(tasks: DataFrame, stage: str | None) -> None:
    tasks.unpersist()
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)
