"""Stage 2 of the Spark pipeline: segment rows sorted by (capture group, connection, time, file
rank, frame) drive one `kanalyze.engine.Engine` per connection — the same code as
`kanalyze export` — and become *exchange rows* (the `exchanges` table), one *connection row*
per 4-tuple, the topic-id names learned from the bodies, and the unit rows passed through.
The "slices" strategy (`decode_slice`) reads whole capture groups instead of shuffling.
Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import zlib
from collections.abc import Iterable, Iterator

import pyarrow as pa

from dissectors import DecodeContext
from kanalyze.capture import CaptureStats, Packet
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import FIN, RST, SYN, FlowStats, decode_segment
from kanalyze.spark.extract import conn_key
from kanalyze.spark.rows import RowBuilder
from kanalyze.spark.schemas import (
    BATCH_ROWS,
    DECODED_SCHEMA,
    EXCHANGE_SCHEMA,
    FRAME_BITS,
    KIND_UNIT,
    pointer,
)
from kanalyze.spark.units import Plan, iter_unit


class _ConnRun:
    """One 4-tuple's engine and what the connections table reports about it."""

    __slots__ = (
        "engine",
        "out",
        "first_ns",
        "last_ns",
        "packets",
        "flags",
        "files",
        "infos",
        "first_ptr",
    )

    def __init__(self, opts: EngineOptions) -> None:
        self.out: list[Exchange] = []
        self.engine = Engine(self.out.append, opts)
        self.first_ns = None
        self.last_ns = 0
        self.packets = 0
        self.flags = 0
        self.files: set[int] = set()
        self.infos: dict[
            int, tuple[str, str, int]
        ] = {}  # engine conn id -> (client, broker, incarnation)
        self.first_ptr = 0


class Decoder:
    """Stage 2 over rows sorted by (capture_id, conn_key, ts_ns, file_rank, file_no)."""

    def __init__(
        self,
        files: list[str],
        opts: EngineOptions | None = None,
        decode: bool = True,
        ctx: DecodeContext | None = None,
    ) -> None:
        self.files = files
        self.opts = opts or EngineOptions()
        self.builder = RowBuilder(files, decode=decode, ctx=ctx)
        self.rows: list[dict] = []
        self.cur: _ConnRun | None = None
        self.cur_key: tuple[str, bytes] | None = None
        self.engines = 0
        self.topic_names_sent: set[str] = set()

    def feed_batch(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        d = batch.to_pydict()
        for kind, cap, key, ts, rank, fno, lt, flg, data in zip(
            d["kind"], d["capture_id"], d["conn_key"], d["ts_ns"], d["file_rank"], d["file_no"],
            d["linktype"], d["flags"], d["data"], strict=True,
        ):  # fmt: skip
            if kind == KIND_UNIT:
                self.rows.append({"kind": "unit", "capture_id": cap, "extra": data.decode()})
                continue
            run = self.cur
            if run is None or (cap, key) != self.cur_key:
                self._finish()
                self.cur_key = (cap, key)
                run = self.cur = _ConnRun(self.opts)
                self.builder.capture_id = cap
                self.engines += 1
            no = (rank << FRAME_BITS) | fno
            if run.first_ns is None:
                run.first_ns, run.first_ptr = ts, no
            run.last_ns = ts
            run.packets += 1
            run.flags |= flg
            run.files.add(rank)
            eng = run.engine
            before = eng.next_id
            eng.feed(Packet(no, ts, lt, data, rank, fno))
            if eng.next_id != before:
                c = eng.order.get(before)
                if c is not None:
                    pair = (c.info.client, c.info.broker)
                    inc = 1 + len([v for v in run.infos.values() if v[:2] == pair])
                    run.infos[before] = (c.info.client, c.info.broker, inc)
            if run.out:
                self._emit(run)
            if len(self.rows) >= BATCH_ROWS:
                yield self._batch()
        if len(self.rows) >= BATCH_ROWS:
            yield self._batch()

    def finish(self) -> Iterator[pa.RecordBatch]:
        self._finish()
        if self.rows:
            yield self._batch()

    def _emit(self, run: _ConnRun) -> None:
        b = self.builder
        for ex in run.out:
            client, broker, inc = run.infos.get(
                ex.conn.id, (ex.conn.client, ex.conn.broker, ex.conn.id)
            )
            row = b.row(ex, b.conn_id(self.engines, ex.conn.id, client, broker, inc))
            row["kind"] = "exchange"
            self.rows.append(row)
        run.out.clear()

    def _finish(self) -> None:
        run = self.cur
        if run is None:
            return
        run.engine.close()
        self._emit(run)
        st = run.engine.stats
        cap = self.cur_key[0] if self.cur_key else ""
        for tid, name in self.builder.bodies.names.items():
            if tid not in self.topic_names_sent:
                self.topic_names_sent.add(tid)
                self.rows.append(
                    {"kind": "topic", "capture_id": cap, "extra": json.dumps([tid, name])}
                )
        r0, f0 = pointer(run.first_ptr)
        clients = list(run.infos.values())
        client, broker = (clients[0][0], clients[0][1]) if clients else ("", "")
        info = {
            "capture_id": cap,
            "conn_id": hashlib.sha1(f"{cap}|{client}|{broker}|1".encode()).hexdigest()[:16]
            if client
            else None,
            "client": client,
            "broker": broker,
            "incarnations": st.connections,
            "kafka": st.kafka_connections > 0,
            "first_ns": run.first_ns,
            "last_ns": run.last_ns,
            "packets": run.packets,
            "syn_seen": bool(run.flags & SYN),
            "fin_seen": bool(run.flags & FIN),
            "rst_seen": bool(run.flags & RST),
            "files_spanned": len(run.files),
            "first_file": self.files[r0],
            "first_frame": f0,
            "client_stream_bytes": st.client.stream,
            "broker_stream_bytes": st.broker.stream,
            "client_frame_bytes": st.client.frames,
            "broker_frame_bytes": st.broker.frames,
            "skipped_bytes": st.client.skipped + st.broker.skipped,
            "gap_bytes": st.client.gaps + st.broker.gaps,
            "gaps": st.client.gap_count + st.broker.gap_count,
            "retransmitted_bytes": st.client.retransmitted + st.broker.retransmitted,
            "requests": st.client.pdus,
            "responses": st.broker.pdus,
            "non_kafka_bytes": st.non_kafka_bytes,
        }
        self.rows.append({"kind": "connection", "capture_id": cap, "extra": json.dumps(info)})
        self.cur = None
        self.cur_key = None

    def _batch(self) -> pa.RecordBatch:
        rows, self.rows = self.rows, []
        return pa.RecordBatch.from_pylist(rows, schema=DECODED_SCHEMA)


def decode(
    batches: Iterable[pa.RecordBatch],
    files: list[str],
    opts: EngineOptions | None = None,
    decode_bodies: bool = True,
    ctx: DecodeContext | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stage 2 as a generator over Arrow batches (the body of `mapInArrow`)."""
    dec = Decoder(files, opts, decode_bodies, ctx)
    for b in batches:
        yield from dec.feed_batch(b)
    yield from dec.finish()


def slice_of(key: bytes, slices: int) -> int:
    return zlib.crc32(key) % slices


def decode_slice(
    plan: Plan,
    slice_no: int,
    slices: int,
    opts: EngineOptions | None = None,
    decode_bodies: bool = True,
    ctx: DecodeContext | None = None,
) -> Iterator[pa.RecordBatch]:
    """Exchanges of the connections with crc32(key) % slices == slice_no, reading every input of
    a capture group merged in capture order into one engine, as offline (the Data Source's
    `exchanges` table: correct across files without a shuffle, at the cost of slices x reading)."""
    files = [f.path for f in plan.files]
    groups: dict[str, dict[int, list[int]]] = {}
    for i, u in enumerate(plan.units):
        groups.setdefault(plan.files[u.rank].capture_id, {}).setdefault(u.rank, []).append(i)
    rows: list[dict] = []
    for cap, by_file in groups.items():
        builder = RowBuilder(files, capture_id=cap, decode=decode_bodies, ctx=ctx)
        out: list[Exchange] = []
        engine = Engine(out.append, opts or EngineOptions())
        seen: dict[tuple[str, str], int] = {}
        infos: dict[int, tuple[str, str, int]] = {}
        streams = [_file_packets(plan, ids) for ids in by_file.values()]
        merged = heapq.merge(*streams, key=lambda p: (p.ts_ns, p.file_index, p.file_no))
        flows = FlowStats()
        for pkt in merged:
            seg = decode_segment(pkt.linktype, pkt.data, flows)
            if seg is None or slice_of(conn_key(seg), slices) != slice_no:
                continue
            pkt.no = (pkt.file_index << FRAME_BITS) | pkt.file_no
            before = engine.next_id
            engine.feed(pkt)
            if engine.next_id != before and (c := engine.order.get(before)) is not None:
                pair = (c.info.client, c.info.broker)
                seen[pair] = seen.get(pair, 0) + 1
                infos[before] = (*pair, seen[pair])
            if out:
                _slice_rows(builder, out, infos, rows)
                if len(rows) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA)
                    rows = []
        engine.close()
        _slice_rows(builder, out, infos, rows)
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA)


def _file_packets(plan: Plan, unit_ids: list[int]) -> Iterator[Packet]:
    for ui in unit_ids:
        yield from iter_unit(plan, plan.units[ui], CaptureStats())


def _slice_rows(builder: RowBuilder, out: list[Exchange], infos: dict, rows: list[dict]) -> None:
    for ex in out:
        client, broker, inc = infos.get(ex.conn.id, (ex.conn.client, ex.conn.broker, 1))
        rows.append(builder.row(ex, builder.conn_id(0, ex.conn.id, client, broker, inc)))
    out.clear()
