"""`kanalyze records`: one line per record produced or fetched, kcat -C style
(docs/stats.md). Each (topic, partition, offset) is shown once unless --all."""

from __future__ import annotations

import argparse
import sys

import orjson

from dissectors.context import DecodeContext
from kanalyze.commands.common import (
    add_input_arguments,
    engine_options,
    report_capture_problems,
    topic_names_of,
)
from kanalyze.query.cli import add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.progress import for_command
from kanalyze.views.records import (
    DEFAULT_FORMAT,
    TOKENS,
    Dedup,
    FormatError,
    compile_format,
    fetched,
    format_record,
    produced,
    record_json,
)
from kanalyze.views.source import BodySource


def _format(text: str) -> list:
    try:
        return compile_format(text)
    except FormatError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _partition(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a partition number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a partition is 0 or more, got {value}")
    return value


EPILOG = """\
examples (filters: docs/filters.md; records of the selected exchanges; --topic also keeps
only the records of the topics named):
  kanalyze records cap.pcap --topic orders --partition 0
  kanalyze records cap.pcap --json -Y 'client_id == "web-7"'
  kanalyze records cap.pcap -Y 'api == "Produce"' --from 02:10 --to 02:15
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    tokens = " ".join("%%" + t for t in TOKENS)  # argparse %-expands help text
    p = sub.add_parser(
        "records",
        help="one line per record produced or fetched (kcat -C style)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_filter_arguments(p)  # its --topic selects the exchanges and, here, their records
    p.add_argument(
        "-f",
        "--format",
        type=_format,
        default=compile_format(DEFAULT_FORMAT),
        metavar="FORMAT",
        help=f"kcat format string; tokens {tokens} (%%d produce/fetch, %%c client id); "
        f"escapes \\n \\t; default '{DEFAULT_FORMAT.replace('%', '%%')}'",
    )
    p.add_argument(
        "--partition",
        type=_partition,
        action="append",
        default=[],
        metavar="P",
        help="only partition P (repeatable)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every copy of every record (each produce and each fetch), refused produces "
        "and transaction markers too; default: each (topic, partition, offset) once",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object per record (docs/stats.md)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    base = Session(args.files, engine_options(args), progress=for_command(streams_stdout=True))
    ctx = DecodeContext(topic_names=topic_names_of(args))
    session = selected_session(args, base, ctx, learn=True)  # names from every exchange
    source = BodySource(ctx)
    dedup = None if args.all else Dedup()
    topics = set(args.topic)
    parts = set(args.partition)
    out = getattr(sys.stdout, "buffer", None)
    write = (
        out.write if out is not None else (lambda b: sys.stdout.write(b.decode("utf-8", "replace")))
    )
    fmt = args.format
    for ex in session.exchanges():
        if ex.api_key == 0 and ex.request is not None:
            b = source.bodies(ex)
            recs = produced(ex, b.request, b.response, include_refused=args.all)
        elif ex.api_key == 1 and ex.response is not None:
            recs = fetched(ex, source.bodies(ex).response, include_control=args.all)
        else:
            source.decoder.learn(ex)
            continue
        for r in recs:
            if topics and r.topic not in topics or parts and r.partition not in parts:
                continue
            if dedup is not None and not dedup.first(r):
                continue
            write(orjson.dumps(record_json(r)) + b"\n" if args.json else format_record(fmt, r))
    if out is not None:
        out.flush()
    report_capture_problems(base)
    return 0
