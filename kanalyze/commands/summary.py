"""`kanalyze summary`: exchanges per api/version, statuses, errors, latency, byte accounting."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from dissectors import DecodeContext, JsonWalk
from kanalyze.analysis.summary import Summary
from kanalyze.bodies import BodyDecoder, Records, error_codes
from kanalyze.commands.common import (
    add_input_arguments,
    add_jobs_argument,
    engine_options,
    explain_nothing,
    topic_names_of,
    with_jobs,
)
from kanalyze.correlation import Exchange
from kanalyze.query.cli import FILTER_EPILOG, add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.progress import for_command


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "summary",
        help="counts, statuses, errors, latency and byte accounting",
        description=__doc__,
        epilog=FILTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_filter_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
    add_jobs_argument(p)
    p.set_defaults(run=run)


def summary_inputs(names: dict[str, str]) -> Callable[[Exchange], tuple]:
    """Per exchange, what `Summary.add` reads: the exchange without its frames, the error
    codes of its response and the diagnostics of decoding it (bodies only: no records).
    `names`: the decoder's topic-name registry (a digest of `--jobs`, which runs it in the
    ranges' workers: `RangeSession.digests`)."""
    bodies = BodyDecoder(DecodeContext(topic_names=names), records=Records.NONE)

    def digest(ex: Exchange) -> tuple:
        codes: list[int] = []
        diags: list[str] = []
        if ex.response is not None and ex.api_key is not None and ex.api_key >= 0:
            walk = JsonWalk()  # response bodies only: errors, and the decoding limits hit
            codes = error_codes(bodies.json(ex, ex.response, False, walk))
            diags = [str(d["code"]) for d in walk.diagnostics]
        return ex, codes, diags

    return digest


def build(session: Session) -> dict[str, object]:
    """Run the session and return the summary document."""
    summary = Summary()
    digests = getattr(session, "digests", None)  # --jobs: computed in the ranges
    rows = digests(summary_inputs) if digests else map(summary_inputs({}), session.exchanges())
    for ex, codes, diags in rows:
        summary.add(ex, codes, diags)
    assert session.engine is not None
    return summary.to_json(session.engine.stats, session.capture)


def run(args: argparse.Namespace) -> int:
    base = Session(args.files, engine_options(args), progress=for_command(False))
    session = selected_session(args, base, DecodeContext(topic_names=topic_names_of(args)))
    if session is base and not args.json:  # filters, and the peaks of --json: one process
        session = base = with_jobs(base, args.jobs)
    doc = build(session)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(doc))
    return explain_nothing(base)


def _ms(v: object) -> str:
    return "-" if v is None else f"{v:.3f}"


def render(doc: dict) -> str:
    lines = [
        f"files: {', '.join(doc['files'])}   packets: {doc['packets']}   exchanges: "
        f"{doc['exchanges']}"
    ]
    st = doc["status"]
    lines.append("status: " + ", ".join(f"{k} {v}" for k, v in st.items()))
    lat = doc["latency_ms"]
    lines.append(f"latency ms: p50 {_ms(lat['p50'])}  p99 {_ms(lat['p99'])}  max {_ms(lat['max'])}")
    c = doc["connections"]
    lines.append(
        f"connections: {c['total']} ({c['kafka']} Kafka, {c['non_kafka']} other, {c['empty']} "
        "without payload)"
    )
    lines.append("")
    lines.append(f"{'api':<28}{'ver':>4}{'count':>9}{'p50 ms':>11}{'p99 ms':>11}{'max ms':>11}")
    for a in doc["apis"]:
        name = a["api"] or "(request not captured)"
        ver = "" if a["api_version"] is None else str(a["api_version"])
        la = a["latency_ms"]
        lines.append(
            f"{name:<28}{ver:>4}{a['count']:>9}{_ms(la['p50']):>11}{_ms(la['p99']):>11}{_ms(la['max']):>11}"
        )
    if doc["errors"]:
        lines.append("")
        lines.append("errors:")
        lines.extend(
            f"  {e['count']:>7}  {e['name']} ({e['code']}) in {e['api']}" for e in doc["errors"]
        )
    lines.append("")
    lines.append(
        f"{'bytes':<18}{'stream':>12}{'decoded':>12}{'skipped':>10}{'gaps':>10}{'retrans':>10}"
    )
    for side in ("client_to_broker", "broker_to_client"):
        b = doc["bytes"][side]
        lines.append(
            f"{side:<18}{b['stream']:>12}{b['decoded']:>12}{b['skipped']:>10}{b['gaps']:>10}{b['retransmitted']:>10}"
        )
    lines.append(f"non-Kafka TCP bytes: {doc['bytes']['non_kafka']}")
    if doc["diagnostics"]:
        lines.append("")
        lines.append("diagnostics: " + ", ".join(f"{k} {v}" for k, v in doc["diagnostics"].items()))
    hit = {k: v for k, v in doc["limits"].items() if v}
    if hit:
        lines.append("")
        lines.append(
            "limits hit: " + ", ".join(f"{k} {v}" for k, v in hit.items()) + " (see docs/limits.md)"
        )
    ev = doc["stream_events"]
    if ev:
        lines.append("")
        lines.append(f"stream events ({len(ev)}):")
        lines.extend(
            f"  conn {e['connection']} {e['side']} frame {e['frame']}: {e['code']}: {e['message']}"
            for e in ev[:20]
        )
    lines.extend(
        f"capture: {d['file']}: offset {d['offset']}: {d['message']}"
        for d in doc["capture_diagnostics"]
    )
    snap = doc.get("snaplen")
    if snap:
        lines.append("")
        lines.append(
            f"capture truncated to {snap['bytes_per_packet']} bytes per packet (snaplen): "
            f"{snap['packets_cut']} packets "
            f"lost {snap['payload_bytes_not_captured']} payload bytes; partial: {snap['partial']}"
        )
    return "\n".join(lines) + "\n"
