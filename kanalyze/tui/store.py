"""The TUI's data: every indexed exchange, per-connection counts, lazily decoded row summaries,
and the filtered, sorted view the table shows. Headless (no textual import), so it is tested
and benchmarked on its own.

Memory does not grow with the capture's payload: an added exchange leaves its frames in a
temporary file (`spill`) and its header fields in flat arrays (`rows`); no `Exchange` is kept.
One is rebuilt, equal to the original, when a row is selected, summarized, exported or analyzed
(`exchange`, `iter_exchanges`). Filters and sorts run over the arrays.

Exchanges may be appended from any thread while the app runs (`ExchangeStore.add`): the
indexing worker does it for files, a live capture can do the same.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from dissectors import API_NAMES, DecodeContext, Diagnostic, error_name
from kanalyze.bodies import NAME_SOURCES, Bodies, BodyDecoder, Records
from kanalyze.correlation import SASL_RAW_API, Exchange, Message
from kanalyze.export import ExchangeEncoder
from kanalyze.framing import Pdu
from kanalyze.tui import rebuild
from kanalyze.tui.filters import Filter
from kanalyze.tui.rowfilter import header_matcher, summary_matcher
from kanalyze.tui.rows import NO_MESSAGE, NONE32, NONE64, STATUSES, Row, RowTable, api_name
from kanalyze.tui.spill import NEAR_BYTES, FrameSpill


class Spilled(bytes):
    """The (empty) data of a frame already in the spill file, and where: what `hold` leaves
    in a message the engine still holds."""

    at: int

    def __new__(cls, at: int) -> Spilled:
        self = super().__new__(cls)
        self.at = at
        return self


Summary = tuple[str, tuple[str, ...]]  # (topic/partition summary, error names)
Rows = array  # of 'q': store indices, as the table lists them (8 bytes a row, not 36 in a list)


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


def summarize(ex: Exchange, bodies: BodyDecoder) -> Summary:
    """Topics and partitions an exchange touches, and the error names in its response (from
    the exchange's facts; topic ids named through the decoder's registry)."""
    facts = Bodies(ex, bodies).facts
    errors: list[str] = []
    for code in facts.error_codes:
        name = error_name(code) or str(code)
        if name not in errors:
            errors.append(name)
    parts = []
    for t, ps in facts.topics:
        if not ps:
            parts.append(t)
        elif len(ps) <= 3:
            parts.append(f"{t}[{','.join(str(p) for p in sorted(ps))}]")
        else:
            parts.append(f"{t}[{len(ps)} partitions]")
    return " ".join(parts), tuple(errors)


def _api_ranks() -> dict[int, int]:
    """Api key (NONE32 for None) -> rank of its name, so sorting by (name, version) compares
    ints."""
    keys = [NONE32, SASL_RAW_API, *API_NAMES]
    names = sorted({api_name(None if k == NONE32 else k) or "" for k in keys})
    return {k: names.index(api_name(None if k == NONE32 else k) or "") for k in keys}


_API_RANK = _api_ranks()


def _sort_key(rows: RowTable, key: str) -> Callable[[int], object]:
    """Row index -> the value a column sorts by (None sorts as -1, or as version 0). Plain ints
    and shared strings: sorting a million rows builds no tuple per row."""
    if key == "time":
        return rows.ts.__getitem__
    if key == "latency":
        lat = rows.lat
        return lambda i: -1 if lat[i] == NONE64 else lat[i]
    if key == "api":  # (api name, version): the name's rank above a 32-bit version offset
        api, ver, rank = rows.api, rows.ver, _API_RANK

        def by_api(i: int) -> int:
            v = ver[i]
            return (rank.get(api[i], 0) << 33) + (0 if v == NONE32 else v) + (1 << 32)

        return by_api
    if key == "conn":
        return rows.conn.__getitem__
    if key == "corr":
        corr = rows.corr
        return lambda i: -1 if corr[i] == NONE64 else corr[i]
    if key == "status":
        status = rows.status
        return lambda i: STATUSES[status[i]]
    if key == "size":
        return rows.size.__getitem__
    raise KeyError(key)


# the table's sort columns, in the order `s` cycles through them
SORT_KEYS: tuple[str, ...] = ("time", "latency", "api", "conn", "corr", "status", "size")


class ExchangeStore:
    """Append-only rows of exchanges (thread-safe append), connection counts, summaries."""

    def __init__(self, ctx: DecodeContext | None = None, spill_dir: str | None = None) -> None:
        self.rows = RowTable()
        self.spill = FrameSpill(spill_dir)
        self._diags: dict[
            int, tuple[Diagnostic, ...]
        ] = {}  # spill offset -> a message's diagnostics
        self._diag_sets: dict[tuple[Diagnostic, ...], tuple[Diagnostic, ...]] = {}
        self._n = 0  # rows published to readers (all columns appended)
        self._last: tuple[Exchange, int, int] | None = None  # the same exchange again: same frames
        self._summary = array("i")  # per row: index into _summary_values, -1 not yet known
        self._summary_values: list[Summary] = []
        self._summary_ids: dict[Summary, int] = {}
        self.conns: dict[int, ConnStats] = {}
        self.first_ts: int | None = None
        self.lock = threading.Lock()
        self.generation = 0  # bumps on every append
        self.done = False
        self.progress: float | None = None  # 0..1 while indexing a file, None when unknown
        self.error: str | None = None
        self.summarized = 0  # rows [0, summarized) have their summary (background pass)
        # detail view and export: full decode; summaries: no records; one topic-name registry
        self.bodies = BodyDecoder(ctx)
        self.topic_names = self.bodies.names
        self._named_upto = 0  # name-teaching responses before this index were decoded
        self.encoder = ExchangeEncoder(bodies=self.bodies)
        self._summary_bodies = BodyDecoder(self.bodies.template, Records.NONE, self.topic_names)

    def __len__(self) -> int:
        return self._n

    def close(self) -> None:
        """Free the spill file (the app is exiting); later reads raise `SpillClosed`."""
        self.spill.close()

    # -- appending --------------------------------------------------------------------------
    def add(self, exchanges: Iterable[Exchange]) -> int:
        """Append exchanges (from any thread); returns how many were added. Their frames go to
        the spill file; nothing of them is referenced afterwards."""
        batch = exchanges if isinstance(exchanges, (list, tuple)) else list(exchanges)
        if not batch:
            return 0
        with self.lock:
            if self.first_ts is None:
                self.first_ts = batch[0].start_ts
            rows = self.rows
            summary = self._summary
            try:
                for ex in batch:
                    last = self._last
                    if last is not None and last[0] is ex:
                        req_off, resp_off = last[1], last[2]
                    else:
                        req_off, resp_off = self._put(ex.request), self._put(ex.response)
                        self._last = (ex, req_off, resp_off)
                    rows.append(ex, req_off, resp_off)
                    summary.append(-1)
                    c = self.conns.get(ex.conn.id)
                    if c is None:
                        c = self.conns[ex.conn.id] = ConnStats(
                            ex.conn.id, ex.conn.client, ex.conn.broker
                        )
                    c.exchanges += 1
                    if ex.status != "ok":
                        c.problems += 1
                    if ex.client_id and ex.client_id not in c.client_ids and len(c.client_ids) < 4:
                        c.client_ids.append(ex.client_id)
            finally:  # a spill error (disk full) leaves the rows before it, complete and published
                self._last = None  # hold no exchange past the call
                self._n = len(rows)
                self.generation += 1
        return len(batch)

    def hold(self, ex: Exchange) -> None:
        """`Engine.hold`: spill the frames of a completed exchange now, while the engine's
        orderer may keep the exchange for many seconds (a request waiting for a rebalance holds
        every later exchange back); its messages keep a stub frame naming the spill offset.
        On the 250 MB bench capture the engine held ~130 MB of frames this way."""
        for msg in (ex.request, ex.response):
            if msg is not None and type(msg.pdu.data) is not Spilled:
                off = self.spill.put(msg.pdu)
                msg.pdu = msg.pdu._replace(data=Spilled(off))

    def _put(self, msg: Message | None) -> int:
        if msg is None:
            return NO_MESSAGE
        data = msg.pdu.data
        off = data.at if type(data) is Spilled else self.spill.put(msg.pdu)
        if msg.diagnostics:  # few messages have any; a repeated set is stored once
            d = tuple(msg.diagnostics)
            self._diags[off] = self._diag_sets.setdefault(d, d)
        return off

    # -- reading rows back ------------------------------------------------------------------
    def row(self, i: int) -> Row:
        """Row i's header fields (cheap: no frame is read)."""
        return self.rows.row(i)

    def exchange(self, i: int) -> Exchange:
        """Row i as the `Exchange` that was added (equal, not the same object): frames are read
        back from the spill file, headers parsed again."""
        return self._rebuild(i, self.spill.reader(NEAR_BYTES).get)

    def iter_exchanges(
        self, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, Exchange]]:
        """(index, exchange) for rows [start, end), read sequentially through a window."""
        get = self.spill.reader().get
        for i in range(start, len(self) if end is None else min(end, len(self))):
            yield i, self._rebuild(i, get)

    def _rebuild(self, i: int, get: Callable[[int], Pdu]) -> Exchange:
        if not 0 <= i < self._n:
            raise IndexError(i)
        rows = self.rows
        req_off, resp_off = rows.req[i], rows.resp[i]
        req = None if req_off == NO_MESSAGE else get(req_off)
        resp = None if resp_off == NO_MESSAGE else get(resp_off)
        return rebuild.exchange(
            rows.row(i), req, resp, self._diags.get(req_off), self._diags.get(resp_off)
        )

    def _for_bodies(self, i: int, get: Callable[[int], Pdu]) -> Exchange:
        """Row i with its frames and body offsets but no headers or diagnostics: all a body
        decode needs (summaries, body filters), at a fraction of the cost of a full rebuild."""
        rows = self.rows
        req_off, resp_off = rows.req[i], rows.resp[i]
        k, v = rows.api[i], rows.ver[i]
        return Exchange(
            rows.conns[rows.conn[i]],
            None if k == NONE32 else k,
            None if v == NONE32 else v,
            None,
            None,
            STATUSES[rows.status[i]],
            None if req_off == NO_MESSAGE else Message(get(req_off), {}, rows.req_body[i]),
            None if resp_off == NO_MESSAGE else Message(get(resp_off), {}, rows.resp_body[i]),
        )

    def frames(self, i: int) -> list[tuple[int, int]]:
        """(first_pkt, last_pkt) of row i's request and response frames (headers read only)."""
        return [
            self.spill.packets(off)
            for off in (self.rows.req[i], self.rows.resp[i])
            if off != NO_MESSAGE
        ]

    def find_frame(self, frame: int, cancelled: Callable[[], bool] = lambda: False) -> int | None:
        """The row whose request or response was carried by packet `frame` (tshark's frame
        number), or None. A scan of the frame headers: Ctrl-G and the findings' jumps."""
        for i in range(len(self)):
            if (i & 0xFFF) == 0 and cancelled():
                return None
            for first, last in self.frames(i):
                if first <= frame <= last:
                    return i
        return None

    # -- summaries --------------------------------------------------------------------------
    def learn_topic_names(self, upto: int) -> None:
        """Decode the name-teaching responses (Metadata, ...) before index `upto`, in order."""
        api, resp = self.rows.api, self.rows.resp
        for i in range(self._named_upto, min(upto, len(self))):
            if api[i] in NAME_SOURCES and resp[i] != NO_MESSAGE:
                self._summary_bodies.learn(self._for_bodies(i, self.spill.get))
        self._named_upto = max(self._named_upto, upto)

    def summary(self, i: int) -> Summary:
        k = self._summary[i]
        if k >= 0:
            return self._summary_values[k]
        return self._summarize(i, self._for_bodies(i, self.spill.reader(NEAR_BYTES).get))

    def _summarize(self, i: int, ex: Exchange) -> Summary:
        if self._named_upto <= i:
            self.learn_topic_names(i + 1)
        s = summarize(ex, self._summary_bodies)
        with self.lock:  # the UI and the workers may summarize the same row at once
            if self._summary[i] < 0:
                k = self._summary_ids.get(s)
                if k is None:  # few distinct summaries: each is stored once
                    k = self._summary_ids[s] = len(self._summary_values)
                    self._summary_values.append(s)
                self._summary[i] = k
                if s[1] and ex.status == "ok":
                    c = self.conns.get(ex.conn.id)
                    if c is not None:
                        c.problems += 1
                        self.generation += 1
            else:
                s = self._summary_values[self._summary[i]]
        return s

    def summarize_all(
        self, cancelled: Callable[[], bool] = lambda: False, pause: Callable[[], None] | None = None
    ) -> bool:
        """Summarize every row not yet summarized (error counts per connection become complete);
        `self.summarized` tracks progress. False if cancelled."""
        last = time.perf_counter()
        get = self.spill.reader().get
        while self.summarized < len(self):
            for i in range(self.summarized, len(self)):
                if self._summary[i] < 0:
                    self._summarize(i, self._for_bodies(i, get))
                self.summarized = i + 1
                now = time.perf_counter()
                if now - last > 0.01:  # every 10 ms of work: check for cancellation, let the UI run
                    if cancelled():
                        return False
                    if pause is not None:
                        pause()
                    last = time.perf_counter()
        return True

    def rel_time(self, row: Row | Exchange) -> float:
        return (row.start_ts - (self.first_ts or 0)) / 1e9

    # -- filtering and sorting ---------------------------------------------------------------
    def match_range(
        self,
        flt: Filter,
        start: int,
        end: int,
        cancelled: Callable[[], bool] = lambda: False,
        progress: Callable[[int], None] | None = None,
    ) -> Rows | None:
        """Indices in [start, end) matching `flt`; None if cancelled. Terms are checked on the
        columns; rows the header terms keep are summarized (bodies decoded) only if the filter
        needs it."""
        if flt.empty:
            return array("q", range(start, end))
        out = array("q")
        probe = header_matcher(flt, self.rows)
        need = flt.needs_summary
        match = summary_matcher(flt, self.rows)
        get = self.spill.reader().get  # rows come in ascending order: frames read on in windows
        summary_of, values = self._summary, self._summary_values
        for i in range(start, end):
            if (i & 0x3FF) == 0:
                if cancelled():
                    return None
                if progress is not None:
                    progress(i)
            if not probe(i):
                continue
            if need:
                k = summary_of[i]
                s = values[k] if k >= 0 else self._summarize(i, self._for_bodies(i, get))
                if not match(i, s):
                    continue
            out.append(i)
        return out

    def query_env(self) -> object:
        """An Env for the query language sharing the summaries' decoder (its topic names)."""
        from kanalyze.query import Env

        env = Env(decoder=self._summary_bodies)
        env.capture_start_ns = self.first_ts
        return env

    def match_query(
        self,
        flt: object,
        start: int,
        end: int,
        conn: int | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        progress: Callable[[int], None] | None = None,
    ) -> Rows | None:
        """Indices in [start, end) matching a `kanalyze.query` filter (each row rebuilt, read
        through a window); None if cancelled."""
        self.learn_topic_names(end)
        env = getattr(flt, "env", None)
        if env is not None:
            env.capture_start_ns = self.first_ts
        match = flt.match  # type: ignore[attr-defined]
        out = array("q")
        conns = self.rows.conn
        for i, ex in self.iter_exchanges(start, end):
            if (i & 0xFF) == 0:
                if cancelled():
                    return None
                if progress is not None:
                    progress(i)
            if (conn is None or conns[i] == conn) and match(ex):
                out.append(i)
        return out

    def sort_indices(self, indices: Iterable[int], key: str, reverse: bool = False) -> Rows:
        """Rows ordered by a column; ties by index (descending when reversed, as if the key
        were (value, index)): a stable sort of the indices in that order does it."""
        ordered = sorted(indices, reverse=reverse)
        if key == "time" and not reverse:
            return array("q", ordered)
        ordered.sort(key=_sort_key(self.rows, key), reverse=reverse)
        return array("q", ordered)
