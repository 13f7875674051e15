"""`kanalyze stats` as text: one aligned table per statistic, drawn from the JSON rows."""

from __future__ import annotations

from kanalyze.views.table import Col, Out, clock, count, dash, ms, nbytes, seconds, stamp


def _apis(v: object) -> str:
    if not isinstance(v, list):
        return "-"
    return ", ".join(f"{a['api']} v{'/'.join(str(x) for x in a['versions'])}" for a in v)


def _ids(v: object) -> str:
    return dash(v)


def _expected(v: object) -> str:
    return "expected" if v else "error"


CONV = (
    Col("conn", "connection", count),
    Col("client", "client", right=False),
    Col("broker", "broker", right=False),
    Col("client id", "client_ids", _ids, right=False),
    Col("software", "software", _ids, right=False),
    Col("first", "start", clock),
    Col("duration", "duration_s", seconds),
    Col("requests", "requests", count),
    Col("frames →", "frames_to_broker", count),
    Col("bytes →", "bytes_to_broker", nbytes),
    Col("frames ←", "frames_to_client", count),
    Col("bytes ←", "bytes_to_client", nbytes),
    Col("ended", "ended", right=False),
)

TOPICS = (
    Col("topic", "topic", right=False),
    Col("part", "partition", count),
    Col("produced", "produced_records", count),
    Col("prod bytes", "produced_bytes", nbytes),
    Col("fetched", "fetched_records", count),
    Col("fetch bytes", "fetched_bytes", nbytes),
    Col("first off", "first_offset", count),
    Col("last off", "last_offset", count),
    Col("HW", "high_watermark", count),
    Col("producers", "producers", _ids, right=False),
    Col("consumers", "consumers", _ids, right=False),
)

CLIENTS = (
    Col("client id", "client_id", right=False),
    Col("software", "software", _ids, right=False),
    Col("addresses", "addresses", _ids, right=False),
    Col("conns", "connections", count),
    Col("requests", "requests", count),
    Col("errors", "errors", count),
    Col("expected", "expected_errors", count),
    Col("APIs and versions", "apis", _apis, right=False),
)

LATENCY = (
    Col("API", "api", right=False),
    Col("ver", "api_version", count),
    Col("count", "count", count),
    Col("p50", "p50_ms", ms),
    Col("p90", "p90_ms", ms),
    Col("p99", "p99_ms", ms),
    Col("max", "max_ms", ms),
)

ERRORS = (
    Col("error", "error", right=False),
    Col("code", "code", count),
    Col("API", "api", right=False),
    Col("count", "count", count),
    Col("clients", "clients", _ids, right=False),
    Col("frames", "frames", _ids, right=False),
)

IO = (
    Col("from", "start_s", seconds),
    Col("to", "end_s", seconds),
    Col("requests", "requests", count),
    Col("req bytes", "request_bytes", nbytes),
    Col("rsp bytes", "response_bytes", nbytes),
    Col("produced", "produced_records", count),
    Col("fetched", "fetched_records", count),
    Col("errors", "errors", count),
    Col("p50", "p50_ms", ms),
    Col("max", "max_ms", ms),
)

IO_BY = (
    Col("from", "start_s", seconds),
    Col("to", "end_s", seconds),
    Col("key", "key", right=False),
    Col("requests", "requests", count),
    Col("produced", "produced_records", count),
    Col("prod bytes", "produced_bytes", nbytes),
    Col("fetched", "fetched_records", count),
    Col("fetch bytes", "fetched_bytes", nbytes),
    Col("errors", "errors", count),
)


def render(doc: dict, out: Out) -> None:
    cap = doc["capture"]
    out.line(f"Capture: {', '.join(doc['files'])}")
    out.line(
        f"  {stamp(cap['first'])} to {stamp(cap['last'])}  ({seconds(cap['duration_s'])}, "
        f"{count(cap['packets'])} packets, {count(cap['exchanges'])} exchanges)"
    )
    for note in cap["notes"]:
        out.line(f"  note: {note}", style="yellow")
    t = doc["tables"]
    if "conv" in t:
        rows = t["conv"]
        other = [r for r in rows if not r["kafka"]]
        out.line()
        out.heading("Connections (conv)")
        out.table(CONV, [r for r in rows if r["kafka"]])
        if other:
            out.line(
                f"  and {len(other)} TCP connection{'s' if len(other) != 1 else ''} that carried "
                "no Kafka exchange (in --json)"
            )
    if "topics" in t:
        out.line()
        out.heading("Topics and partitions (topics)")
        out.table(TOPICS, t["topics"], empty="(no Produce or Fetch traffic)")
    if "clients" in t:
        out.line()
        out.heading("Clients (clients)")
        out.table(CLIENTS, t["clients"])
    if "latency" in t:
        rows = t["latency"]
        out.line()
        out.heading("Latency by API and version (latency)")
        out.table(LATENCY, [r for r in rows if r["kind"] == "response"])
        waits = [r for r in rows if r["kind"] != "response"]
        if waits:
            out.line()
            out.heading(
                "Waits by design (long-poll Fetch, JoinGroup/SyncGroup rebalance): not slowness"
            )
            out.table((LATENCY[0], Col("kind", "kind", right=False), *LATENCY[1:]), waits)
    if "errors" in t:
        rows = t["errors"]
        out.line()
        out.heading("Errors (errors)")
        out.table(ERRORS, [r for r in rows if not r["expected"]], empty="(no errors)")
        exp = [r for r in rows if r["expected"]]
        if exp:
            out.line()
            out.heading("Expected in the normal flow (not failures)")
            out.table((*ERRORS[:4], Col("why", "reason", right=False)), exp)
    if "io" in t:
        out.line()
        out.heading(f"Traffic per {seconds(doc['io_interval_s'])} (io)")
        out.table(IO, t["io"])
    if "io_by" in t:
        by = t["io_by"][0]["by"] if t["io_by"] else "key"
        out.line()
        out.heading(f"Traffic per {seconds(doc['io_interval_s'])} by {by} (io)")
        head = "topic" if by == "topic" else "client id"
        out.table(
            tuple(Col(head, c.key, right=False) if c.key == "key" else c for c in IO_BY),
            t["io_by"],
            empty="(no traffic)",
        )
