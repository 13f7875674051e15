"""`kanalyze tui`: browse captures interactively (docs/tui.md). Textual is imported only here."""

from __future__ import annotations

import argparse
import sys

from kanalyze.commands.common import (
    add_decode_arguments,
    add_input_arguments,
    add_jobs_argument,
    decode_context,
    engine_options,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tui",
        help="interactive browser: connections, decoded exchanges with hex, replication",
        description=__doc__,
    )
    p.epilog = "examples:\n  kanalyze tui capture.pcap\n  kanalyze tui --live eth0 --port 9092\n"
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    add_input_arguments(p, files_required=False)
    add_decode_arguments(p)
    p.add_argument("--light", action="store_true", help="start with the light theme (t toggles)")
    p.add_argument(
        "--live",
        metavar="IFACE",
        help="capture from a live interface instead of files (root or CAP_NET_RAW)",
    )
    p.add_argument("--bpf", metavar="FILTER", help="with --live: BPF capture filter (default: TCP)")
    add_jobs_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from kanalyze.tui.app import KanalyzeApp
    except ImportError as e:  # textual is an optional extra
        sys.stderr.write(
            f"kanalyze: error: the TUI needs textual ({e}); pip install 'kanalyze[tui]'\n"
        )
        return 2
    if args.live:
        if args.files:
            sys.stderr.write("kanalyze: error: give capture files or --live IFACE, not both\n")
            return 2
        return _run_live(args, KanalyzeApp)
    if not args.files:
        sys.stderr.write("kanalyze: error: give capture files or --live IFACE\n")
        return 2
    if "-" in args.files:
        sys.stderr.write(
            "kanalyze: error: the TUI reads files, not stdin (the terminal is its input)\n"
        )
        return 2
    from kanalyze.capture import read_captures

    # fail before the screen opens when an input is not a capture (CaptureError -> exit 2)
    next(iter(read_captures(args.files)), None)
    app = KanalyzeApp(
        args.files,
        engine_options(args),
        decode_context(args),
        theme="textual-light" if args.light else "textual-dark",
        jobs=args.jobs,
    )
    app.run()
    return 0


def _run_live(args: argparse.Namespace, app_class: type) -> int:
    """The same app, fed by a live capture session running in the app's worker."""
    from kanalyze.live import LiveError, LiveOptions, LiveSession, default_filter, open_source

    try:
        source = open_source(args.live, args.bpf or default_filter(args.port))
    except LiveError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    session = LiveSession(source, LiveOptions(engine=engine_options(args)))

    def feed(app) -> None:  # noqa: ANN001 - runs in the app's worker thread
        session.subscribe(lambda ex: app.add_exchanges((ex,)))
        session.run()

    app = app_class(
        opts=engine_options(args),
        ctx=decode_context(args),
        source_label=f"{args.live} (live)",
        theme="textual-light" if args.light else "textual-dark",
        feed=feed,
        stop=session.stop,
    )
    app.run()
    return 0
