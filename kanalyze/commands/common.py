"""Options shared by the commands that read captures."""

from __future__ import annotations

import argparse
import sys

from dissectors.context import DecodeContext, Limits
from kanalyze.engine import EngineOptions
from kanalyze.session import Session


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def add_input_arguments(p: argparse.ArgumentParser, files_required: bool = True) -> None:
    p.add_argument("files", nargs="+" if files_required else "*", metavar="FILE", help="pcap/pcapng files (.gz too); '-' reads stdin; several files are merged by time")
    p.add_argument("--port", type=port, action="append", default=[], metavar="P", help="treat TCP port P as a Kafka broker port (repeatable); Kafka is detected on any port anyway")
    p.add_argument("--max-frame", type=positive_int, default=256 * 1024 * 1024, metavar="BYTES", help="largest plausible Kafka frame (default 256 MiB)")


def add_decode_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--show-secrets", action="store_true", help="do not redact SASL passwords, SCRAM proofs and tokens")
    p.add_argument("--max-value-bytes", type=positive_int, default=None, metavar="N", help="truncate record keys, values and header values to N bytes")
    p.add_argument("--header-only", action="store_true", help="do not decode bodies (fastest; headers, matching and timing only)")
    p.add_argument("--no-records", action="store_true", help="decode bodies but leave record batches undecoded (sizes only)")
    p.add_argument("--max-decompressed", type=positive_int, default=64 * 1024 * 1024, metavar="BYTES", help="cap on one batch's decompressed size (default 64 MiB)")


def engine_options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(ports=frozenset(args.port), max_frame=args.max_frame)


def decode_context(args: argparse.Namespace) -> DecodeContext:
    limits = Limits(max_frame_bytes=args.max_frame, max_decompressed_bytes=args.max_decompressed, max_value_bytes=args.max_value_bytes)
    return DecodeContext(limits=limits, show_secrets=args.show_secrets, decode_records=not args.no_records)


def report_capture_problems(session: Session) -> None:
    """Damage found inside capture files goes to stderr (the output stays machine-readable)."""
    for name, d in session.capture.diagnostics:
        sys.stderr.write(f"kanalyze: {name}: offset {d.offset}: {d.message}\n")
    if session.engine is not None:
        skipped = session.engine.stats.client.skipped + session.engine.stats.broker.skipped
        gaps = session.engine.stats.client.gaps + session.engine.stats.broker.gaps
        if skipped or gaps:
            sys.stderr.write(
                f"kanalyze: {skipped} bytes skipped while resynchronizing, {gaps} bytes lost in capture gaps "
                "(see `kanalyze summary`)\n"
            )
