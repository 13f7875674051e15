"""`kanalyze export -T events|openmetrics`: the outputs for dashboards (docs/dashboards.md).

* `events`: one flat, index-ready document per exchange (`kanalyze.export.events`);
* `openmetrics`: the `live --prometheus` series with capture timestamps, for promtool's
  backfill (`kanalyze.export.openmetrics`).

`-T`/`--format` itself belongs to `kanalyze.export.outputs`, which validates through
`check_format` and writes through `write_format` (any session: a filtered one too); this module
adds the options of these two formats.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from kanalyze.export import DEFAULT_MAX_LINE

if TYPE_CHECKING:
    from dissectors.context import DecodeContext
    from kanalyze.session import Session

DEFAULT_STEP = 15.0  # Prometheus' default scrape interval


def step_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0.001 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected 0.001 to 86400 seconds, got {text}")
    return value


def line_cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of bytes, got {text!r}"
        ) from None
    if value < 4096:
        raise argparse.ArgumentTypeError(f"expected at least 4096 bytes, got {value}")
    return value


def add_format_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dashboard formats (docs/dashboards.md)")
    g.add_argument(
        "--with-bodies",
        action="store_true",
        help="events: add the decoded bodies as one JSON string field (kafka.body)",
    )
    g.add_argument(
        "--max-line-bytes",
        type=line_cap,
        default=None,
        metavar="N",
        help=f"events: cap on one line; bodies are cut first (default {DEFAULT_MAX_LINE})",
    )
    g.add_argument(
        "--step",
        type=step_seconds,
        default=None,
        metavar="S",
        help="openmetrics: one reading every S seconds of capture time (default 15, "
        "Prometheus' default scrape interval)",
    )


@contextlib.contextmanager
def _output(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        out = getattr(sys.stdout, "buffer", None)
        if out is None:  # an embedding program's text stream
            yield _TextAdapter(sys.stdout)  # type: ignore[misc]
            return
        try:
            yield out
        finally:
            out.flush()
        return
    with open(path, "wb") as f:
        yield f


class _TextAdapter:
    def __init__(self, text: object) -> None:
        self.text = text

    def write(self, b: bytes) -> int:
        return self.text.write(b.decode())  # type: ignore[attr-defined]


# the options of each dashboard format (None/False when not given)
_OPTIONS = {
    "--with-bodies": ("with_bodies", "events"),
    "--max-line-bytes": ("max_line_bytes", "events"),
    "--step": ("step", "openmetrics"),
}


def check_format(args: argparse.Namespace) -> str | None:
    """Why `args` cannot be written in `args.format` (None: it can), before any input is read."""
    for flag, (attr, fmt) in _OPTIONS.items():
        if getattr(args, attr) and args.format != fmt:
            return f"{flag} needs --format {fmt}"
    if args.format == "openmetrics":
        if args.header_only:
            return (
                "--header-only does not apply to --format openmetrics "
                "(the series are read from the decoded bodies)"
            )
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            return "--format openmetrics needs prometheus-client (pip install 'kanalyze[live]')"
    return None


def write_format(args: argparse.Namespace, session: Session, ctx: DecodeContext) -> None:
    """Write the exchanges of `session` (a filtered one works too) in `args.format`."""
    with _output(args.output) as out:
        if args.format == "openmetrics":
            from kanalyze.export.openmetrics import write_capture

            write_capture(session, ctx, args.step or DEFAULT_STEP, out)
        else:
            from kanalyze.export.events import write_events

            write_events(
                session,
                ctx,
                out,
                with_bodies=args.with_bodies,
                max_line=args.max_line_bytes or DEFAULT_MAX_LINE,
                decode=not args.header_only,
            )
