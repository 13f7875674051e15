"""`kanalyze export`: one JSON line per Kafka exchange, in start-time order."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from kanalyze.capture import CaptureError, CaptureStats
from kanalyze.commands.common import (
    add_decode_arguments,
    add_input_arguments,
    add_jobs_argument,
    capture_problems,
    decode_context,
    engine_options,
    explain_nothing,
    report_capture_problems,
    tls_note,
)
from kanalyze.engine import EngineStats
from kanalyze.export import ExchangeEncoder
from kanalyze.export.formats import add_format_arguments
from kanalyze.export.outputs import (
    add_output_arguments,
    check_output_arguments,
    needs_learning,
    run_output,
)
from kanalyze.gcyoung import young_only
from kanalyze.inputs import unopenable_input
from kanalyze.query.cli import FILTER_EPILOG, add_filter_arguments, selected_session
from kanalyze.session import Session
from kanalyze.views.progress import for_command


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write matched exchanges as NDJSON",
        description=__doc__,
        epilog=FILTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    add_decode_arguments(p)
    add_filter_arguments(p)
    add_output_arguments(p)
    add_jobs_argument(p)
    add_format_arguments(p)
    p.add_argument(
        "-o", "--output", default="-", metavar="OUT", help="output file (default: stdout)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    specs = check_output_arguments(args)
    if args.output != "-" and (bad := unopenable_input(args.files)):
        raise CaptureError(bad)  # before an output file is opened (and emptied)
    ctx = decode_context(args)
    opts = engine_options(args)
    # a filter shares the decode context (and so the topic names it learns) with the encoder
    base = Session(args.files, opts, progress=for_command(True))
    session = selected_session(args, base, ctx, learn=not args.header_only or needs_learning(specs))
    status = run_output(args, session, ctx, specs, opts)
    if status is not None:
        report_capture_problems(session)
        return status
    enc = ExchangeEncoder(ctx, decode=not args.header_only)
    if args.header_only and session is base:
        base.frames_wanted = False  # the lines are written from the headers alone
    # binary output: orjson's bytes go out as they are, no round trip through str; a stdout
    # replaced by a text-only stream (an embedding program's StringIO) gets text
    stdout = getattr(sys.stdout, "buffer", None)
    binary = args.output != "-" or stdout is not None
    out = (stdout or sys.stdout) if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    try:
        # filters: one process; a full export of a big capture: every usable core
        jobs = default_jobs(args.files, args.jobs, auto=not args.header_only) \
            if session is base else 1
        if jobs > 1 and binary:
            try:
                done = run_export(args.files, jobs, opts, ctx, args.header_only, out)
            except CaptureError:  # not a capture: one process says so, in its words
                done = None
            if done is not None:
                capture, skipped, gaps, others = done
                capture_problems(capture, skipped, gaps)
                note = None if others is None else tls_note(others)
                if note:
                    sys.stderr.write(f"kanalyze: {note}\n")
                return 0
        write = out.write
        line, newline = (enc.line_bytes, b"\n") if binary else (enc.line, "\n")
        for ex in young_only(session.exchanges()):
            write(line(ex))
            write(newline)
    finally:
        if args.output != "-":
            out.close()
        else:
            out.flush()
    report_capture_problems(session)
    return explain_nothing(base)


# The pool's modules (multiprocessing, the planner, the merge) are imported when --jobs asks for
# more than one process, not with the command: a one-process export does not pay for them.
# Below this much input a second process does not pay for its start, plan and stitch; above
# it a full export on 2 idle cores took 1.34 s against 1.89 s (250 MB; docs/performance.md,
# "Default"). Header-only runs gained nothing (0.46 s against 0.44 s), so they stay at 1.
AUTO_JOBS_MIN_BYTES = 64 << 20
AUTO_JOBS_MAX = 16  # the scaling model's last point (the merge stays off the critical path)
# With the engine compiled (tools/compile.py) the work per byte halves and the start, plan,
# stitch and the copy of the ranges' lines do not: on 2 idle cores `--jobs 2` gained nothing
# at 250 MB, 490 MB and 1 GB and cost 30-50 % more CPU (docs/performance.md, "Default"), so
# a compiled build takes more processes only from this many cores on
AUTO_JOBS_COMPILED_MIN_CORES = 3


def auto_jobs(paths: Sequence[str]) -> int:
    """The usable cores (at most AUTO_JOBS_MAX) when the inputs hold at least
    AUTO_JOBS_MIN_BYTES, else 1 (and 1 on fewer than AUTO_JOBS_COMPILED_MIN_CORES cores with
    the engine compiled); the pool's own checks (regular files only) still apply."""
    try:
        total = sum(os.stat(p).st_size for p in paths if p != "-")
    except OSError:
        return 1
    if total < AUTO_JOBS_MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    if cores < AUTO_JOBS_COMPILED_MIN_CORES and engine_compiled():
        return 1
    return max(1, min(cores, AUTO_JOBS_MAX))


def engine_compiled() -> bool:
    """Whether this process runs the compiled engine (an extension module, not the source)."""
    from kanalyze import engine

    return not (engine.__file__ or "").endswith(".py")


def default_jobs(paths: Sequence[str], jobs: int | None, auto: bool = False) -> int:
    """`kanalyze.parallel.run.default_jobs`, with `auto` (a full export) picking `auto_jobs`
    when `--jobs` is not given; 1 without importing the pool when that comes to 1."""
    if jobs is None and auto:
        jobs = auto_jobs(paths)
    if jobs is None or jobs == 1:
        return 1
    from kanalyze.parallel.run import default_jobs as decide

    return decide(paths, jobs)


def run_export(*args: Any, **kwargs: Any) -> tuple[CaptureStats, int, int,
                                                   EngineStats | None] | None:
    """`kanalyze.parallel.run.run_export`, imported on first use."""
    from kanalyze.parallel.run import run_export as run

    return run(*args, **kwargs)
