"""`kanalyze report`: replication HW progress, delivery semantics, transactions, consumer groups,
stats and findings (docs/report.md; --json follows docs/report.schema.json)."""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from dissectors.context import DecodeContext
from kanalyze.analysis.report import analyze
from kanalyze.commands.common import (
    add_input_arguments,
    add_jobs_argument,
    engine_options,
    explain_nothing,
    positive_int,
    topic_names_of,
    with_jobs,
)
from kanalyze.query.cli import FILTER_EPILOG, add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.progress import for_command
from kanalyze.views.report_text import text_report
from kanalyze.views.table import Out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="replication, delivery semantics, transactions, groups, stats, findings",
        description=__doc__,
        epilog=FILTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_filter_arguments(p)
    add_jobs_argument(p)
    p.add_argument(
        "--json", action="store_true", help="one JSON document (docs/report.schema.json)"
    )
    p.add_argument(
        "--timeline-cap",
        type=positive_int,
        default=5000,
        metavar="N",
        help="keep the newest N timeline entries per partition (default 5000)",
    )
    p.add_argument(
        "--stall-ms",
        type=positive_int,
        default=10_000,
        metavar="MS",
        help="report an HW stalled this long while the LEO advances (default 10000)",
    )
    p.add_argument(
        "--html",
        metavar="OUT",
        default=None,
        help="write the report with charts to OUT, one self-contained HTML file, "
        "instead of the text (the html extra; docs/dashboards.md)",
    )
    p.set_defaults(run=run)


def build(
    session: Session,
    timeline_cap: int = 5000,
    stall_ms: float = 10_000.0,
    ctx: DecodeContext | None = None,
    observers: tuple = (),
) -> dict[str, object]:
    if observers or getattr(type(session), "decoded", None) is None:
        doc = analyze(session.exchanges(), ctx, timeline_cap=timeline_cap, stall_ms=stall_ms,
                      observers=observers)
    else:  # --jobs: bodies decoded in the ranges
        doc = analyze((), ctx, timeline_cap=timeline_cap, stall_ms=stall_ms,
                      decoded=partial(session.decoded, codes=True))  # type: ignore[attr-defined]
        if session.diverged:  # type: ignore[attr-defined]
            return build(session.single(), timeline_cap, stall_ms, ctx)  # type: ignore[attr-defined]
    doc["files"] = list(session.paths)
    return doc


def run(args: argparse.Namespace) -> int:
    base = Session(args.files, engine_options(args), progress=for_command(False))
    ctx = DecodeContext(topic_names=topic_names_of(args))
    session = selected_session(args, base, ctx)  # filters name topics with --topic-ids too
    if session is base:  # filters: one process
        session = base = with_jobs(base, args.jobs)
    if args.html:
        from kanalyze.export.html_report import run_html

        return run_html(args, session, build, ctx)
    if args.json:
        doc = build(session, args.timeline_cap, args.stall_ms, ctx)
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return explain_nothing(base)
    text_report(session, args.timeline_cap, args.stall_ms, Out(), ctx)
    return explain_nothing(base)
