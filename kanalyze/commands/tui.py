"""`kanalyze tui`: browse captures interactively (docs/tui.md). Textual is imported only here."""

from __future__ import annotations

import argparse
import sys

from kanalyze.commands.common import (
    add_decode_arguments,
    add_input_arguments,
    decode_context,
    engine_options,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tui", help="interactive browser: connections, decoded exchanges with hex, replication",
                       description=__doc__)
    add_input_arguments(p)
    add_decode_arguments(p)
    p.add_argument("--light", action="store_true", help="start with the light theme (t toggles)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from kanalyze.tui.app import KanalyzeApp
    except ImportError as e:  # textual is an optional extra
        sys.stderr.write(f"kanalyze: error: the TUI needs textual ({e}); pip install 'kanalyze[tui]'\n")
        return 2
    if "-" in args.files:
        sys.stderr.write("kanalyze: error: the TUI reads files, not stdin (the terminal is its input)\n")
        return 2
    from kanalyze.capture import read_captures

    # fail before the screen opens when an input is not a capture (CaptureError -> exit 2)
    next(iter(read_captures(args.files)), None)
    app = KanalyzeApp(args.files, engine_options(args), decode_context(args),
                      theme="textual-light" if args.light else "textual-dark")
    app.run()
    return 0
