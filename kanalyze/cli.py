"""The `kanalyze` command line: one subcommand module per job under kanalyze/commands/."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from kanalyze import __version__
from kanalyze.capture import CaptureError
from kanalyze.inputs import expand_inputs, missing_input

COMMANDS = (
    "export",
    "summary",
    "schemas",
    "report",
    "stats",
    "metadata",
    "records",
    "live",
    "tui",
    "spark",
)

EXAMPLES = (
    "examples:\n"
    "  kanalyze summary capture.pcap\n"
    "  kanalyze export capture.pcap -Y 'api == \"Fetch\" and latency > 100ms' "
    "-T fields -e time -e client_id -e latency\n"
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that subcommand's module is imported (faster start-up)."""
    parser = argparse.ArgumentParser(
        prog="kanalyze",
        description="Kafka wire-protocol analyzer: captures in, matched and decoded exchanges out.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kanalyze {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"kanalyze.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if getattr(args, "files", None) and args.command != "spark":  # Spark lists its own
        args.files, left = expand_inputs(args.files)
        if left:
            more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
            sys.stderr.write(f"kanalyze: note: left out what is not a capture: {left[0]}{more}\n")
        empty = next((p for p in args.files if os.path.isdir(p)), None)
        if empty is not None:
            sys.stderr.write(f"kanalyze: error: {empty}: no capture file in this directory\n")
            return 2
    missing = missing_input(getattr(args, "files", None) or ())
    if missing:
        sys.stderr.write(f"kanalyze: error: {missing}\n")
        return 2
    try:
        return int(args.run(args) or 0)
    except CaptureError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    except BrokenPipeError:
        # the reader went away (e.g. `| head`); not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        # an I/O error outside the capture readers: an output that cannot be written (disk full,
        # a directory that does not exist)
        sys.stderr.write(f"kanalyze: error: {e}\n")
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
