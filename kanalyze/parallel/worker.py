"""One shard of a `--jobs N` run: the shard's connections go through an `Engine` (fed with the
run's packet numbers and clock), and each exchange this shard decodes is written as its line to
a scratch file, with what `merge.py` needs to put it back in the one-process order.

A shard reads only its own packets (through mmap) when the scan located them; otherwise it
reads the whole input and keeps its connections. Spawn-safe: `run_shard` is a top-level
function of picklable arguments.
"""

from __future__ import annotations

import heapq
import mmap
import struct
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from dissectors.context import DecodeContext
from kanalyze.bodies.names import TopicNames
from kanalyze.capture import CaptureStats, Packet, read_captures
from kanalyze.connection import Undecided
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.export import SCHEMA_VERSION, ExchangeEncoder
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.parallel.plan import Piece, Plan, conn_key, piece_owns
from kanalyze.parallel.scan import PcapLayout

FINAL = 1 << 62  # the "packet number" of what happens at the end of input
LINE_PREFIX = f'{{"schema":"{SCHEMA_VERSION}","connection":{{"id":'.encode()


@dataclass(slots=True)
class ShardTask:
    paths: list[str]
    opts: EngineOptions
    ctx: DecodeContext
    header_only: bool
    plan: Plan
    index: int
    out_path: str
    last_ts: int  # the run's clock at the end of input (gaps closed at the end are dated by it)
    layout: PcapLayout | None = None  # with `numbers` and `offsets`: read only these packets
    numbers: array = field(default_factory=lambda: array("q"))
    offsets: array = field(default_factory=lambda: array("q"))


@dataclass(slots=True)
class ShardResult:
    index: int
    # one per exchange this shard decoded, in its release order: (packet no where it completed,
    # local conn id if at the end of input else 0, its rank among the completions of that
    # packet and connection, start_ts, local conn id, offset of the line in the scratch file,
    # the line's length)
    done: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    # (packet no, oldest pending request's time or None) each time it changes
    pending: list[tuple[int, int | None]] = field(default_factory=list)
    opens: list[tuple[int, int]] = field(default_factory=list)  # (packet no, local conn id)
    # per index in `done`: (topic-id names read before, names taught), when any
    names: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)
    coupled: list[str] = field(default_factory=list)  # why this run cannot be merged exactly
    # what this run did that depends on every connection's packets (an orphan response's api,
    # a connection held until its roles are known): exact only when the shard saw them all
    shared: list[str] = field(default_factory=list)
    open_peak: int = 0
    buffered_peak: int = 0
    skipped: int = 0  # bytes skipped, gaps: counted by the shard holding a first piece
    gaps: int = 0
    capture: CaptureStats | None = None  # shard 0 of a run reading whole inputs
    cpu_s: float = 0.0  # this shard's CPU time (benchmarks/bench_jobs.py reads it)
    kafka_connections: int = 0


class RecordingNames(dict[str, str]):
    """The topic-id registry, noting what one exchange's decode read and taught, so the merge
    can check that a shard saw the names the one-process run would have seen."""

    def __init__(self, preloaded: dict[str, str]) -> None:
        super().__init__(preloaded)  # --topic-ids
        self.reads: dict[str, str | None] = {}
        self.writes: dict[str, str] = {}

    def _read(self, key: str) -> None:
        if key not in self.reads and key not in self.writes:  # taught by this very exchange: same
            self.reads[key] = dict.get(self, key)

    def get(self, key, default=None):  # noqa: ANN001, ANN201
        self._read(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: str) -> str:
        self._read(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._read(key)
        return dict.__contains__(self, key)

    def __setitem__(self, key: str, value: str) -> None:
        self.writes[key] = value
        dict.__setitem__(self, key, value)


class _ShardEngine(Engine):
    """The engine, telling when each exchange completed, each connection opened, and which
    piece of a connection split across shards decodes an exchange."""

    def __init__(self, on_exchange, opts: EngineOptions, plan: Plan, me: int) -> None:  # noqa: ANN001
        super().__init__(on_exchange, opts)
        self.plan, self.me = plan, me
        self.cur = 0
        self.keys: dict[int, tuple[int, int, int, bool]] = {}
        self.opens: list[tuple[int, int]] = []
        self.piece: dict[int, Piece] = {}  # local conn id -> its piece here, when split
        self.frame_bytes: dict[int, int] = {}  # local conn id -> frame bytes completed
        self.rank: dict[tuple[int, int], int] = {}  # completions so far at (packet, conn)
        self.later_piece: dict[int, bool] = {}  # byte accounting: the first piece's stands
        self.dup_skipped = self.dup_gaps = 0
        # what one engine does from every connection's packets (`ShardResult.shared`)
        self.shared: list[str] = []
        self.seen_at: int | None = None  # the first packet of the connection being decided

    def _decide(self, und: Undecided, verdict: bool | None = None) -> None:
        # a connection met mid-stream: one engine holds every connection's output back for it
        # while it is undecided, and numbered it when first seen (not when it opened here)
        if not self.shared:
            self.shared.append("a connection found mid-stream (held until its roles are known)")
        self.seen_at = und.held[0][1] if und.held else None
        try:
            super()._decide(und, verdict)
        finally:
            self.seen_at = None

    def _complete(self, ex: Exchange) -> None:
        super()._complete(ex)
        cid = ex.conn.id
        piece = self.piece.get(cid)
        before = self.frame_bytes.get(cid, 0)
        size = sum(m.pdu.size + 4 for m in (ex.request, ex.response) if m is not None)
        self.frame_bytes[cid] = before + size
        at = (self.cur, cid)
        if len(self.rank) > 64 and at not in self.rank:
            self.rank.clear()  # only the current packet's counts matter
        n = self.rank[at] = self.rank.get(at, 0) + 1
        final = cid if self.cur == FINAL else 0
        self.keys[id(ex)] = (self.cur, final, n, piece is None or piece_owns(before, piece))

    def _open(self, seg, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        conn = super()._open(seg, *args, **kwargs)
        cid = conn.info.id
        # the packet that numbered it (a held connection: its first, as one engine numbers it)
        self.opens.append((self.cur if self.seen_at is None else self.seen_at, cid))
        pieces = self.plan.pieces(conn_key(seg))
        if len(pieces) > 1:
            mine = [p for p in pieces if p.shard == self.me]
            self.piece[cid] = mine[0]
            self.later_piece[cid] = mine[0] is not pieces[0]
        return conn

    def _close(self, conn, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        """Byte accounting of a split connection is the same on every piece: only the first
        piece's counts stand; the others' are taken back (the merge adds the shards up)."""
        was = conn.closed
        super()._close(conn, *args, **kwargs)
        if not was and conn.kafka and not conn.ignored and self.later_piece.get(conn.info.id):
            self.dup_skipped += conn.cf.skipped + conn.sf.skipped
            self.dup_gaps += conn.c2s.gap_bytes + conn.s2c.gap_bytes


def _own_packets(task: ShardTask, capture: CaptureStats) -> Iterator[Packet]:
    """The packets of this shard: cut from the mapped file at the scan's offsets, or read
    from the whole input and kept when one of their connection's pieces is here."""
    layout = task.layout
    if layout is None:
        flows = FlowStats()
        me, pieces = task.index, task.plan.pieces
        mine: dict = {}
        for pkt in read_captures(task.paths, capture, views=True):
            seg = decode_segment(pkt.linktype, pkt.data, flows)
            if seg is None:
                if me == 0:  # counted once, by the engine of shard 0
                    yield pkt
                continue
            key = conn_key(seg)
            here = mine.get(key)
            if here is None:
                here = mine[key] = any(p.shard == me for p in pieces(key))
            if here:
                yield pkt
        return
    with open(layout.path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mv = memoryview(m)
    unpack = struct.Struct(layout.endian + "IIII").unpack_from
    lt, mult = layout.linktype, layout.ns_mult
    for no, off in zip(task.numbers, task.offsets, strict=True):
        sec, frac, incl, _orig = unpack(m, off)
        data = mv[off + 16 : off + 16 + incl]  # a view, as the pcap reader's (views=True)
        yield Packet(no, sec * 1_000_000_000 + frac * mult, lt, data, 0, no)
    # the map stays open: the engine may still hold views of it; it goes with the process


def run_shard(task: ShardTask) -> ShardResult:
    cpu0 = time.process_time()
    res = ShardResult(task.index)
    names = RecordingNames(task.ctx.topic_names)
    enc = ExchangeEncoder(replace(task.ctx, topic_names=names), decode=not task.header_only)
    line_of, learn = enc.line_bytes, enc.bodies.learn
    out = open(task.out_path, "wb")  # noqa: SIM115
    pos = 0

    def on_exchange(ex: Exchange) -> None:
        nonlocal pos
        pkt, final, n, owns = eng.keys.pop(id(ex))
        if ex.request is None and not eng.shared:
            # its api, and when it is settled, are inferred from what every connection sent
            # (kanalyze/evidence.py): a shard sees only its own connections
            eng.shared.append("a response without its request (evidence of every connection)")
        names.reads, names.writes = {}, {}
        if not owns:  # another piece of this connection decodes it
            if not task.header_only and TopicNames.teaches(ex):
                learn(ex)
            return
        line = line_of(ex) + b"\n"
        if names.reads or names.writes:
            res.names[len(res.done)] = (names.reads, names.writes)
        cid = ex.conn.id
        if not line.startswith(LINE_PREFIX + b"%d," % cid):
            res.coupled.append("a line without its connection id first")
        res.done.append((pkt, final, n, ex.start_ts, cid, pos, len(line)))
        out.write(line)
        pos += len(line)

    eng = _ShardEngine(on_exchange, task.opts, task.plan, task.index)
    capture = CaptureStats()
    feed, waiting, pending = eng.feed, eng.waiting, res.pending
    oldest: int | None = None
    try:
        for pkt in _own_packets(task, capture):
            eng.cur = pkt.no
            feed(pkt)
            while waiting and waiting[0][2].done:
                heapq.heappop(waiting)
            first = waiting[0][0] if waiting else None
            if first != oldest:
                oldest = first
                pending.append((pkt.no, first))
        eng.cur = FINAL
        eng.now = max(eng.now, task.last_ts)
        eng.close()
    finally:
        out.close()
    st = eng.stats
    res.opens = eng.opens
    # what --max-buffered bounds: the bytes held with their objects (at least the buffered)
    res.open_peak, res.buffered_peak = st.open_peak, st.held_peak
    res.skipped = st.client.skipped + st.broker.skipped - eng.dup_skipped
    res.gaps = st.client.gaps + st.broker.gaps - eng.dup_gaps
    if st.limit_hits:
        res.coupled.append("an engine-wide bound was hit")
    res.shared = eng.shared
    # the closing notes (TLS flows, flows that are not Kafka, a snaplen, nothing analyzed) are
    # judged over the whole capture by one engine: a run that needs one is not merged
    if st.tls_connections or st.non_kafka_connections or st.flows.cut_packets:
        res.coupled.append("the capture needs a closing note (TLS, not Kafka or a snaplen)")
    res.kafka_connections = st.kafka_connections
    if task.layout is None and task.index == 0:
        res.capture = capture
    res.cpu_s = time.process_time() - cpu0
    return res

