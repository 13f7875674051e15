"""The TUI's data: every indexed exchange, per-connection counts, lazily decoded row summaries,
and the filtered, sorted view the table shows. Headless (no textual import), so it is tested
and benchmarked on its own.

Exchanges may be appended from any thread while the app runs (`ExchangeStore.add`): the
indexing worker does it for files, a live capture can do the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from dissectors.context import DecodeContext
from dissectors.errors import error_name
from dissectors.node import ARRAY, PRIM, STRUCT, Node
from kanalyze.correlation import Exchange
from kanalyze.export.ndjson import ExchangeEncoder
from kanalyze.tui.filters import Filter

Summary = tuple[str, tuple[str, ...]]  # (topic/partition summary, error names)

_TOPIC_KEYS = ("Name", "Topic", "TopicName", "TopicId")
_PART_KEYS = ("Index", "Partition", "PartitionIndex")


@dataclass(slots=True)
class ConnStats:
    id: int
    client: str
    broker: str
    client_ids: list[str] = field(default_factory=list)
    exchanges: int = 0
    problems: int = 0  # non-ok statuses; error codes once summaries are known

    @property
    def client_id(self) -> str:
        return ",".join(self.client_ids) if self.client_ids else "-"


def _topics(node: Node | None, out: dict[str, set[int]], names: dict[str, str]) -> None:
    """topic -> partitions, from any struct holding a topic name next to partition structs."""
    if node is None:
        return
    for n in node.walk():
        if n.kind != STRUCT or not n.children:
            continue
        name = tid = None
        parts: set[int] = set()
        for c in n.children:
            if c.kind == PRIM and c.name in _TOPIC_KEYS and isinstance(c.value, str) and c.value:
                if c.name == "TopicId":
                    if c.value.strip("0-"):
                        tid = names.get(c.value) or c.value[:8]
                elif name is None:
                    name = c.value
            elif c.kind == ARRAY and c.children:
                for item in c.children:
                    for g in item.children or ():
                        if g.kind == PRIM and g.name in _PART_KEYS and isinstance(g.value, int):
                            parts.add(g.value)
                            break
        name = name or tid
        if name is not None and (parts or n.name.isdigit()):
            out.setdefault(name, set()).update(parts)


def error_codes(node: Node) -> list[int]:
    """Non-zero error codes anywhere in a decoded body (spec field names: ErrorCode, *ErrorCode)."""
    return [n.value for n in node.walk()
            if n.kind == PRIM and n.value and isinstance(n.value, int) and n.name.endswith("ErrorCode")]


def summarize(ex: Exchange, encoder: ExchangeEncoder, topic_names: dict[str, str] | None = None) -> Summary:
    """Topics and partitions an exchange touches, and the error names in its response;
    topic ids are named through `topic_names` (learned from Metadata responses)."""
    topics: dict[str, set[int]] = {}
    errors: list[str] = []
    for msg, is_req in ((ex.request, True), (ex.response, False)):
        if msg is None:
            continue
        node, _ctx = encoder.body(ex, msg, is_req)
        if node is None:
            continue
        _topics(node, topics, topic_names or {})
        if not is_req:
            for code in error_codes(node):
                name = error_name(code) or str(code)
                if code and name not in errors:
                    errors.append(name)
    parts = []
    for t, ps in topics.items():
        if not ps:
            parts.append(t)
        elif len(ps) <= 3:
            parts.append(f"{t}[{','.join(str(p) for p in sorted(ps))}]")
        else:
            parts.append(f"{t}[{len(ps)}p]")
    return " ".join(parts), tuple(errors)


SORT_KEYS: dict[str, Callable[[Exchange], object]] = {
    "time": lambda ex: ex.start_ts,
    "latency": lambda ex: ex.latency_ns if ex.latency_ns is not None else -1,
    "api": lambda ex: (ex.api or "", ex.api_version or 0),
    "conn": lambda ex: ex.conn.id,
    "corr": lambda ex: ex.correlation_id if ex.correlation_id is not None else -1,
    "status": lambda ex: ex.status,
    "size": lambda ex: sum(m.pdu.size for m in (ex.request, ex.response) if m is not None),
}


class ExchangeStore:
    """Append-only list of exchanges (thread-safe append), connection counts, summaries."""

    def __init__(self, ctx: DecodeContext | None = None) -> None:
        self.exchanges: list[Exchange] = []
        self.summaries: list[Summary | None] = []
        self.conns: dict[int, ConnStats] = {}
        self.first_ts: int | None = None
        self.lock = threading.Lock()
        self.generation = 0  # bumps on every append
        self.done = False
        self.progress: float | None = None  # 0..1 while indexing a file, None when unknown
        self.error: str | None = None
        self.summarized = 0  # rows [0, summarized) have their summary (background pass)
        base = ctx or DecodeContext()
        self.topic_names = base.topic_names  # shared with the encoders: export names topic ids too
        self._named_upto = 0  # Metadata responses before this index were read for topic names
        self.encoder = ExchangeEncoder(base)  # detail view and export: full decode
        self._summary_encoder = ExchangeEncoder(replace(base, decode_records=False))

    def __len__(self) -> int:
        return len(self.exchanges)

    def add(self, exchanges: Iterable[Exchange]) -> int:
        """Append exchanges (from any thread); returns how many were added."""
        batch = list(exchanges)
        if not batch:
            return 0
        with self.lock:
            if self.first_ts is None:
                self.first_ts = batch[0].start_ts
            for ex in batch:
                c = self.conns.get(ex.conn.id)
                if c is None:
                    c = self.conns[ex.conn.id] = ConnStats(ex.conn.id, ex.conn.client, ex.conn.broker)
                c.exchanges += 1
                if ex.status != "ok":
                    c.problems += 1
                if ex.client_id and ex.client_id not in c.client_ids and len(c.client_ids) < 4:
                    c.client_ids.append(ex.client_id)
            self.summaries.extend([None] * len(batch))
            self.exchanges.extend(batch)
            self.generation += 1
        return len(batch)

    def learn_topic_names(self, upto: int) -> None:
        """Read topic ids and names from the Metadata responses before index `upto`."""
        exs = self.exchanges
        for i in range(self._named_upto, min(upto, len(exs))):
            ex = exs[i]
            if ex.api_key == 3 and ex.response is not None:
                node, _ctx = self._summary_encoder.body(ex, ex.response, False)
                for n in node.walk() if node is not None else ():
                    tid, name = n.child("TopicId"), n.child("Name")
                    if tid is not None and name is not None and isinstance(name.value, str):
                        self.topic_names[tid.value] = name.value
        self._named_upto = max(self._named_upto, upto)

    def summary(self, i: int) -> Summary:
        s = self.summaries[i]
        if s is None:
            ex = self.exchanges[i]
            if self._named_upto <= i:
                self.learn_topic_names(i + 1)
            s = summarize(ex, self._summary_encoder, self.topic_names)
            with self.lock:  # the UI and the workers may summarize the same row at once
                if self.summaries[i] is None:
                    self.summaries[i] = s
                    if s[1] and ex.status == "ok":
                        c = self.conns.get(ex.conn.id)
                        if c is not None:
                            c.problems += 1
                            self.generation += 1
        return s

    def summarize_all(self, cancelled: Callable[[], bool] = lambda: False, pause: Callable[[], None] | None = None) -> bool:
        """Summarize every row not yet summarized (error counts per connection become complete);
        `self.summarized` tracks progress. False if cancelled."""
        i = self.summarized
        last = time.perf_counter()
        while i < len(self.exchanges):
            self.summary(i)
            i += 1
            self.summarized = i
            now = time.perf_counter()
            if now - last > 0.01:  # every 10 ms of work: check for cancellation, let the UI run
                if cancelled():
                    return False
                if pause is not None:
                    pause()
                last = time.perf_counter()
        return True

    def rel_time(self, ex: Exchange) -> float:
        return (ex.start_ts - (self.first_ts or 0)) / 1e9

    def match_range(self, flt: Filter, start: int, end: int,
                    cancelled: Callable[[], bool] = lambda: False,
                    progress: Callable[[int], None] | None = None) -> list[int] | None:
        """Indices in [start, end) matching `flt`; None if cancelled."""
        if flt.empty:
            return list(range(start, end))
        out: list[int] = []
        exs = self.exchanges
        need = flt.needs_summary
        match = flt.match
        # cheap header-only terms first: decode bodies only for rows those keep
        probe = Filter(apis=flt.apis, clients=flt.clients, conns=flt.conns, statuses=flt.statuses,
                       min_latency_ms=flt.min_latency_ms).match
        for i in range(start, end):
            if (i & 0x3FF) == 0:
                if cancelled():
                    return None
                if progress is not None:
                    progress(i)
            ex = exs[i]
            if need:
                if probe(ex, None) and match(ex, self.summary(i)):
                    out.append(i)
            elif match(ex, None):
                out.append(i)
        return out

    def sort_indices(self, indices: list[int], key: str, reverse: bool = False) -> list[int]:
        if key == "time" and not reverse:
            return sorted(indices)
        k = SORT_KEYS[key]
        exs = self.exchanges
        return sorted(indices, key=lambda i: (k(exs[i]), i), reverse=reverse)

