"""`kanalyze metadata`: brokers, controller, topics, partitions, leaders, replicas and ISR as
the capture last saw them in Metadata responses, kcat -L style (docs/metadata.md)."""

from __future__ import annotations

import argparse
import json
import sys

from kanalyze.commands.common import add_input_arguments, engine_options, report_capture_problems
from kanalyze.session import Session
from kanalyze.views.metadata import METADATA, ClusterView, render
from kanalyze.views.progress import for_command
from kanalyze.views.source import BodySource
from kanalyze.views.table import Out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "metadata",
        help="brokers, topics, partitions, leaders, ISR (kcat -L style)",
        description=__doc__,
    )
    add_input_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document (docs/metadata.md)")
    p.set_defaults(run=run)


def build(session: Session) -> dict[str, object]:
    source = BodySource()
    view = ClusterView()
    for ex in session.exchanges():
        if ex.api_key == METADATA and ex.response is not None:
            view.feed(ex, source.bodies(ex).response)
        else:
            source.decoder.learn(ex)
    return view.to_json(list(session.paths))


def run(args: argparse.Namespace) -> int:
    session = Session(args.files, engine_options(args), progress=for_command(streams_stdout=False))
    doc = build(session)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        render(doc, Out())
    report_capture_problems(session)
    return 0
