"""Rows for the Spark tables, built by the offline engine. Pure Python plus pyarrow (no pyspark).

* ``extract``: stage 1. The packets of some work units become *segment rows*
  (capture group, normalized connection key, time, file rank, frame number,
  raw packet bytes); non-TCP packets are counted and dropped. Each unit also
  yields one *unit row* with its reading statistics (the `files` table).
* ``decode``: stage 2. Segment rows sorted by (capture group, connection, time,
  file rank, frame) drive one `kanalyze.engine.Engine` per connection — the
  same code as `kanalyze export` — and become *exchange rows* (the
  `exchanges` table), one *connection row* per 4-tuple, topic-id names seen in
  Metadata responses, and the unit rows passed through.

`Packet.no` inside the engine is ``rank << 40 | frame``: it keeps file order
and maps back to (file, frame number) without a side table.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from dissectors.context import DecodeContext, Limits
from kanalyze.capture import CaptureError, CaptureStats, Packet
from kanalyze.correlation import Exchange, Message
from kanalyze.engine import Engine, EngineOptions
from kanalyze.export.ndjson import ExchangeEncoder
from kanalyze.flows import FIN, RST, SYN, FlowStats, decode_segment
from kanalyze.spark.units import Plan, iter_unit

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
        ("file_rank", pa.int32()),
        ("file_no", pa.int64()),
        ("linktype", pa.int32()),
        ("flags", pa.int16()),
        ("data", pa.binary()),
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
    ("dt", pa.date32()),
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


# --------------------------------------------------------------------------- stage 1
def conn_key(seg) -> bytes:  # noqa: ANN001 - kanalyze.flows.Segment
    """Direction-free key of a 4-tuple: the two endpoints in sorted order."""
    a = seg.src + seg.sport.to_bytes(2, "big")
    b = seg.dst + seg.dport.to_bytes(2, "big")
    return a + b if a <= b else b + a


def _flush(cols: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    batch = pa.RecordBatch.from_pydict(cols, schema=schema)
    for v in cols.values():
        v.clear()
    return batch


def extract(plan: Plan, unit_indices: Iterable[int]) -> Iterator[pa.RecordBatch]:
    """Stage 1: segment rows and one unit row per unit (statistics as JSON in `data`)."""
    cols: dict[str, list] = {f.name: [] for f in SEGMENT_SCHEMA}
    kind, cap, key, ts, rank, fno, lt, flg, data = (cols[f.name] for f in SEGMENT_SCHEMA)
    for ui in unit_indices:
        unit = plan.units[ui]
        info = plan.files[unit.rank]
        stats = CaptureStats()
        flows = FlowStats()
        tcp = other = 0
        first = last = None
        error = info.error
        try:
            for pkt in iter_unit(plan, unit, stats):
                if first is None:
                    first = pkt.ts_ns
                last = pkt.ts_ns
                seg = decode_segment(pkt.linktype, pkt.data, flows)
                if seg is None:
                    other += 1
                    continue
                tcp += 1
                kind.append(KIND_PACKET)
                cap.append(info.capture_id)
                key.append(conn_key(seg))
                ts.append(pkt.ts_ns)
                rank.append(unit.rank)
                fno.append(pkt.file_no)
                lt.append(pkt.linktype)
                flg.append(seg.flags)
                data.append(pkt.data)
                if len(kind) >= BATCH_ROWS:
                    yield _flush(cols, SEGMENT_SCHEMA)
        except CaptureError as e:
            error = str(e)
        stat = {
            "rank": unit.rank,
            "unit": unit.index,
            "whole": unit.whole,
            "start": unit.start,
            "end": unit.end,
            "packets": tcp + other,
            "tcp_packets": tcp,
            "other_packets": other,
            "fragments": flows.fragments,
            "not_ip": flows.not_ip,
            "first_ns": first,
            "last_ns": last,
            "error": error,
            "diagnostics": [f"offset {d.offset}: {d.message}" for _n, d in stats.diagnostics],
        }
        kind.append(KIND_UNIT)
        cap.append(info.capture_id)
        key.append(b"")
        ts.append(first or 0)
        rank.append(unit.rank)
        fno.append(unit.index)
        lt.append(info.linktype)
        flg.append(0)
        data.append(json.dumps(stat).encode())
    if kind:
        yield _flush(cols, SEGMENT_SCHEMA)


# --------------------------------------------------------------------------- exchange rows
def _split_endpoint(ep: str) -> tuple[str, int]:
    host, _, port = ep.rpartition(":")
    return host.strip("[]"), int(port)


_TOPIC_KEYS = ("name", "topic", "topic_name")
_PART_LISTS = ("partitions", "partition_data", "partition_responses")
_TOPIC_LISTS = ("topics", "topic_data", "responses")


def _topic_entries(body: object) -> Iterator[tuple[str | None, str | None, list]]:
    """(topic name, topic id, partition dicts) for each topic entry of a decoded body."""
    if not isinstance(body, dict):
        return
    for lk in _TOPIC_LISTS:
        items = body.get(lk)
        if not isinstance(items, list):
            continue
        for t in items:
            if not isinstance(t, dict):
                continue
            name = next((t[k] for k in _TOPIC_KEYS if isinstance(t.get(k), str)), None)
            tid = t.get("topic_id") if isinstance(t.get("topic_id"), str) else None
            parts = next((t[k] for k in _PART_LISTS if isinstance(t.get(k), list)), [])
            yield name, tid, parts


def _records(rec: object, out: dict) -> None:
    if not isinstance(rec, dict):
        return
    batches = rec.get("batches")
    if isinstance(batches, list):
        out["record_batches"] = len(batches)
        cnt = size = 0
        lo = hi = None
        for b in batches:
            if not isinstance(b, dict):
                continue
            cnt += b.get("record_count") or 0
            size += (b.get("batch_length") or 0) + 12
            base = b.get("base_offset")
            if isinstance(base, int):
                lo = base if lo is None else min(lo, base)
                last = base + (b.get("last_offset_delta") or 0)
                hi = last if hi is None else max(hi, last)
        out["record_count"] = cnt
        out["records_bytes"] = size
        out["first_offset"], out["last_offset"] = lo, hi
    elif isinstance(rec.get("size"), int):
        out["records_bytes"] = rec["size"]


_PART_VALUES = (
    "error_code",
    "high_watermark",
    "last_stable_offset",
    "log_start_offset",
    "base_offset",
    "offset",
    "timestamp",
)


def partitions_of(req_body: object, resp_body: object) -> list[dict]:
    """Per (topic, partition) facts from both bodies, merged (request first, response overrides)."""
    merged: dict[tuple, dict] = {}
    for body, is_req in ((req_body, True), (resp_body, False)):
        for name, tid, parts in _topic_entries(body):
            for p in parts:
                if not isinstance(p, dict):
                    continue
                idx = next(
                    (
                        p[k]
                        for k in ("partition_index", "index", "partition")
                        if isinstance(p.get(k), int)
                    ),
                    None,
                )
                if idx is None:
                    continue
                k = (name or tid, idx)
                row = merged.get(k)
                if row is None:
                    row = merged[k] = dict.fromkeys(PARTITION_FIELDS)
                    row["partition"] = idx
                if name and not row["topic"]:
                    row["topic"] = name
                if tid and not row["topic_id"]:
                    row["topic_id"] = tid
                if is_req and isinstance(p.get("fetch_offset"), int):
                    row["fetch_offset"] = p["fetch_offset"]
                for f in _PART_VALUES:
                    v = p.get(f)
                    if isinstance(v, int) and (not is_req or f == "timestamp"):
                        row[f] = v
                if "records" in p and (is_req or row["record_count"] is None):
                    _records(p["records"], row)
    return list(merged.values())


def _replica_id(body: object) -> int | None:
    """The fetching/listing replica of a Fetch or ListOffsets request (-1 for consumers)."""
    if not isinstance(body, dict):
        return None
    rid = body.get("replica_id")
    if isinstance(rid, int):
        return rid
    state = body.get("replica_state")  # Fetch v15+
    if isinstance(state, dict) and isinstance(state.get("replica_id"), int):
        return state["replica_id"]
    return None


@dataclass(slots=True)
class RowBuilder:
    """Exchange → exchanges-table row (the NDJSON names and meanings, plus file pointers)."""

    files: list[str]
    capture_id: str = ""
    decode: bool = True
    ctx: DecodeContext = field(
        default_factory=lambda: DecodeContext(limits=Limits(max_value_bytes=64))
    )
    topic_ids: dict[str, str] = field(default_factory=dict)  # learned from Metadata responses
    encoder: ExchangeEncoder = field(init=False)
    incarnations: dict[tuple[int, int], str] = field(
        default_factory=dict
    )  # (engine id, conn id) -> conn_id

    def __post_init__(self) -> None:
        self.encoder = ExchangeEncoder(self.ctx, decode=self.decode)

    def conn_id(
        self, engine_key: int, conn_no: int, client: str, broker: str, incarnation: int
    ) -> str:
        k = (engine_key, conn_no)
        cid = self.incarnations.get(k)
        if cid is None:
            h = hashlib.sha1(
                f"{self.capture_id}|{client}|{broker}|{incarnation}".encode()
            ).hexdigest()[:16]
            cid = self.incarnations[k] = h
        return cid

    def _where(self, no: int) -> tuple[str, int]:
        r, f = pointer(no)
        return self.files[r], f

    def _body(self, ex: Exchange, msg: Message | None, is_request: bool) -> object:
        if msg is None or not self.decode:
            return None
        node, ctx = self.encoder.body(ex, msg, is_request)
        if node is None:
            return None
        from dissectors.jsonify import node_to_json

        return node_to_json(node, ctx)

    def row(self, ex: Exchange, conn_id: str) -> dict:
        req, resp = ex.request, ex.response
        client_ip, client_port = _split_endpoint(ex.conn.client)
        broker_ip, broker_port = _split_endpoint(ex.conn.broker)
        lat = ex.latency_ns
        r: dict = {
            "capture_id": self.capture_id,
            "conn_id": conn_id,
            "client": ex.conn.client,
            "broker": ex.conn.broker,
            "client_ip": client_ip,
            "client_port": client_port,
            "broker_ip": broker_ip,
            "broker_port": broker_port,
            "api_key": ex.api_key,
            "api": ex.api,
            "api_version": ex.api_version,
            "correlation_id": ex.correlation_id,
            "client_id": ex.client_id,
            "status": ex.status,
            "acks": ex.acks,
            "latency_ms": None if lat is None else round(lat / 1e6, 3),
        }
        diags: list[str] = []
        for side, msg in (("request", req), ("response", resp)):
            if msg is None:
                for k in (
                    "ts",
                    "first_ns",
                    "last_ns",
                    "size",
                    "file",
                    "frame",
                    "first_file",
                    "first_frame",
                ):
                    r[f"{side}_{k}"] = None
                continue
            pdu = msg.pdu
            r[f"{side}_ts"] = datetime.fromtimestamp(pdu.last_ts / 1e9, UTC)
            r[f"{side}_first_ns"] = pdu.first_ts
            r[f"{side}_last_ns"] = pdu.last_ts
            r[f"{side}_size"] = pdu.size + 4
            r[f"{side}_file"], r[f"{side}_frame"] = self._where(pdu.last_pkt)
            r[f"{side}_first_file"], r[f"{side}_first_frame"] = self._where(pdu.first_pkt)
            diags.extend(f"{side}:{d.code}:{d.message}" for d in msg.diagnostics)
        req_body = self._body(ex, req, True)
        resp_body = self._body(ex, resp, False)
        err = throttle = None
        if isinstance(resp_body, dict):
            if isinstance(resp_body.get("error_code"), int):
                err = resp_body["error_code"]
            if isinstance(resp_body.get("throttle_time_ms"), int):
                throttle = resp_body["throttle_time_ms"]
            if ex.api_key in (3, 19, 75):
                self._learn_topic_ids(resp_body)
        parts = partitions_of(req_body, resp_body) if self.decode else []
        for p in parts:
            if p["topic"] is None and p["topic_id"] in self.topic_ids:
                p["topic"] = self.topic_ids[p["topic_id"]]
        topics = sorted({p["topic"] or p["topic_id"] for p in parts if p["topic"] or p["topic_id"]})
        if not topics and self.decode:
            topics = sorted(
                {n or t for b in (req_body, resp_body) for n, t, _p in _topic_entries(b) if n or t}
            )
        r["error_code"] = err
        r["throttle_time_ms"] = throttle
        r["replica_id"] = _replica_id(req_body)
        r["partition_error_count"] = (
            sum(1 for p in parts if p["error_code"]) if self.decode else None
        )
        r["topics"] = topics if self.decode else None
        r["partitions"] = parts if self.decode else None
        r["diagnostics"] = diags
        start = req or resp
        r["dt"] = datetime.fromtimestamp(start.pdu.last_ts / 1e9, UTC).date() if start else None
        return r

    def _learn_topic_ids(self, body: dict) -> None:
        for name, tid, _p in _topic_entries(body):
            if name and tid and tid != "00000000-0000-0000-0000-000000000000":
                self.topic_ids[tid] = name


# --------------------------------------------------------------------------- stage 2
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
        self.builder = RowBuilder(files, decode=decode, **({"ctx": ctx} if ctx else {}))
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
            if (cap, key) != self.cur_key:
                self._finish()
                self.cur_key = (cap, key)
                self.cur = _ConnRun(self.opts)
                self.builder.capture_id = cap
                self.engines += 1
            run = self.cur
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
                    inc = 1 + sum(
                        1
                        for v in run.infos.values()
                        if v[0] == c.info.client and v[1] == c.info.broker
                    )
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
        for tid, name in self.builder.topic_ids.items():
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


# --------------------------------------------------------------------------- "slices" strategy
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
        builder = RowBuilder(
            files, capture_id=cap, decode=decode_bodies, **({"ctx": ctx} if ctx else {})
        )
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


def exchange_key_fn() -> Callable[[dict], tuple]:
    """The stable identity of an exchange, shared by tests and tools (independent of connection ids)."""

    def key(r: dict) -> tuple:
        return (
            r["client"], r["broker"], r["api_key"], r["api_version"], r["correlation_id"], r["status"],
            r["request_file"], r["request_frame"], r["response_file"], r["response_frame"],
        )  # fmt: skip

    return key
