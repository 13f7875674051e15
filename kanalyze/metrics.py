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


class Metrics:
    """Prometheus series fed by `observe(ex, encoded)`; `serve()` exposes them over HTTP."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_series: int = 20_000,
        max_client_ids: int = 1_000,
    ) -> None:
        from dissectors.errors import error_name

        self._error_name = error_name
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
        api = ex.api or "unknown"
        ver = "" if ex.api_version is None else str(ex.api_version)
        labels = (api, ver, self._client(ex.client_id), ex.status)
        if self._admit("requests", labels):
            self.requests.labels(*labels).inc()
        lat = d.get("latency_ms")
        if isinstance(lat, int | float):
            self.latency.labels(api).observe(lat / 1000.0)
        req, rsp = d.get("request"), d.get("response")
        if isinstance(req, dict) and isinstance(req.get("size"), int):
            self.req_bytes.labels(api).inc(req["size"])
        if isinstance(rsp, dict) and isinstance(rsp.get("size"), int):
            self.rsp_bytes.labels(api).inc(rsp["size"])
        rbody = _body(d, "response")
        if rbody is not None:
            for code in error_codes(rbody):
                name = self._error_name(code)
                if self._admit("errors", (api, name)):
                    self.errors.labels(api, name).inc()
        if ex.api_key == ApiKey.FETCH and rbody is not None:
            self._fetch(_body(d, "request"), rbody)
        elif ex.api_key == ApiKey.OFFSET_COMMIT:
            self._offset_commit(_body(d, "request"), rbody)
        elif ex.api_key == ApiKey.OFFSET_FETCH and rbody is not None:
            self._offset_fetch(_body(d, "request"), rbody)

    def _fetch(self, req: dict | None, rsp: dict) -> None:
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
            key = (topic, str(part))
            if not self._admit("partition", key):
                continue
            self.hw.labels(*key).set(hw)
            for gauge, field_name in (
                (self.lso, "last_stable_offset"),
                (self.log_start, "log_start_offset"),
            ):
                v = _int(p.get(field_name))
                if v is not None and v >= 0:
                    gauge.labels(*key).set(v)
            self.hws[(topic, part)] = hw
            for group in self._by_tp.get((topic, part), ()):
                self._lag(group, topic, part)
        replica = fetch_replica(req)
        if replica < 0 or req is None:
            return
        for topic, part, p in fetch_requests(req):
            off = _int(p.get("fetch_offset"))
            if off is None or not isinstance(part, int):
                continue
            key = (topic, str(part), str(replica))
            if not self._admit("follower", key):
                continue
            self.follower_offset.labels(*key).set(off)
            end = ends.get((topic, part))
            if end is not None:
                self.follower_lag.labels(*key).set(max(0, end - off))

    def _offset_commit(self, req: dict | None, rsp: dict | None) -> None:
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
                    self._commit(group, name, part, off)

    def _offset_fetch(self, req: dict | None, rsp: dict) -> None:
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
                        self._commit(group, name, part, off)

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
    def watch(self, session: object) -> None:
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
    def __init__(self, session: object) -> None:
        self.s = session

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.s
        c = s.source.counters  # type: ignore[attr-defined]
        eng = s.engine  # type: ignore[attr-defined]
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
        yield CounterMetricFamily(
            "kanalyze_exchanges", "exchanges emitted", value=s.stats.exchanges
        )  # type: ignore[attr-defined]
        yield GaugeMetricFamily(
            "kanalyze_open_connections", "connections the engine tracks", value=s.open_connections
        )  # type: ignore[attr-defined]
        yield GaugeMetricFamily(
            "kanalyze_pending_requests", "requests waiting for a response", value=s.pending
        )  # type: ignore[attr-defined]
        client, broker = stream_bytes(eng)
        fam = CounterMetricFamily(
            "kanalyze_stream_bytes",
            "bytes of Kafka connections by direction (open ones as they flow)",
            labels=("direction",),
        )
        fam.add_metric(("client",), client)
        fam.add_metric(("broker",), broker)
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
