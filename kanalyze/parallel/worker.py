"""One shard of a `--jobs N` run: every packet is read (the packet numbers and the clock stay
the run's), only the shard's connections go through an `Engine`, and each exchange's line is
written to a scratch file, with what `merge.py` needs to put it back in the one-process order.

Spawn-safe: `run_shard` is a top-level function of picklable arguments.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureStats, read_captures
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.export.ndjson import SCHEMA_VERSION
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.parallel.plan import Plan, conn_key

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


@dataclass(slots=True)
class ShardResult:
    index: int
    # one per exchange, in the shard's completion order:
    # (packet no, local conn id if completed at end of input else 0, local seq, start_ts,
    #  local conn id, offset of the line in the scratch file, its length)
    done: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    # (packet no, oldest pending request's time or None) each time it changes
    pending: list[tuple[int, int | None]] = field(default_factory=list)
    opens: list[tuple[int, int]] = field(default_factory=list)  # (packet no, local conn id)
    # per exchange line number: (topic-id names read before, names taught), when any
    names: dict[int, tuple[dict[str, str | None], dict[str, str]]] = field(default_factory=dict)
    coupled: list[str] = field(default_factory=list)  # why this run cannot be merged exactly
    open_peak: int = 0
    buffered_peak: int = 0
    skipped: int = 0
    gaps: int = 0
    capture: CaptureStats | None = None  # shard 0 only: every shard reads the same files


class RecordingNames(dict):  # type: ignore[type-arg]
    """The topic-id registry, noting what one exchange's decode read and taught, so the merge
    can check that a shard saw the names the one-process run would have seen."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, str | None] = {}
        self.writes: dict[str, str] = {}

    def get(self, key, default=None):  # noqa: ANN001, ANN201
        if key not in self.reads and key not in self.writes:  # taught by this very exchange: same
            self.reads[key] = dict.get(self, key)
        return dict.get(self, key, default)

    def __setitem__(self, key: str, value: str) -> None:
        self.writes[key] = value
        dict.__setitem__(self, key, value)


class _ShardEngine(Engine):
    """The engine, telling when each exchange completed and each connection opened."""

    def __init__(self, on_exchange, opts: EngineOptions) -> None:  # noqa: ANN001
        super().__init__(on_exchange, opts)
        self.cur = 0
        self.keys: dict[int, tuple[int, int, int]] = {}
        self.opens: list[tuple[int, int]] = []

    def _complete(self, ex: Exchange) -> None:
        super()._complete(ex)
        self.keys[id(ex)] = (self.cur, ex.conn.id if self.cur == FINAL else 0, self.seq)

    def _open(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        conn = super()._open(*args, **kwargs)
        self.opens.append((self.cur, conn.info.id))
        return conn


def run_shard(task: ShardTask) -> ShardResult:
    res = ShardResult(task.index)
    names = RecordingNames()
    enc = ExchangeEncoder(replace(task.ctx, topic_names=names), decode=not task.header_only)
    line_of = enc.line_bytes
    out = open(task.out_path, "wb")  # noqa: SIM115
    pos = 0

    def on_exchange(ex: Exchange) -> None:
        nonlocal pos
        names.reads, names.writes = {}, {}
        line = line_of(ex) + b"\n"
        if names.reads or names.writes:
            res.names[len(res.done)] = (names.reads, names.writes)
        cid = ex.conn.id
        if not line.startswith(LINE_PREFIX + b"%d," % cid):
            res.coupled.append("a line without its connection id first")
        pkt, final, seq = eng.keys.pop(id(ex))
        res.done.append((pkt, final, seq, ex.start_ts, cid, pos, len(line)))
        out.write(line)
        pos += len(line)

    eng = _ShardEngine(on_exchange, task.opts)
    window = task.opts.order_window_ns
    capture = CaptureStats()
    flows = FlowStats()
    shard_of, me, feed = task.plan.shard_of, task.index, eng.feed
    waiting, pending = eng.waiting, res.pending
    now = 0
    oldest: int | None = None
    try:
        for pkt in read_captures(task.paths, capture, views=True):
            seg = decode_segment(pkt.linktype, pkt.data, flows)
            if seg is None:
                if me == 0:  # counted once, by the engine of shard 0
                    eng.cur = pkt.no
                    feed(pkt)
                continue
            if pkt.ts_ns > now:
                now = pkt.ts_ns
            if shard_of(conn_key(seg)) != me:
                eng.now = now  # the engine's clock is the run's (gaps at the end are dated by it)
                if oldest is not None and oldest < now - window and not res.coupled:
                    res.coupled.append("a request pending longer than the order window")
                continue
            eng.cur = pkt.no
            feed(pkt)
            while waiting and waiting[0][2].done:
                heapq.heappop(waiting)
            first = waiting[0][0] if waiting else None
            if first != oldest:
                oldest = first
                pending.append((pkt.no, first))
            if oldest is not None and oldest < now - window and not res.coupled:
                res.coupled.append("a request pending longer than the order window")
        eng.cur = FINAL
        eng.close()
    finally:
        out.close()
    st = eng.stats
    res.opens = eng.opens
    res.open_peak, res.buffered_peak = st.open_peak, st.buffered_peak
    res.skipped = st.client.skipped + st.broker.skipped
    res.gaps = st.client.gaps + st.broker.gaps
    if st.limit_hits:
        res.coupled.append("an engine-wide bound was hit")
    if me == 0:
        res.capture = capture
    return res
