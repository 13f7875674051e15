"""`kanalyze report`: replication HW progress, delivery semantics, transactions, consumer groups,
stats and findings (docs/report.md; --json follows docs/report.schema.json)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from kanalyze.analysis.report import analyze
from kanalyze.bodies import Bodies, exchange_facts
from kanalyze.commands.common import add_input_arguments, engine_options, positive_int
from kanalyze.correlation import Exchange
from kanalyze.session import Session
from kanalyze.views.progress import for_command
from kanalyze.views.report_text import render
from kanalyze.views.source import BodySource
from kanalyze.views.stats import Exch, LatencyCollector
from kanalyze.views.table import Out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="replication, delivery semantics, transactions, groups, stats, findings",
                       description=__doc__)
    add_input_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document (docs/report.schema.json)")
    p.add_argument("--timeline-cap", type=positive_int, default=5000, metavar="N",
                   help="keep the newest N timeline entries per partition (default 5000)")
    p.add_argument("--stall-ms", type=positive_int, default=10_000, metavar="MS",
                   help="report an HW stalled this long while the LEO advances (default 10000)")
    p.set_defaults(run=run)


def build(session: Session, timeline_cap: int = 5000, stall_ms: float = 10_000.0) -> dict[str, object]:
    doc = analyze(session.exchanges(), timeline_cap=timeline_cap, stall_ms=stall_ms)
    doc["files"] = list(session.paths)
    return doc


def run(args: argparse.Namespace) -> int:
    session = Session(args.files, engine_options(args), progress=for_command(False))
    if args.json:
        doc = build(session, args.timeline_cap, args.stall_ms)
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    # the text also shows latency with long-polls and rebalance waits apart: one more reader
    # of the same exchanges (Fetch requests and JoinGroup responses decoded again)
    latency = LatencyCollector()
    source = BodySource()

    def tee(exchanges: Iterator[Exchange]) -> Iterator[Exchange]:
        for ex in exchanges:
            source.decoder.learn(ex)
            if ex.latency_ns is not None:
                latency.feed(Exch(ex, Bodies(ex, source.decoder), exchange_facts))
            yield ex

    doc = analyze(tee(session.exchanges()), timeline_cap=args.timeline_cap, stall_ms=args.stall_ms)
    doc["files"] = list(session.paths)
    render(doc, Out(), latency.rows(), capture_notes(session))
    return 0


def capture_notes(session: Session) -> dict[str, object]:
    """Packets read and what limits the capture's truth: damage, skipped and lost bytes."""
    notes = [f"{name}: offset {d.offset}: {d.message} (the capture ends early)"
             for name, d in session.capture.diagnostics]
    es = session.engine.stats if session.engine is not None else None
    if es is not None:
        lost = es.client.gaps + es.broker.gaps
        skipped = es.client.skipped + es.broker.skipped
        if lost:
            notes.append(f"{lost:,} bytes never captured ({es.client.gap_count + es.broker.gap_count} gaps): "
                         "exchanges there are incomplete")
        if skipped:
            notes.append(f"{skipped:,} bytes skipped while resynchronizing on Kafka frames")
    return {"packets": session.capture.packets, "notes": notes}
