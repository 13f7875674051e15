"""`kanalyze stats`: statistics tables as Wireshark's Statistics menu would show them for
Kafka: connections, topics and partitions, clients, latency, errors, traffic over time
(docs/stats.md; --json follows docs/stats.schema.json)."""

from __future__ import annotations

import argparse
import json
import sys

from dissectors.context import DecodeContext
from kanalyze.commands.common import (
    add_input_arguments,
    add_jobs_argument,
    engine_options,
    report_capture_problems,
    topic_names_of,
    with_jobs,
)
from kanalyze.query.cli import add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.progress import for_command
from kanalyze.views.stats import TABLES, IoCollector, build, parse_interval
from kanalyze.views.stats_text import render
from kanalyze.views.table import Out


def table_choice(text: str) -> tuple[str, object]:
    """-z NAME[,ARG...]: NAME one of TABLES; io takes an interval and/or a split
    (io,1s  io,500ms,topic  io,client)."""
    name, _, arg = text.partition(",")
    name = name.strip()
    if name not in TABLES:
        raise argparse.ArgumentTypeError(f"unknown statistic {name!r} (known: {', '.join(TABLES)})")
    if name == "io":
        interval: float | None = None
        by: str | None = None
        for part in filter(None, (p.strip() for p in arg.split(","))):
            if part in IoCollector.BY and by is None:
                by = part
                continue
            try:
                if interval is not None:
                    raise ValueError(f"io takes one interval (got {arg!r})")
                interval = parse_interval(part)
            except ValueError as e:
                raise argparse.ArgumentTypeError(
                    f"{e}; or split by {' or '.join(IoCollector.BY)}"
                ) from None
        return name, (interval, by)
    if name == "conv" and arg in ("", "tcp"):
        return name, None
    if arg:
        raise argparse.ArgumentTypeError(f"statistic {name!r} takes no argument (got {arg!r})")
    return name, None


EPILOG = """\
examples (filters: docs/filters.md; every table counts the selected exchanges only, -z conv
lists the conversations of their connections):
  kanalyze stats cap.pcap -z errors -Y 'api == "Produce"'
  kanalyze stats cap.pcap -z latency -Y 'client_id == "web-7"' --from 02:10 --to 02:15
  kanalyze stats cap.pcap -z conv --conn 10.0.0.7:51234
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stats",
        help="statistics tables: conv, topics, clients, latency, errors, io",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_filter_arguments(p)
    p.add_argument(
        "-z",
        dest="tables",
        type=table_choice,
        action="append",
        default=[],
        metavar="NAME[,ARG]",
        help=f"a statistic to show (repeatable): {', '.join(TABLES)}; io,INTERVAL "
        "(io,1s, io,500ms, io,1m; without one, 1 s or coarser to stay within 100 rows) and "
        "io,[INTERVAL,]topic or io,[INTERVAL,]client to split each interval; default: all",
    )
    p.add_argument("--json", action="store_true", help="one JSON document (docs/stats.md)")
    add_jobs_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    choices = dict(args.tables) if args.tables else dict.fromkeys(TABLES)
    base = Session(args.files, engine_options(args), progress=for_command(streams_stdout=False))
    ctx = DecodeContext(topic_names=topic_names_of(args))
    session = selected_session(args, base, ctx, learn=True)  # names from every exchange
    if session is base:  # filters: one process
        session = base = with_jobs(base, args.jobs)
    doc = build(session, choices, ctx=ctx)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        render(doc, Out())
    report_capture_problems(base)
    return 0
