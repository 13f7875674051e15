"""The statistics tables of `kanalyze stats` (Wireshark's Statistics menu, for Kafka): one
collector per table, all fed from one pass over a session (docs/stats.md).

Each collector takes an exchange with its lazily decoded bodies and facts (`kanalyze.bodies`)
and returns JSON rows; the text tables are drawn from the same rows (`kanalyze.views.stats_text`),
so the two outputs cannot disagree. Bodies and facts are decoded on first use, so the chosen
tables decide what is decoded (`-z conv` alone decodes only ApiVersions requests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from dissectors.context import DecodeContext
from dissectors.errors import error_name
from kanalyze.analysis.stats import ApiStats
from kanalyze.bodies import Bodies
from kanalyze.correlation import Exchange
from kanalyze.views.conv import ConversationTracker
from kanalyze.views.expected import expected_error
from kanalyze.views.stats_common import (
    API_VERSIONS,
    FETCH,
    JOIN_GROUP,
    LONG_POLL_SHARE,
    MAX_IO_BUCKETS,
    MAX_IO_SAMPLES,
    MAX_KEYS,
    PRODUCE,
    SYNC_GROUP,
    Exch,
    bodies_read,
    frame_of,
    lat_ms,
    latency_kind,
)
from kanalyze.views.stats_io import IoCollector, parse_interval

# the names that moved out to stats_common and stats_io (kept importable from here)
__all__ = [
    "API_VERSIONS",
    "COLLECTORS",
    "FETCH",
    "JOIN_GROUP",
    "LONG_POLL_SHARE",
    "MAX_IO_BUCKETS",
    "MAX_IO_SAMPLES",
    "MAX_KEYS",
    "PRODUCE",
    "SCHEMA",
    "SYNC_GROUP",
    "TABLES",
    "ClientsCollector",
    "ConvCollector",
    "ErrorsCollector",
    "Exch",
    "IoCollector",
    "LatencyCollector",
    "TopicsCollector",
    "build",
    "latency_kind",
    "parse_interval",
]

SCHEMA = "kanalyze.stats/1"
TABLES = ("conv", "topics", "clients", "latency", "errors", "io")

# -- conv ---------------------------------------------------------------------------------------


class ConvCollector:
    """Conversations from the tracker (fed each packet), joined with each exchange."""

    def __init__(self) -> None:
        self.tracker = ConversationTracker()

    def feed(self, x: Exch) -> None:
        self.tracker.exchange(x.ex, x.software)

    def rows(self, cut: bool = False, joined_only: bool = False) -> list[dict[str, object]]:
        """`joined_only`: with a selection, only the conversations a selected exchange joined."""
        rows = self.tracker.rows(cut)
        return [r for r in rows if r["connection"] is not None] if joined_only else rows


# -- topics -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Part:
    produced_records: int = 0
    produced_bytes: int = 0
    produce_requests: int = 0
    fetched_records: int = 0
    fetched_bytes: int = 0
    fetch_responses: int = 0
    producers: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)
    first_offset: int | None = None
    last_offset: int | None = None
    high_watermark: int | None = None

    def offsets(self, lo: int | None, hi: int | None) -> None:
        if lo is not None and lo >= 0:
            self.first_offset = lo if self.first_offset is None else min(self.first_offset, lo)
        if hi is not None and hi >= 0:
            self.last_offset = hi if self.last_offset is None else max(self.last_offset, hi)


class TopicsCollector:
    """Per topic and partition: what Produce requests carried (offsets from the responses)
    and what Fetch responses returned, to consumers and followers alike."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], _Part] = {}
        self.dropped = 0

    def _part(self, topic: str, partition: int) -> _Part | None:
        key = (topic, partition)
        p = self.parts.get(key)
        if p is None:
            if len(self.parts) >= MAX_KEYS:
                self.dropped += 1
                return None
            p = self.parts[key] = _Part()
        return p

    def feed(self, x: Exch) -> None:
        ex = x.ex
        if ex.api_key not in (PRODUCE, FETCH):
            return
        who = ex.client_id or "-"
        for pf in x.facts.partitions:
            topic = pf.topic or (pf.topic_id[:8] if pf.topic_id else "?")
            p = self._part(topic, pf.partition)
            if p is None:
                continue
            n = pf.record_count or 0
            if ex.api_key == PRODUCE:
                p.produce_requests += 1
                p.produced_records += n
                p.produced_bytes += pf.records_bytes or 0
                p.producers.add(who)
                if pf.base_offset is not None and pf.base_offset >= 0 and not pf.error_code and n:
                    p.offsets(pf.base_offset, pf.base_offset + n - 1)
            elif ex.response is not None:
                p.fetch_responses += 1
                p.fetched_records += n
                p.fetched_bytes += pf.records_bytes or 0
                rid = x.facts.replica_id
                p.consumers.add(f"replica {rid}" if rid is not None and rid >= 0 else who)
                if n:
                    p.offsets(pf.first_offset, pf.last_offset)
                if pf.high_watermark is not None and pf.high_watermark >= 0:
                    p.high_watermark = pf.high_watermark

    def rows(self) -> list[dict[str, object]]:
        return [
            {
                "topic": t,
                "partition": n,
                "produced_records": p.produced_records,
                "produced_bytes": p.produced_bytes,
                "produce_requests": p.produce_requests,
                "fetched_records": p.fetched_records,
                "fetched_bytes": p.fetched_bytes,
                "fetch_responses": p.fetch_responses,
                "producers": sorted(p.producers),
                "consumers": sorted(p.consumers),
                "first_offset": p.first_offset,
                "last_offset": p.last_offset,
                "high_watermark": p.high_watermark,
            }
            for (t, n), p in sorted(self.parts.items())
        ]


# -- clients ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Client:
    software: set[str] = field(default_factory=set)
    addresses: set[str] = field(default_factory=set)
    connections: set[int] = field(default_factory=set)
    apis: dict[str, set[int]] = field(default_factory=dict)
    requests: int = 0
    errors: int = 0
    expected_errors: int = 0


class ClientsCollector:
    """Per client id: software, addresses, connections, APIs and versions, errors (expected
    ones apart)."""

    def __init__(self) -> None:
        self.clients: dict[str | None, _Client] = {}
        self.dropped = 0

    def feed(self, x: Exch) -> None:
        ex = x.ex
        c = self.clients.get(ex.client_id)
        if c is None:
            if len(self.clients) >= MAX_KEYS:
                self.dropped += 1
                return
            c = self.clients[ex.client_id] = _Client()
        c.requests += 1
        c.addresses.add(ex.conn.client.rpartition(":")[0])
        c.connections.add(ex.conn.id)
        if ex.api is not None and ex.api_version is not None:
            c.apis.setdefault(ex.api, set()).add(ex.api_version)
        sw = x.software
        if sw:
            c.software.add(sw)
        if ex.response is not None:
            for code in x.facts.error_codes:
                if expected_error(ex.api_key, code, x.bodies.request, ex.api_version):
                    c.expected_errors += 1
                else:
                    c.errors += 1

    def rows(self) -> list[dict[str, object]]:
        return [
            {
                "client_id": cid,
                "software": sorted(c.software),
                "addresses": sorted(c.addresses),
                "connections": len(c.connections),
                "requests": c.requests,
                "apis": [{"api": a, "versions": sorted(v)} for a, v in sorted(c.apis.items())],
                "errors": c.errors,
                "expected_errors": c.expected_errors,
            }
            for cid, c in sorted(self.clients.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
        ]


# -- latency ------------------------------------------------------------------------------------

KINDS = ("response", "long-poll", "rebalance wait")


class LatencyCollector:
    """Per API and version: percentiles of real responses; Fetch long-polls (the broker held
    the answer for the request's max_wait_ms) and rebalance waits apart, as waits by design:
    JoinGroup (the broker holds every member until the group is complete; not the first join
    answered at once with MEMBER_ID_REQUIRED) and SyncGroup (followers wait for the leader's
    assignment)."""

    def __init__(self) -> None:
        self.stats: dict[tuple[int, str, int, str], ApiStats] = defaultdict(ApiStats)

    def feed(self, x: Exch) -> None:
        ex = x.ex
        if ex.latency_ns is None or ex.api_key is None or ex.api is None or ex.api_version is None:
            return
        self.add(ex, latency_kind(x))

    def add(self, ex: Exchange, kind: str) -> None:
        """One exchange's latency as `kind` (`latency_kind`, worked out elsewhere)."""
        lat = ex.latency_ns
        if lat is None or ex.api_key is None or ex.api is None or ex.api_version is None:
            return
        ms = lat / 1e6
        st = self.stats[(ex.api_key, ex.api, ex.api_version, kind)]
        st.count += 1
        st.add_latency(ms)

    def rows(self) -> list[dict[str, object]]:
        return [
            {
                "api": api,
                "api_key": key,
                "api_version": ver,
                "kind": kind,
                "count": st.count,
                **lat_ms(st.latencies),
            }
            for (key, api, ver, kind), st in sorted(
                self.stats.items(), key=lambda kv: (kv[0][0], kv[0][2], KINDS.index(kv[0][3]))
            )
        ]


# -- errors -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Err:
    count: int = 0
    frames: list[int] = field(default_factory=list)
    clients: set[str] = field(default_factory=set)
    reason: str | None = None


class ErrorsCollector:
    """Per error, API and expected-or-not: how often, from which clients, in which frames."""

    MAX_FRAMES = 10

    def __init__(self) -> None:
        self.errors: dict[tuple[str, int, bool], _Err] = {}
        self.dropped = 0

    def feed(self, x: Exch) -> None:
        ex = x.ex
        if ex.response is None or ex.api is None:
            return
        codes = x.facts.error_codes
        if not codes:
            return
        for code in set(codes):
            reason = expected_error(ex.api_key, code, x.bodies.request, ex.api_version)
            key = (ex.api, code, reason is not None)
            e = self.errors.get(key)
            if e is None:
                if len(self.errors) >= MAX_KEYS:
                    self.dropped += 1
                    continue
                e = self.errors[key] = _Err(reason=reason)
            e.count += codes.count(code)
            if len(e.frames) < self.MAX_FRAMES:
                e.frames.append(frame_of(ex))
            if ex.client_id:
                e.clients.add(ex.client_id)

    def rows(self) -> list[dict[str, object]]:
        items = sorted(
            self.errors.items(), key=lambda kv: (kv[0][2], -kv[1].count, kv[0][0], kv[0][1])
        )
        return [
            {
                "error": error_name(code),
                "code": code,
                "api": api,
                "count": e.count,
                "expected": exp,
                "reason": e.reason,
                "clients": sorted(e.clients),
                "frames": e.frames,
            }
            for (api, code, exp), e in items
        ]


COLLECTORS = {
    "conv": ConvCollector,
    "topics": TopicsCollector,
    "clients": ClientsCollector,
    "latency": LatencyCollector,
    "errors": ErrorsCollector,
}


def build(
    session: object,
    choices: dict[str, object],
    topic_ids: dict[str, str] | None = None,
    ctx: DecodeContext | None = None,
) -> dict[str, object]:
    """Run `session` once, feeding the chosen collectors; the `kanalyze stats --json` document.

    `choices` maps table names (TABLES) to their argument: for io, (interval in seconds or
    None for automatic, None or "topic" or "client" to split by). `session` may be a
    SelectedSession (-Y and the selection options): every table then counts the selected
    exchanges only, and `conv` lists only the conversations of their connections (the
    packets are still counted whole, as each connection's packets are not selectable one by
    one). `ctx` is the decode context the selection shares (topic names learned from every
    exchange); without one, a fresh one holding `topic_ids`."""
    from kanalyze.bodies import exchange_facts
    from kanalyze.session import Session
    from kanalyze.views.source import BodySource
    from kanalyze.views.window import capture_notes

    base = getattr(session, "base", session)  # a SelectedSession wraps the Session
    assert isinstance(base, Session)
    selected = base is not session
    if ctx is None:
        ctx = DecodeContext(topic_names=dict(topic_ids or {}))  # --topic-ids
    source = BodySource(ctx)
    cols: dict[str, object] = {}
    for name in TABLES:
        if name in choices:
            if name == "io":
                interval, by = choices[name] or (None, None)  # type: ignore[misc]
                cols[name] = IoCollector(interval, by)
            else:
                cols[name] = COLLECTORS[name]()
    conv = cols.get("conv")
    if isinstance(conv, ConvCollector):
        base.on_packet = conv.tracker.packet
    first = last = None
    n = 0
    feeds = [c.feed for c in cols.values()]  # type: ignore[attr-defined]
    ranged = getattr(type(session), "decoded", None) is not None  # a RangeSession (--jobs)
    if not ranged:
        all_bodies: Iterator[Bodies] = map(source.bodies, session.exchanges())
    else:  # decoded in the ranges, facts too
        all_bodies = session.decoded(  # type: ignore[attr-defined]
            source.decoder, learn=True, facts=True, keep=bodies_read)
    for bodies in all_bodies:
        ex = bodies.ex
        n += 1
        t0 = ex.start_ts
        t1 = ex.response.pdu.last_ts if ex.response else t0
        first = t0 if first is None else min(first, t0)
        last = t1 if last is None else max(last, t1)
        x = Exch(ex, bodies, exchange_facts)
        for f in feeds:
            f(x)
    if ranged and session.diverged:  # type: ignore[attr-defined]  # a name read differs
        return build(session.single(), choices, topic_ids, ctx)  # type: ignore[attr-defined]
    notes = capture_notes(session)
    cut = bool(session.capture.diagnostics)
    for name, c in cols.items():
        dropped = getattr(c, "dropped", 0) or getattr(getattr(c, "tracker", None), "dropped", 0)
        if dropped and name != "io":
            notes.append(
                f"{name}: {dropped:,} more rows than the {MAX_KEYS:,} listed were not kept"
            )
    io = cols.get("io")
    if isinstance(io, IoCollector) and io.dropped:
        notes.append(
            f"io: {io.dropped} exchanges past the last of {MAX_IO_BUCKETS} intervals "
            "not counted (choose a longer interval)"
        )
    if isinstance(conv, ConvCollector) and conv.tracker.first_ns is not None:
        first = conv.tracker.first_ns
        last = max(c.last_ns for c in conv.tracker.all) if conv.tracker.all else last
    tables: dict[str, object] = {}
    for name, c in cols.items():
        if name == "conv":
            tables[name] = c.rows(cut, joined_only=selected)  # type: ignore[attr-defined]
        else:
            tables[name] = c.rows()  # type: ignore[attr-defined]
    doc: dict[str, object] = {
        "schema": SCHEMA,
        "files": list(session.paths),
        "capture": {
            "first": None if first is None else round(first / 1e9, 6),
            "last": None if last is None else round(last / 1e9, 6),
            "duration_s": None if first is None or last is None else round((last - first) / 1e9, 6),
            "packets": session.capture.packets,
            "exchanges": n,
            "notes": notes,
        },
        "tables": tables,
    }
    if isinstance(io, IoCollector):
        doc["io_interval_s"] = io.interval_s
        if io.by:
            tables["io_by"] = io.split_rows()
    return doc
