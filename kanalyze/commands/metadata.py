"""`kanalyze metadata`: brokers, controller, topics, partitions, leaders, replicas and ISR as
the capture last saw them in Metadata responses, kcat -L style (docs/metadata.md)."""

from __future__ import annotations

import argparse
import json
import sys

from dissectors.context import DecodeContext
from kanalyze.commands.common import (
    add_input_arguments,
    engine_options,
    report_capture_problems,
    topic_names_of,
)
from kanalyze.query.cli import add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.metadata import METADATA, ClusterView, render
from kanalyze.views.progress import for_command
from kanalyze.views.source import BodySource
from kanalyze.views.table import Out

EPILOG = """\
examples (filters: docs/filters.md; only the selected Metadata responses are read):
  kanalyze metadata cap.pcap -Y 'broker.ip == "10.0.0.5"'
  kanalyze metadata cap.pcap --to +30s
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "metadata",
        help="brokers, topics, partitions, leaders, ISR (kcat -L style)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_filter_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document (docs/metadata.md)")
    p.set_defaults(run=run)


def build(session: Session, ctx: DecodeContext | None = None) -> dict[str, object]:
    """The cluster as the (selected) Metadata responses describe it; `ctx` shares the topic
    names a selection learns from every exchange."""
    source = BodySource(ctx)
    view = ClusterView()
    for ex in session.exchanges():
        if ex.api_key == METADATA and ex.response is not None:
            view.feed(ex, source.bodies(ex).response)
        else:
            source.decoder.learn(ex)
    return view.to_json(list(session.paths))


def run(args: argparse.Namespace) -> int:
    base = Session(args.files, engine_options(args), progress=for_command(streams_stdout=False))
    ctx = DecodeContext(topic_names=topic_names_of(args))
    doc = build(selected_session(args, base, ctx, learn=True), ctx)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        render(doc, Out())
    report_capture_problems(base)
    return 0
