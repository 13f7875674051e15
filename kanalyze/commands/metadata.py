"""`kanalyze metadata`: brokers, controller, topics, partitions, leaders, replicas and ISR as
the capture last saw them in Metadata responses and KRaft metadata-log records, kcat -L style
(docs/stats.md)."""

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
from kanalyze.correlation import Message
from kanalyze.query.cli import add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.metadata import METADATA, ClusterView, render
from kanalyze.views.metadata_log import LogFolder, may_carry_log
from kanalyze.views.progress import for_command
from kanalyze.views.source import BodySource
from kanalyze.views.stats_common import FETCH, PRODUCE
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
    p.add_argument("--json", action="store_true", help="one JSON document (docs/stats.md)")
    p.set_defaults(run=run)


def build(session: Session, ctx: DecodeContext | None = None) -> dict[str, object]:
    """The cluster as the (selected) Metadata responses and KRaft metadata-log records
    describe it; `ctx` shares the topic names a selection learns from every exchange."""
    source = BodySource(ctx)
    view = ClusterView()
    log = LogFolder(view)
    for ex in session.exchanges():
        if ex.api_key == METADATA and ex.response is not None:
            view.feed(ex, source.bodies(ex).response)
            continue
        source.decoder.learn(ex)
        # the log's records: in Fetch responses (brokers fetch it), or Produce requests
        req, resp = ex.request, ex.response
        if ex.api_key == FETCH and req and resp and may_carry_log(req.pdu.data):
            log.feed(source.bodies(ex).response, True, resp.pdu.last_pkt, _ts(resp))
        elif ex.api_key == PRODUCE and req and may_carry_log(req.pdu.data):
            log.feed(source.bodies(ex).request, False, req.pdu.last_pkt, _ts(req))
    return view.to_json(list(session.paths))


def _ts(msg: Message) -> float:
    return round(msg.pdu.last_ts / 1e9, 6)


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
