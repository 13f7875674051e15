"""Stage 2 of the Spark pipeline: segment rows sorted by (capture group, connection, time, file
rank, frame) drive one `kanalyze.engine.Engine` per connection — the same code as
`kanalyze export` — and become *exchange rows* (the `exchanges` table), one *connection row*
per 4-tuple, the topic-id names learned from the bodies, and the unit rows passed through.
The "slices" strategy (`decode_slice`) reads whole capture groups instead of shuffling.
Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import heapq
import json
import zlib
from collections.abc import Iterable, Iterator

import pyarrow as pa

from dissectors import DecodeContext
from kanalyze.capture import CaptureStats, Packet
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import FIN, RST, SYN, FlowStats, decode_segment, format_endpoint
from kanalyze.spark.extract import conn_key
from kanalyze.spark.payload import RAW_LINKTYPE, rebuild
from kanalyze.spark.rows import RowBuilder, stable_conn_id
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
    """One 4-tuple's engine and what the connections table reports about each incarnation."""

    __slots__ = (
        "engine", "out", "first_ns", "last_ns", "packets", "flags", "files", "first_ptr",
        "firsts", "roles", "lasts", "counts", "exchanges", "current",
    )  # fmt: skip

    def __init__(self, opts: EngineOptions) -> None:
        self.out: list[Exchange] = []
        self.engine = Engine(self.out.append, opts)
        self.first_ns: int | None = None
        self.last_ns = 0
        self.packets = 0
        self.flags = 0
        self.files: set[int] = set()
        self.first_ptr = 0
        # per engine connection id (one per incarnation of the 4-tuple), in order of appearance
        self.firsts: dict[int, tuple[int, int]] = {}  # id -> (packet no, ts) of its first packet
        self.roles: dict[int, tuple[str, str]] = {}  # id -> (client, broker)
        self.lasts: dict[int, int] = {}  # id -> ts of its last packet
        self.counts: dict[int, int] = {}  # id -> packets
        self.exchanges: dict[int, int] = {}  # id -> exchanges emitted
        self.current = 0  # the newest incarnation: later packets are counted to it


def key_roles(key: bytes) -> tuple[str, str]:
    """(client, broker) guessed from a connection key alone (the lower port is the broker): for
    an incarnation whose roles the engine never reported."""
    n = len(key) // 2
    a, b = key[:n], key[n:]
    ea = format_endpoint(a[:-2], int.from_bytes(a[-2:], "big"))
    eb = format_endpoint(b[:-2], int.from_bytes(b[-2:], "big"))
    pa_, pb = int.from_bytes(a[-2:], "big"), int.from_bytes(b[-2:], "big")
    return (eb, ea) if pa_ < pb else (ea, eb)


class Decoder:
    """Stage 2 over rows sorted by (capture_id, conn_key, order): one engine per 4-tuple."""

    def __init__(
        self,
        files: list[str],
        opts: EngineOptions | None = None,
        decode: bool = True,
        ctx: DecodeContext | None = None,
        file_ids: list[str] | None = None,
        with_bodies: bool = False,
    ) -> None:
        self.files = files
        self.file_ids = file_ids or files
        self.opts = opts or EngineOptions()
        self.builder = RowBuilder(files, decode=decode, ctx=ctx, with_bodies=with_bodies)
        self.rows: list[dict] = []
        self.cur: _ConnRun | None = None
        self.cur_key: tuple[str, bytes] | None = None
        self.engines = 0
        self.topic_names_sent: set[str] = set()

    def feed_batch(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        d = batch.to_pydict()
        for kind, cap, key, ts, rank, fno, flg, sq, ak, cut, data in zip(
            d["kind"], d["capture_id"], d["conn_key"], d["ts_ns"], d["file_rank"], d["file_no"],
            d["flags"], d["seq"], d["ack"], d["cut"], d["data"], strict=True,
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
            eng.feed(Packet(no, ts, RAW_LINKTYPE, rebuild(key, flg, sq, ak, cut, data), rank, fno))
            if eng.next_id != before:  # this packet started a new incarnation (or held flow)
                run.firsts[before] = (no, ts)
                run.current = before
            cur = run.current
            if cur:
                run.lasts[cur] = ts
                run.counts[cur] = run.counts.get(cur, 0) + 1
                if cur not in run.roles and (c := eng.order.get(cur)) is not None:
                    run.roles[cur] = (c.info.client, c.info.broker)
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

    def conn_id(self, run: _ConnRun, conn_no: int, client: str, broker: str) -> str | None:
        first = run.firsts.get(conn_no)
        if first is None:
            return None
        r, f = pointer(first[0])
        return stable_conn_id(self.file_ids[r], f, client, broker)

    def _emit(self, run: _ConnRun) -> None:
        b = self.builder
        for ex in run.out:
            c = ex.conn
            run.roles.setdefault(c.id, (c.client, c.broker))
            run.exchanges[c.id] = run.exchanges.get(c.id, 0) + 1
            row = b.row(ex, self.conn_id(run, c.id, c.client, c.broker))  # type: ignore[arg-type]
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
        cap, key = self.cur_key if self.cur_key else ("", b"")
        for tid, name in self.builder.bodies.names.items():
            if tid not in self.topic_names_sent:
                self.topic_names_sent.add(tid)
                self.rows.append(
                    {"kind": "topic", "capture_id": cap, "extra": json.dumps([tid, name])}
                )
        tuple_stats = {
            "incarnations": st.connections,
            "kafka": st.kafka_connections > 0,
            "syn_seen": bool(run.flags & SYN),
            "fin_seen": bool(run.flags & FIN),
            "rst_seen": bool(run.flags & RST),
            "files_spanned": len(run.files),
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
        ids = list(run.firsts) or [0]
        guess = key_roles(key) if key else ("", "")
        known = next(iter(run.roles.values()), guess)
        for n, cid in enumerate(ids, 1):
            no, ts = run.firsts.get(cid, (run.first_ptr, run.first_ns or 0))
            client, broker = run.roles.get(cid, known)
            r0, f0 = pointer(no)
            info = {
                "capture_id": cap,
                "conn_id": self.conn_id(run, cid, client, broker),
                "client": client,
                "broker": broker,
                "incarnation": n,
                "first_ns": ts,
                "last_ns": run.lasts.get(cid, run.last_ns),
                "packets": run.counts.get(cid, run.packets if cid == 0 else 0),
                "exchanges": run.exchanges.get(cid, 0),
                "first_file": self.files[r0],
                "first_frame": f0,
                # the 4-tuple's counters, on its first incarnation's row only (sums stay right)
                **(tuple_stats if n == 1 else dict.fromkeys(tuple_stats)),
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
    file_ids: list[str] | None = None,
    with_bodies: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Stage 2 as a generator over Arrow batches (the body of `mapInArrow`)."""
    dec = Decoder(files, opts, decode_bodies, ctx, file_ids, with_bodies)
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
        firsts: dict[int, tuple[str, int]] = {}  # engine id -> (file id, frame) of 1st packet
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
            if engine.next_id != before:
                firsts[before] = (plan.files[pkt.file_index].file_id, pkt.file_no)
            if out:
                _slice_rows(builder, out, firsts, rows)
                if len(rows) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA)
                    rows = []
        engine.close()
        _slice_rows(builder, out, firsts, rows)
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=EXCHANGE_SCHEMA)


def _file_packets(plan: Plan, unit_ids: list[int]) -> Iterator[Packet]:
    for ui in unit_ids:
        yield from iter_unit(plan, plan.units[ui], CaptureStats())


def _slice_rows(builder: RowBuilder, out: list[Exchange], firsts: dict, rows: list[dict]) -> None:
    for ex in out:
        c = ex.conn
        first = firsts.get(c.id)
        cid = stable_conn_id(*first, c.client, c.broker) if first else None
        rows.append(builder.row(ex, cid))  # type: ignore[arg-type]
    out.clear()
