"""`kanalyze report` as text an operator can read at 3 a.m.: the capture window first, then the
findings by severity with the frames to open, then one headed section per subject, every
number with its unit, every list joined (never a Python repr).

Drawn from the report document (docs/report.schema.json) plus what the text adds: the
latency table with Fetch long-polls and rebalance waits apart (`kanalyze.views.stats`) and
the capture's packets and damage notes. `--json` is untouched by this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dissectors.context import DecodeContext
from kanalyze.analysis.report import analyze
from kanalyze.bodies import Bodies, BodyDecoder, exchange_facts
from kanalyze.correlation import Exchange
from kanalyze.session import Session
from kanalyze.views.expected import expected_error
from kanalyze.views.source import BodySource
from kanalyze.views.stats import Exch, LatencyCollector
from kanalyze.views.table import Col, Out, count, dash, ms, nbytes, seconds, stamp
from kanalyze.views.window import capture_notes

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
MAX_FRAMES = 8
TIMELINE_ROWS = 12


def frames(v: object) -> str:
    if not isinstance(v, list) or not v:
        return "-"
    head = ", ".join(str(x) for x in v[:MAX_FRAMES])
    return head + (f" (+{len(v) - MAX_FRAMES} more)" if len(v) > MAX_FRAMES else "")


def _window(doc: dict, capture: dict | None, out: Out) -> None:
    t = doc.get("time") or {}
    first, last = t.get("first"), t.get("last")
    st = doc["stats"]
    out.heading("Capture")
    out.line(f"  files:       {dash(doc.get('files'))}")
    dur = None if first is None or last is None else last - first
    out.line(f"  window:      {stamp(first)} to {stamp(last)}  ({seconds(dur)})")
    packets = f"{count(capture['packets'])} packets, " if capture else ""
    out.line(
        f"  traffic:     {packets}{count(st['exchanges'])} exchanges on "
        f"{count(len(st['connections']))} connections"
    )
    notes = (capture or {}).get("notes") or []
    for n in notes:
        out.line(f"  note:        {n}", style="yellow")
    if capture and not notes:
        out.line("  integrity:   no capture damage, no bytes lost in gaps")


FINDINGS = (
    Col("severity", "severity", lambda v: str(v).upper(), right=False),
    Col("kind", "kind", right=False),
    Col("what", "message", right=False),
    Col("frames", "frames", frames, right=False),
)


def _findings(doc: dict, out: Out) -> None:
    items = doc["findings"]
    counts = {s: sum(1 for f in items if f["severity"] == s) for s in ("error", "warning", "info")}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    out.heading(f"Findings ({summary or 'none'})")
    if not items:
        out.line("  nothing to report: no anomaly found")
        return
    out.table(FINDINGS, items, row_style=lambda f: SEVERITY_STYLE.get(str(f["severity"]), ""))


LATENCY = (
    Col("API", "api", right=False),
    Col("ver", "api_version", count),
    Col("kind", "kind", right=False),
    Col("count", "count", count),
    Col("p50", "p50_ms", ms),
    Col("p90", "p90_ms", ms),
    Col("p99", "p99_ms", ms),
    Col("max", "max_ms", ms),
)

API_BYTES = (
    Col("API", "api", right=False),
    Col("ver", "api_version", count),
    Col("count", "count", count),
    Col("requests", "request_bytes", nbytes),
    Col("responses", "response_bytes", nbytes),
    Col("throttled", "throttled_responses", count),
)


def _traffic(doc: dict, latency: list[dict] | None, out: Out) -> None:
    st = doc["stats"]
    out.heading("Latency by API (waits by design apart: Fetch long-polls, group rebalances)")
    if latency is not None:
        rows = sorted(
            latency, key=lambda r: (r["kind"] != "response", r["api_key"], r["api_version"])
        )
        out.table(LATENCY, rows, empty="(no answered request)")
    else:
        out.table(
            LATENCY,
            [
                {
                    "api": a["api"] or "(request not captured)",
                    "api_version": a["api_version"],
                    "kind": "all",
                    "count": a["count"],
                    **{f"{k}_ms": v for k, v in a["latency_ms"].items()},
                }
                for a in st["apis"]
            ],
        )
    out.line()
    out.heading("Bytes by API")
    out.table(API_BYTES, [{**a, "api": a["api"] or "(request not captured)"} for a in st["apis"]])


ERRORS = (
    Col("error", "name", right=False),
    Col("API", "api", right=False),
    Col("count", "count", count),
    Col("", "note", lambda v: str(v or ""), right=False),
)


def _errors(doc: dict, out: Out) -> None:
    st = doc["stats"]
    keys = {a["api"]: a["api_key"] for a in st["apis"]}
    # the errors are counted per API, not per version: judge by the newest version in use
    newest: dict[str, int] = {}
    for a in st["apis"]:
        if isinstance(a.get("api_version"), int):
            newest[a["api"]] = max(newest.get(a["api"], -1), a["api_version"])
    rows = []
    for e in st["errors"]:
        why = expected_error(keys.get(e["api"]), e["code"], None, newest.get(e["api"]))
        rows.append({**e, "expected": why is not None, "note": f"expected: {why}" if why else ""})
    rows.sort(key=lambda r: r["expected"])
    out.heading("Errors in responses")
    out.table(ERRORS, rows, empty="(no error codes)")


def _replication(doc: dict, out: Out) -> None:
    out.heading("Replication (per partition, as last seen)")
    parts = doc["replication"]
    if not parts:
        out.line("  (no Produce or Fetch traffic)")
        return
    rows = []
    for p in parts:
        fin = p["final"] or {}
        hl = p["hw_advance_latency_ms"]
        fol = fin.get("followers") or {}
        rows.append(
            {
                "partition": f"{p['topic']}-{p['partition']}",
                "leo": fin.get("leader_leo"),
                "hw": fin.get("high_watermark"),
                "start": fin.get("log_start_offset"),
                "lso": fin.get("last_stable_offset"),
                "isr": fin.get("isr"),
                "followers": [
                    f"{k}: LEO {dash(v['leo'])}, lag {dash(v['lag_records'])} records / "
                    f"{ms(v['lag_ms'])}"
                    for k, v in fol.items()
                ],
                "hw_p50": hl["p50"] if hl["count"] else None,
                "hw_max": hl["max"] if hl["count"] else None,
                "sources": p["sources"],
            }
        )
    out.table(
        (
            Col("partition", "partition", right=False),
            Col("LEO", "leo", count),
            Col("HW", "hw", count),
            Col("log start", "start", count),
            Col("LSO", "lso", count),
            Col("ISR", "isr", right=False),
            Col("followers", "followers", right=False),
            Col("HW advance p50", "hw_p50", ms),
            Col("max", "hw_max", ms),
            Col("seen in", "sources", right=False),
        ),
        rows,
    )
    for p in parts:
        tl = p["timeline"]
        if not tl:
            continue
        out.line()
        more = (
            f", last {TIMELINE_ROWS} of {len(tl)} (all in --json)"
            if len(tl) > TIMELINE_ROWS
            else ""
        )
        stated = (p["final"] or {}).get("stated")
        if stated:  # the ISR as the cluster stated it (metadata log, AlterPartition)
            out.line(
                f"  {p['topic']}-{p['partition']} stated ({stated.get('source')}): "
                f"ISR {stated.get('isr')}, leader {dash(stated.get('leader'))}, leader epoch "
                f"{dash(stated.get('leader_epoch'))}, partition epoch "
                f"{dash(stated.get('partition_epoch'))}"
            )
        out.line(f"  {p['topic']}-{p['partition']} timeline{more}:")
        out.table(
            (
                Col("frame", "frame", count),
                Col("event", "event", right=False),
                Col("LEO", "leader_leo", count),
                Col("HW", "high_watermark", count),
                Col("LSO", "last_stable_offset", count),
                Col("followers (LEO/remote/HW)", "fol", right=False),
                Col("ISR", "isr", right=False),
            ),
            [
                {
                    **e,
                    "fol": [
                        f"{k}: {dash(v['leo'])}/{dash(v['remote_leo'])}/{dash(v['hw'])}"
                        for k, v in e["followers"].items()
                    ],
                }
                for e in tl[-TIMELINE_ROWS:]
            ],
        )


def _producers(doc: dict, out: Out) -> None:
    out.heading("Producers")
    rows = []
    for pr in doc["producers"]:
        ident = (
            f"pid {pr['producer_id']} epoch {pr['producer_epoch']}"
            if pr["idempotent"]
            else "not idempotent"
        )
        errs = ", ".join(f"{k} x{v}" for k, v in (pr["errors"] or {}).items())
        for k, v in pr["partitions"].items():
            seq = (
                f"{v['first_sequence']}..{v['last_sequence']}"
                if v["first_sequence"] is not None
                else None
            )
            rows.append(
                {
                    "client": pr["client_id"],
                    "identity": ident,
                    "acks": pr["acks"],
                    "inflight": pr["max_in_flight"],
                    "txn": pr["transactional_id"],
                    "partition": k,
                    "seq": seq,
                    "batches": v["batches"],
                    "records": v["records"],
                    "dup": v["duplicates"],
                    "gaps": v["gaps"],
                    "retries": v["retries"],
                    "errors": errs,
                }
            )
    out.table(
        (
            Col("client", "client", right=False),
            Col("identity", "identity", right=False),
            Col("acks", "acks", dash),
            Col("in flight", "inflight", count),
            Col("transactional id", "txn", right=False),
            Col("partition", "partition", right=False),
            Col("sequences", "seq", right=False),
            Col("batches", "batches", count),
            Col("records", "records", count),
            Col("dup", "dup", count),
            Col("gaps", "gaps", count),
            Col("retries", "retries", count),
            Col("errors", "errors", right=False),
        ),
        rows,
        empty="(no Produce traffic)",
    )


def _transactions(doc: dict, out: Out) -> None:
    out.heading("Transactions")
    out.table(
        (
            Col("transactional id", "transactional_id", right=False),
            Col("pid", "producer_id", count),
            Col("epoch", "producer_epoch", count),
            Col("outcome", "outcome", lambda v: str(v).upper(), right=False),
            Col("partitions", "partitions", right=False),
            Col(
                "states",
                "states",
                lambda v: " -> ".join(v) if isinstance(v, list) else dash(v),
                right=False,
            ),
            Col("markers", "control_records", right=False),
        ),
        doc["transactions"],
        empty="(no transactions)",
    )


def _groups(doc: dict, out: Out) -> None:
    out.heading("Consumer groups")
    if not doc["groups"]:
        out.line("  (no consumer group traffic)")
        return
    for g in doc["groups"]:
        out.line(f"  group {g['group_id']} ({g['protocol']})")
        out.table(
            (
                Col("generation", "generation_id", count),
                Col("members", "members", count),
                Col("assignor", "assignor", right=False),
                Col("rebalance took", "duration_ms", ms),
            ),
            g["rebalances"],
            empty="(no rebalance seen)",
        )
        out.line()
        out.table(
            (
                Col("member", "client_id", right=False),
                Col("generations", "generations", right=False),
                Col("assignment", "assignment", right=False),
                Col("left", "left", lambda v: "left" if v else ""),
            ),
            g["members"],
            empty="(no member seen)",
        )
        out.line()
        out.table(
            (
                Col("partition", "key", right=False),
                Col("committed", "committed", count),
                Col("HW", "high_watermark", count),
                Col("lag (records)", "lag", count),
                Col("status", "status", right=False),
            ),
            [{"key": k, **v} for k, v in g["lag"].items()],
            empty="(no commit seen)",
        )
        out.line()


def _who(doc: dict, out: Out) -> None:
    st = doc["stats"]
    out.heading("Clients")
    out.table(
        (
            Col("client id", "client_id", right=False),
            Col("software", "sw", right=False),
            Col("addresses", "addresses", right=False),
            Col("connections", "nconn", count),
            Col("requests", "requests", count),
        ),
        [
            {
                **c,
                "sw": " ".join(x for x in (c["software_name"], c["software_version"]) if x) or None,
                "nconn": len(c["connections"]),
            }
            for c in st["clients"]
        ],
    )
    out.line()
    out.heading("Topics")
    out.table(
        (
            Col("topic", "topic", right=False),
            Col("produced by", "producers", right=False),
            Col("consumed by", "consumers", right=False),
        ),
        st["topics"],
        empty="(no topic seen)",
    )


def render(
    doc: dict, out: Out, latency: list[dict] | None = None, capture: dict | None = None
) -> None:
    """The whole report; `latency` rows from `LatencyCollector`, `capture` = {packets, notes}."""
    _window(doc, capture, out)
    for section in (
        lambda: _findings(doc, out),
        lambda: _traffic(doc, latency, out),
        lambda: _errors(doc, out),
        lambda: _replication(doc, out),
        lambda: _producers(doc, out),
        lambda: _transactions(doc, out),
        lambda: _groups(doc, out),
        lambda: _who(doc, out),
    ):
        out.line()
        section()


def text_report(session: Session, timeline_cap: int, stall_ms: float, out: Out,
                ctx: DecodeContext | None = None) -> None:
    """Run the report over `session` and write its text. The text also shows latency with
    long-polls and rebalance waits apart: one more reader of the same exchanges (Fetch
    requests and JoinGroup responses decoded a second time, cheap next to the analysis)."""
    latency = LatencyCollector()
    source = BodySource()

    def one(ex: Exchange) -> None:
        source.decoder.learn(ex)
        if ex.latency_ns is not None:
            latency.feed(Exch(ex, Bodies(ex, source.decoder), exchange_facts))

    def tee(exchanges: Iterable[Exchange]) -> Iterator[Exchange]:
        for ex in exchanges:
            one(ex)
            yield ex

    def tee_decoded(decoder: BodyDecoder) -> Iterator[Bodies]:
        """`tee` over a `--jobs` run's bodies: the latency kind comes worked out in the ranges
        (`latency_kind`); bodies decoded here (the run fell back to one process) as `tee`."""
        for b in session.decoded(decoder, codes=True, latency=True):  # type: ignore[attr-defined]
            if hasattr(b, "latency_kind"):
                if b.latency_kind is not None:
                    latency.add(b.ex, b.latency_kind)
            else:
                one(b.ex)
            yield b

    if getattr(type(session), "decoded", None) is None:
        doc = analyze(tee(session.exchanges()), ctx, timeline_cap=timeline_cap, stall_ms=stall_ms)
    else:
        doc = analyze((), ctx, timeline_cap=timeline_cap, stall_ms=stall_ms, decoded=tee_decoded)
        if session.diverged:  # type: ignore[attr-defined]
            text_report(session.single(), timeline_cap, stall_ms, out, ctx)  # type: ignore[attr-defined]
            return
    doc["files"] = list(session.paths)
    capture = {"packets": session.capture.packets, "notes": capture_notes(session)}
    render(doc, out, latency.rows(), capture)
