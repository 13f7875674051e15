"""Prometheus metrics from live exchanges (`kanalyze live --prometheus PORT`).

Every value is computed from the same encoded exchange that becomes the NDJSON
line (`ExchangeEncoder.encode`), so a dashboard and the NDJSON always agree:

* `kanalyze_requests_total{api,version,client_id,status}`: one per exchange;
* `kanalyze_request_latency_seconds{api}`: request → response, the NDJSON `latency_ms`;
* `kanalyze_request_bytes_total{api}`, `kanalyze_response_bytes_total{api}`: frame sizes;
* `kanalyze_errors_total{api,error}`: every non-zero `*error_code` in a response body;
* `kanalyze_partition_high_watermark{topic,partition}` (and `..._log_start_offset`,
  `..._last_stable_offset`): the latest error-free Fetch response values;
* `kanalyze_follower_fetch_offset{topic,partition,replica}` and
  `kanalyze_follower_lag{topic,partition,replica}`: followers' Fetch requests; lag is the
  visible leader end (HW, or the end of the batches returned) minus the fetch offset;
* `kanalyze_consumer_committed_offset{group,topic,partition}` (from successful OffsetCommit
  requests and OffsetFetch responses) and `kanalyze_consumer_lag{group,topic,partition}`
  = HW − committed offset, once both are known;
* capture health, read at scrape time: packets, bytes, kernel packets and drops, open
  connections, pending requests, exchanges.

Label sets are bounded (`max_series` per family, `max_client_ids` distinct client ids,
the rest counted under `client_id="_other"`); what is not recorded is counted in
`kanalyze_metrics_series_dropped_total`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from dissectors import ApiKey
from kanalyze.analysis.wire import (
    batch_end,
    batches,
    fetch_replica,
    fetch_requests,
    fetch_responses,
    topic_of,
)
from kanalyze.bodies import error_codes
from kanalyze.correlation import Exchange

if TYPE_CHECKING:
    from kanalyze.live.afpacket import CaptureCounters
    from kanalyze.live.session import LiveSession

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
OTHER = "_other"


def _body(d: dict, side: str) -> dict | None:
    m = d.get(side)
    if isinstance(m, dict):
        b = m.get("body")
        if isinstance(b, dict):
            return b
    return None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(slots=True)
class Observation:
    """What the metrics take from one exchange: small and picklable, free of `Metrics` state."""

    api: str
    version: str
    client_id: str | None
    status: str
    latency_s: float | None = None
    req_size: int | None = None
    rsp_size: int | None = None
    errors: list[str] = field(default_factory=list)  # error names, one per non-zero code
    # error-free Fetch partitions with a high watermark: (topic, partition, hw, lso, log start)
    partitions: list[tuple[str, int, int, int | None, int | None]] = field(default_factory=list)
    # a follower's Fetch: (topic, partition, replica, fetch offset, visible leader end)
    followers: list[tuple[str, int, int, int, int | None]] = field(default_factory=list)
    # acknowledged commits: (group, topic, partition, offset)
    commits: list[tuple[str, str, int, int]] = field(default_factory=list)


def observation(ex: Exchange, d: dict) -> Observation:
    """The metrics' view of one exchange, `d` its encoded form (`ExchangeEncoder.encode`)."""
    from dissectors.errors import error_name

    o = Observation(
        ex.api or "unknown",
        "" if ex.api_version is None else str(ex.api_version),
        ex.client_id,
        ex.status,
    )
    lat = d.get("latency_ms")
    if isinstance(lat, int | float):
        o.latency_s = lat / 1000.0
    req, rsp = d.get("request"), d.get("response")
    if isinstance(req, dict) and isinstance(req.get("size"), int):
        o.req_size = req["size"]
    if isinstance(rsp, dict) and isinstance(rsp.get("size"), int):
        o.rsp_size = rsp["size"]
    rbody = _body(d, "response")
    if rbody is not None:
        o.errors = [str(error_name(code)) for code in error_codes(rbody)]
    if ex.api_key == ApiKey.FETCH and rbody is not None:
        _fetch(o, _body(d, "request"), rbody)
    elif ex.api_key == ApiKey.OFFSET_COMMIT:
        _offset_commit(o, _body(d, "request"), rbody)
    elif ex.api_key == ApiKey.OFFSET_FETCH and rbody is not None:
        _offset_fetch(o, _body(d, "request"), rbody)
    return o


def _fetch(o: Observation, req: dict | None, rsp: dict) -> None:
    ends: dict[tuple[str, int], int] = {}
    for topic, part, p in fetch_responses(rsp):
        if _int(p.get("error_code")) or not isinstance(part, int):
            continue
        hw = _int(p.get("high_watermark"))
        end = hw
        for b in batches(p.get("records")):
            e = batch_end(b)
            if e is not None and (end is None or e > end):
                end = e
        if end is not None:
            ends[(topic, part)] = end
        if hw is None or hw < 0:
            continue
        lso, log_start = _int(p.get("last_stable_offset")), _int(p.get("log_start_offset"))
        o.partitions.append(
            (
                topic,
                part,
                hw,
                lso if lso is not None and lso >= 0 else None,
                log_start if log_start is not None and log_start >= 0 else None,
            )
        )
    replica = fetch_replica(req)
    if replica < 0 or req is None:
        return
    for topic, part, p in fetch_requests(req):
        off = _int(p.get("fetch_offset"))
        if off is None or not isinstance(part, int):
            continue
        o.followers.append((topic, part, replica, off, ends.get((topic, part))))


def _offset_commit(o: Observation, req: dict | None, rsp: dict | None) -> None:
    if req is None or rsp is None:
        return  # not acknowledged: not committed
    ok: set[tuple[str, int]] = set()
    for t in rsp.get("topics") or []:
        name = topic_of(t)
        for p in t.get("partitions") or []:
            if not _int(p.get("error_code")):
                ok.add((name, p.get("partition_index", -1)))
    group = req.get("group_id")
    if not isinstance(group, str):
        return
    for t in req.get("topics") or []:
        name = topic_of(t)
        for p in t.get("partitions") or []:
            part, off = p.get("partition_index"), _int(p.get("committed_offset"))
            if isinstance(part, int) and off is not None and off >= 0 and (name, part) in ok:
                o.commits.append((group, name, part, off))


def _offset_fetch(o: Observation, req: dict | None, rsp: dict) -> None:
    if isinstance(rsp.get("groups"), list):
        groups = [
            (g.get("group_id"), g.get("topics") or [])
            for g in rsp["groups"]
            if isinstance(g, dict) and not _int(g.get("error_code"))
        ]
    else:
        if _int(rsp.get("error_code")):
            return
        groups = [((req or {}).get("group_id"), rsp.get("topics") or [])]
    for group, topics in groups:
        if not isinstance(group, str):
            continue
        for t in topics:
            name = topic_of(t)
            for p in t.get("partitions") or []:
                part, off = p.get("partition_index"), _int(p.get("committed_offset"))
                if (
                    isinstance(part, int)
                    and off is not None
                    and off >= 0
                    and not _int(p.get("error_code"))
                ):
                    o.commits.append((group, name, part, off))


class Metrics:
    """Prometheus series fed by `observe(ex, encoded)`; `serve()` exposes them over HTTP."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_series: int = 20_000,
        max_client_ids: int = 1_000,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.max_series = max_series
        self.max_client_ids = max_client_ids
        self._clients: set[str] = set()
        self._series: dict[str, set[tuple]] = {}
        self.dropped = 0
        self.requests = Counter(
            "kanalyze_requests",
            "Kafka exchanges by api, version, client id and status",
            ("api", "version", "client_id", "status"),
            registry=r,
        )
        self.latency = Histogram(
            "kanalyze_request_latency_seconds",
            "request to response time",
            ("api",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.req_bytes = Counter(
            "kanalyze_request_bytes",
            "request frame bytes (with the size prefix)",
            ("api",),
            registry=r,
        )
        self.rsp_bytes = Counter(
            "kanalyze_response_bytes",
            "response frame bytes (with the size prefix)",
            ("api",),
            registry=r,
        )
        self.errors = Counter(
            "kanalyze_errors", "non-zero error codes in responses", ("api", "error"), registry=r
        )
        self.hw = Gauge(
            "kanalyze_partition_high_watermark",
            "high watermark from the latest Fetch response",
            ("topic", "partition"),
            registry=r,
        )
        self.lso = Gauge(
            "kanalyze_partition_last_stable_offset",
            "last stable offset from the latest Fetch response",
            ("topic", "partition"),
            registry=r,
        )
        self.log_start = Gauge(
            "kanalyze_partition_log_start_offset",
            "log start offset from the latest Fetch response",
            ("topic", "partition"),
            registry=r,
        )
        self.follower_offset = Gauge(
            "kanalyze_follower_fetch_offset",
            "a follower's fetch offset (its log end)",
            ("topic", "partition", "replica"),
            registry=r,
        )
        self.follower_lag = Gauge(
            "kanalyze_follower_lag",
            "records a follower is behind the visible leader end",
            ("topic", "partition", "replica"),
            registry=r,
        )
        self.committed = Gauge(
            "kanalyze_consumer_committed_offset",
            "a group's committed offset",
            ("group", "topic", "partition"),
            registry=r,
        )
        self.consumer_lag = Gauge(
            "kanalyze_consumer_lag",
            "high watermark minus the group's committed offset",
            ("group", "topic", "partition"),
            registry=r,
        )
        # state for lag: latest HW per (topic, partition); committed per (group, topic, partition)
        self.hws: dict[tuple[str, int], int] = {}
        self.commits: dict[tuple[str, str, int], int] = {}
        self._by_tp: dict[tuple[str, int], set[str]] = {}
        # called with (group, topic, partition, lag) whenever a consumer lag is set: the HTML
        # report draws lag over time from it
        self.on_lag: Callable[[str, str, int, int], None] | None = None
        self._dropped_family = _DroppedCollector(self)
        r.register(self._dropped_family)

    # -- bounded label sets ---------------------------------------------------------------------
    def _admit(self, family: str, labels: tuple) -> bool:
        seen = self._series.setdefault(family, set())
        if labels in seen:
            return True
        if len(seen) >= self.max_series:
            self.dropped += 1
            return False
        seen.add(labels)
        return True

    def _client(self, cid: str | None) -> str:
        c = "" if cid is None else cid
        if c in self._clients:
            return c
        if len(self._clients) >= self.max_client_ids:
            return OTHER
        self._clients.add(c)
        return c

    # -- feeding ----------------------------------------------------------------------------------
    def observe(self, ex: Exchange, d: dict) -> None:
        """One exchange, `d` its encoded form (`ExchangeEncoder.encode`), bodies decoded or not."""
        self.apply(observation(ex, d))

    def apply(self, o: Observation) -> None:
        """Record what `observation()` took from one exchange (in the process that serves the
        endpoint: `live --workers N` extracts in the workers and applies here)."""
        labels = (o.api, o.version, self._client(o.client_id), o.status)
        if self._admit("requests", labels):
            self.requests.labels(*labels).inc()
        if o.latency_s is not None:
            self.latency.labels(o.api).observe(o.latency_s)
        if o.req_size is not None:
            self.req_bytes.labels(o.api).inc(o.req_size)
        if o.rsp_size is not None:
            self.rsp_bytes.labels(o.api).inc(o.rsp_size)
        for name in o.errors:
            if self._admit("errors", (o.api, name)):
                self.errors.labels(o.api, name).inc()
        for topic, part, hw, lso, log_start in o.partitions:
            key = (topic, str(part))
            if not self._admit("partition", key):
                continue
            self.hw.labels(*key).set(hw)
            if lso is not None:
                self.lso.labels(*key).set(lso)
            if log_start is not None:
                self.log_start.labels(*key).set(log_start)
            self.hws[(topic, part)] = hw
            for group in self._by_tp.get((topic, part), ()):
                self._lag(group, topic, part)
        for topic, part, replica, off, end in o.followers:
            fkey = (topic, str(part), str(replica))
            if not self._admit("follower", fkey):
                continue
            self.follower_offset.labels(*fkey).set(off)
            if end is not None:
                self.follower_lag.labels(*fkey).set(max(0, end - off))
        for group, topic, part, off in o.commits:
            self._commit(group, topic, part, off)

    def _commit(self, group: str, topic: str, part: int, off: int) -> None:
        key = (group, topic, str(part))
        if not self._admit("consumer", key):
            return
        self.committed.labels(*key).set(off)
        self.commits[(group, topic, part)] = off
        self._by_tp.setdefault((topic, part), set()).add(group)
        self._lag(group, topic, part)

    def _lag(self, group: str, topic: str, part: int) -> None:
        hw, off = self.hws.get((topic, part)), self.commits.get((group, topic, part))
        if hw is not None and off is not None:
            lag = max(0, hw - off)
            self.consumer_lag.labels(group, topic, str(part)).set(lag)
            if self.on_lag is not None:
                self.on_lag(group, topic, part, lag)

    # -- capture health ---------------------------------------------------------------------------
    def watch(self, session: LiveSession) -> None:
        """Expose a LiveSession's capture counters, read at scrape time."""
        self.registry.register(_CaptureCollector(session))

    def serve(self, host: str, port: int) -> object:
        """Start the HTTP endpoint in a daemon thread; returns the server (call `shutdown()`)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


class _DroppedCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "kanalyze_metrics_series_dropped",
            "observations not recorded because a label set limit was reached",
            value=self.m.dropped,
        )


class _CaptureCollector(Collector):
    def __init__(self, session: LiveSession) -> None:
        self.s = session

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.s
        yield from capture_families(
            s.source.counters, s.stats.exchanges, s.open_connections, s.pending,
            stream_bytes(s.engine),
        )  # fmt: skip


def capture_families(
    c: CaptureCounters,
    exchanges: int,
    open_connections: int,
    pending: int,
    streams: tuple[int, int],
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """The capture-health families (one process, or the sum of `live --workers`)."""
    yield CounterMetricFamily(
        "kanalyze_capture_packets", "packets captured and fed to the engine", value=c.packets
    )
    yield CounterMetricFamily(
        "kanalyze_capture_bytes", "bytes captured (link layer)", value=c.bytes
    )
    yield CounterMetricFamily(
        "kanalyze_capture_truncated_packets",
        "packets longer than the snap length",
        value=c.truncated,
    )
    if c.kernel_packets is not None:
        yield CounterMetricFamily(
            "kanalyze_capture_kernel_packets",
            "packets that passed the kernel filter",
            value=c.kernel_packets,
        )
        yield CounterMetricFamily(
            "kanalyze_capture_kernel_drops",
            "packets the kernel dropped (receive buffer full)",
            value=c.kernel_drops or 0,
        )
    yield CounterMetricFamily("kanalyze_exchanges", "exchanges emitted", value=exchanges)
    yield GaugeMetricFamily(
        "kanalyze_open_connections", "connections the engine tracks", value=open_connections
    )
    yield GaugeMetricFamily(
        "kanalyze_pending_requests", "requests waiting for a response", value=pending
    )
    fam = CounterMetricFamily(
        "kanalyze_stream_bytes",
        "bytes of Kafka connections by direction (open ones as they flow)",
        labels=("direction",),
    )
    fam.add_metric(("client",), streams[0])
    fam.add_metric(("broker",), streams[1])
    yield fam


def stream_bytes(eng: object) -> tuple[int, int]:
    """(client, broker) bytes delivered in order so far: the closed Kafka connections' totals plus
    each open Kafka connection's position. Read from the scrape thread while the engine runs: a
    connection is counted once (closed ones are in the totals, and skipped here)."""
    st = eng.stats  # type: ignore[attr-defined]
    client, broker = st.client.stream, st.broker.stream
    conns: list = []
    for _ in range(3):  # the engine may add a connection while we copy: try again
        try:
            conns = list(eng.order.values())  # type: ignore[attr-defined]
            break
        except RuntimeError:
            continue
    for conn in conns:
        if conn.kafka and not conn.closed:
            client += conn.c2s.next
            broker += conn.s2c.next
    return client, broker
