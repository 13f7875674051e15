"""The Spark pipeline's work-sharded stage 1 (task side): one byte range of one capture file
(`kanalyze.parallel.ranges.run_range`) becomes exchange rows keyed by (range, index) and one
*edge row* carrying the range's `RangeResult` (the stitch's input: a few hundred bytes per
exchange, no payload). The driver stitches the edge rows and keeps the rows that stand
(`kanalyze.spark.range_stage`). Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa

from kanalyze.bodies import BodyDecoder
from kanalyze.capture import Packet
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.flows import FlowStats, Segment, decode_segment
from kanalyze.parallel.range_plan import RANK_BITS, ConnKey, conn_key
from kanalyze.parallel.ranges import Range, RangeResult, run_range
from kanalyze.parallel.worker import RecordingNames
from kanalyze.spark.payload import kafka_hint
from kanalyze.spark.rows import RowBuilder, facts_context, row_context
from kanalyze.spark.schemas import BATCH_ROWS, DECODED_SCHEMA

# stage 2's columns plus where a row came from: (range, exchange index, local connection id)
RANGED_SCHEMA = pa.schema([*DECODED_SCHEMA, ("rng", pa.int32()), ("idx", pa.int32()),
                           ("lid", pa.int32())])


@dataclass(slots=True)
class Edge:
    """What one range ships to the driver besides its rows (pickled into the edge row)."""

    result: RangeResult
    # per exchange index: (topic-id names its decode read, names it taught), when any
    names: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)
    roles: dict[int, tuple[str, str]] = field(default_factory=dict)  # lid -> (client, broker)
    # per 4-tuple (`range_engine.conn_key`), over the range's own packets in the order its
    # engine read them, one part per connection this range's engine opened on it (a reused
    # 4-tuple has several) and per file (a merged edge: `Range.merges`): [first packet, its
    # time, the last packet's time, packets, TCP flags seen] (the connections table; the
    # ranges' counts add up to the file's; the driver gives each part to its incarnation)
    flows: dict[tuple, list[list[int]]] = field(default_factory=dict)
    task_s: tuple[float, float] = (0.0, 0.0)  # the whole task's (wall, CPU) seconds
    # the side rows' data, shipped here so the driver builds the small tables without another
    # pass over the persisted rows: topic id -> name its bodies taught, its reading statistics
    topics: dict[str, str] = field(default_factory=dict)
    unit: str = ""  # the `files` table's unit row (`tables.UNIT_DDL`) as JSON
    # the 4-tuples one of this range's own packets marks as maybe Kafka (`payload.kafka_hint`,
    # the shuffle path's flow census: only such 4-tuples are decoded there), so a connection
    # that is not Kafka gets a connections row only where the shuffle path writes one
    hinted: set[tuple] = field(default_factory=set)


def staged_path(stage: str, key: int) -> str:
    """Where a range's task leaves its exchange rows (an Arrow IPC file) for the write job."""
    return os.path.join(stage, f"range-{key}.arrow")


def read_staged(stage: str, keys: Iterator[int]) -> Iterator[pa.RecordBatch]:
    """The exchange rows the ranges `keys` staged (memory-mapped: nothing is copied)."""
    for key in keys:
        with pa.memory_map(staged_path(stage, key)) as src:
            got = pa.ipc.open_file(src)
            for i in range(got.num_record_batches):
                yield got.get_batch(i)


def pack_edge(edge: Edge) -> str:
    return base64.b64encode(pickle.dumps(edge, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def unpack_edge(text: str) -> Edge:
    return pickle.loads(base64.b64decode(text))  # noqa: S301 - our own tasks' rows


class UnitWalk:
    """The range's reading statistics (the `files` table's unit row) and its 4-tuples' parts,
    gathered as the engine reads the range's own packets (a `ranges.RangeTap`; not the
    overlap's), so the ranges' counts add up to the file's. `per` gets each 4-tuple's parts, a
    new part at each packet where the engine opened a connection on that 4-tuple; `hints` the
    4-tuples with a packet `kafka_hint` (with the options' ports and frame bound) says may be
    Kafka."""

    def __init__(self, per: dict[tuple, list[list[int]]], hints: set[tuple],
                 opts: EngineOptions) -> None:
        self.per, self.hints = per, hints
        self.ports, self.max_frame = frozenset(opts.ports), opts.max_frame
        self.flows = FlowStats()
        self.tcp = self.other = 0
        self.first: int | None = None
        self.last: int | None = None
        self.read = False  # every packet of the range was read

    def packet(self, pkt: Packet, opened: list[ConnKey]) -> None:
        seg = self._counted(pkt, self.flows)
        if seg is not None:
            self._part(seg, pkt, opened)

    def merged(self, pkt: Packet, opened: list[ConnKey]) -> None:
        """A packet of the next file read here (`Range.merges`): that file's first range
        counts it in its unit row (`skipped`), this one gives it to its 4-tuple's part."""
        seg = decode_segment(pkt.linktype, pkt.data, FlowStats())
        if seg is not None:
            self._part(seg, pkt, opened)

    def skipped(self, pkt: Packet) -> None:
        self._counted(pkt, self.flows)

    def _counted(self, pkt: Packet, flows: FlowStats) -> Segment | None:
        if self.first is None:
            self.first = pkt.ts_ns
        self.last = pkt.ts_ns
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is None:
            self.other += 1
        else:
            self.tcp += 1
        return seg

    def _part(self, seg: Segment, pkt: Packet, opened: list[ConnKey]) -> None:
        key = conn_key((seg.src, seg.sport, seg.dst, seg.dport))
        if key not in self.hints and kafka_hint(seg, self.ports, self.max_frame):
            self.hints.add(key)
        parts = self.per.get(key)
        # a new part where the engine opened a connection, or the packets' file changes
        if parts is None or key in opened or parts[-1][0] >> RANK_BITS != pkt.no >> RANK_BITS:
            self.per.setdefault(key, []).append([pkt.no, pkt.ts_ns, pkt.ts_ns, 1, seg.flags])
        else:
            got = parts[-1]
            got[2] = pkt.ts_ns  # its last packet's (the shuffle path's `last_ns`)
            got[3] += 1
            got[4] |= seg.flags

    def ended(self) -> None:
        self.read = True

    def row(self, rng: Range, error: str) -> str:
        """The unit row as JSON; `error`: the run's (the range's reading, unless all of it
        was read: then the overlap's, which is not this range's to report)."""
        stat = {
            "rank": rng.layout.rank, "unit": rng.index,
            "whole": rng.start == rng.layout.data_start and rng.end == rng.layout.size,
            "start": rng.start, "end": rng.end,
            "packets": self.tcp + self.other, "tcp_packets": self.tcp,
            "other_packets": self.other, "fragments": self.flows.fragments,
            "not_ip": self.flows.not_ip, "first_ns": self.first, "last_ns": self.last,
            "error": "" if self.read else error, "diagnostics": [],
        }  # fmt: skip
        return json.dumps(stat)


def range_rows(rng: Range, opts: EngineOptions, files: list[str], capture_id: str,
               decode: bool = True,
               topic_ids: dict[str, str] | None = None,
               with_bodies: bool = False, key: int | None = None,
               stage: str | None = None) -> Iterator[pa.RecordBatch]:
    """One range's exchange rows (conn_id left empty: the driver names them after the
    stitch) and last its edge row (with the topic names and the unit statistics); `rng` in
    each row is `key` (the Spark task's number), by default the range's index. With `stage`
    (a directory the driver reads too: local masters), the exchange rows go to the Arrow file
    `staged_path(stage, key)` instead, and only the edge row is yielded."""
    key = rng.index if key is None else key
    names = RecordingNames(dict(topic_ids or {}))
    builder = RowBuilder(files, capture_id=capture_id, decode=decode, with_bodies=with_bodies)
    builder.bodies = BodyDecoder(
        facts_context(replace(row_context(topic_ids), topic_names=names), with_bodies))
    edge = Edge(RangeResult(rng.index, rng.base, rng.base))
    rows: list[dict] = []
    batches: list[pa.RecordBatch] = []
    count = 0

    def on_exchange(ex: Exchange) -> None:
        nonlocal count, rows
        names.reads, names.writes = {}, {}
        row = builder.row(ex, None)  # type: ignore[arg-type]
        if names.reads or names.writes:
            edge.names[count] = (names.reads, names.writes)
        c = ex.conn
        edge.roles.setdefault(c.id, (c.client, c.broker))
        row.update(kind="exchange", rng=key, idx=count, lid=c.id)
        rows.append(row)
        count += 1
        if len(rows) >= BATCH_ROWS:  # run_range drives the loop: batches wait here
            batches.append(pa.RecordBatch.from_pylist(rows, schema=RANGED_SCHEMA))
            rows = []

    t0, c0 = time.perf_counter(), time.process_time()
    walk = UnitWalk(edge.flows, edge.hinted, opts)
    edge.result = run_range(rng, opts, on_exchange, tap=walk)
    if rows:
        batches.append(pa.RecordBatch.from_pylist(rows, schema=RANGED_SCHEMA))
    if stage is None:
        yield from batches
    else:
        with pa.OSFile(staged_path(stage, key), "wb") as sink, \
                pa.ipc.new_file(sink, RANGED_SCHEMA) as out:
            for b in batches:
                out.write_batch(b)
    edge.topics = dict(builder.bodies.names.items())
    edge.unit = walk.row(rng, edge.result.error)
    edge.task_s = (time.perf_counter() - t0, time.process_time() - c0)
    edge_row = {"kind": "edge", "capture_id": capture_id, "rng": key, "extra": pack_edge(edge)}
    yield pa.RecordBatch.from_pylist([edge_row], schema=RANGED_SCHEMA)
