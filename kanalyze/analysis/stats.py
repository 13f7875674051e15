"""Traffic statistics: per api/version counts and latency, errors by name, throttling, bytes,
clients (client id, software from ApiVersions v3+, addresses), topics (who produces, who consumes),
connections."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from dissectors import ApiKey, error_name
from kanalyze.analysis.events import Event
from kanalyze.analysis.summary import percentile

MAX_LATENCIES = 100_000  # per api/version; beyond it a reservoir keeps every n-th sample


@dataclass
class ApiStats:
    count: int = 0
    statuses: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    seen: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    throttled: int = 0
    throttle_ms: int = 0

    def add_latency(self, ms: float) -> None:
        self.seen += 1
        if len(self.latencies) < MAX_LATENCIES:
            self.latencies.append(ms)
        elif self.seen % 10 == 0:
            self.latencies[self.seen % MAX_LATENCIES] = ms


@dataclass
class Client:
    client_id: str | None
    software_name: str | None = None
    software_version: str | None = None
    addresses: set[str] = field(default_factory=set)
    connections: set[int] = field(default_factory=set)
    requests: int = 0


class StatsAnalyzer:
    def __init__(self, cap: int = 10_000) -> None:
        self.cap = cap
        self.apis: dict[tuple[int | None, str | None, int | None], ApiStats] = defaultdict(ApiStats)
        self.errors: Counter = Counter()  # (api, code) -> count
        self.clients: dict[str | None, Client] = {}
        self.connections: dict[int, dict[str, object]] = {}
        self.exchanges = 0

    def feed(self, ev: Event) -> None:
        ex = ev.ex
        key = (ex.api_key, ex.api, ex.api_version)
        st = self.apis[key]
        # an exchange is counted at its first event (request, or response when the request is
        # missing)
        first = ev.is_request or ex.request is None
        if first:
            self.exchanges += 1
            st.count += 1
            st.statuses[ex.status] += 1
            conn = self.connections.get(ex.conn.id)
            if conn is None and len(self.connections) < self.cap:
                conn = self.connections[ex.conn.id] = {
                    "id": ex.conn.id,
                    "client": ex.conn.client,
                    "broker": ex.conn.broker,
                    "client_ids": set(),
                    "exchanges": 0,
                }
            if conn is not None:
                conn["exchanges"] += 1  # type: ignore[operator]
                if ex.client_id is not None:
                    conn["client_ids"].add(ex.client_id)  # type: ignore[union-attr]
            c = self.clients.get(ex.client_id)
            if c is None and len(self.clients) < self.cap:
                c = self.clients[ex.client_id] = Client(ex.client_id)
            if c is not None:
                c.requests += 1
                c.addresses.add(ex.conn.client.rpartition(":")[0])
                c.connections.add(ex.conn.id)
                if ex.api_key == ApiKey.API_VERSIONS and ev.is_request and ev.body:
                    c.software_name = ev.body.get("client_software_name") or c.software_name
                    c.software_version = (
                        ev.body.get("client_software_version") or c.software_version
                    )
        if ev.is_request:
            if ex.request is not None:
                st.request_bytes += ex.request.pdu.size + 4
            return
        if ex.response is not None:
            st.response_bytes += ex.response.pdu.size + 4
        if ex.latency_ns is not None:
            st.add_latency(ex.latency_ns / 1e6)
        body = ev.body
        if body is None:
            return
        for c in ev.bodies.error_codes():
            self.errors[(ex.api, c)] += 1
        thr = body.get("throttle_time_ms")
        if isinstance(thr, int) and thr > 0:
            st.throttled += 1
            st.throttle_ms += thr

    def to_json(
        self, topic_producers: dict[str, set[str]], topic_consumers: dict[str, set[str]]
    ) -> dict[str, object]:
        apis = []
        all_lat: list[float] = []
        for key in sorted(
            self.apis, key=lambda k: (k[0] if k[0] is not None else 1 << 20, k[2] or 0)
        ):
            st = self.apis[key]
            lats = sorted(st.latencies)
            all_lat.extend(lats)
            apis.append(
                {
                    "api_key": key[0],
                    "api": key[1],
                    "api_version": key[2],
                    "count": st.count,
                    "status": dict(st.statuses),
                    "latency_ms": _lat(lats),
                    "request_bytes": st.request_bytes,
                    "response_bytes": st.response_bytes,
                    "throttled_responses": st.throttled,
                    "throttle_time_ms": st.throttle_ms,
                }
            )
        errors = [
            {"api": api, "code": code, "name": error_name(code), "count": n}
            for (api, code), n in sorted(
                self.errors.items(), key=lambda kv: (-kv[1], str(kv[0][0]), kv[0][1])
            )
        ]
        topics = sorted(set(topic_producers) | set(topic_consumers))
        return {
            "exchanges": self.exchanges,
            "latency_ms": _lat(sorted(all_lat)),
            "apis": apis,
            "errors": errors,
            "clients": [
                {
                    "client_id": c.client_id,
                    "software_name": c.software_name,
                    "software_version": c.software_version,
                    "addresses": sorted(c.addresses),
                    "connections": sorted(c.connections),
                    "requests": c.requests,
                }
                for c in self.clients.values()
            ],
            "topics": [
                {
                    "topic": t,
                    "producers": sorted(topic_producers.get(t, ())),
                    "consumers": sorted(topic_consumers.get(t, ())),
                }
                for t in topics
            ],
            "connections": [
                {**c, "client_ids": sorted(c["client_ids"])}  # type: ignore[call-overload]
                for c in self.connections.values()
            ],
        }


def _lat(v: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "p99": percentile(v, 99),
        "max": v[-1] if v else None,
    }
