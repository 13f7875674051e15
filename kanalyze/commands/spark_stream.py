"""`kanalyze spark --stream DIR --out OUT`: the Structured Streaming query of
`kanalyze.spark.streaming`, run until Ctrl-C, `--duration`, or (`--until-drained`) until every
file has been read and every connection has gone idle."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from kanalyze.commands.common import positive_int, positive_seconds

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery




def add_stream_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "streaming (--stream DIR: a directory that tcpdump -C/-G rotates into)"
    )
    g.add_argument(
        "--stream",
        action="store_true",
        help="watch the one directory PATH and append exchanges to OUT/exchanges as they complete",
    )
    g.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=600.0,
        metavar="S",
        help="close a connection after S seconds without packets (default 600; keep it above "
        "the rotation interval)",
    )
    g.add_argument(
        "--trigger",
        type=positive_seconds,
        default=10.0,
        metavar="S",
        help="start a micro-batch every S seconds (default 10)",
    )
    g.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="the query's progress and connection state (default OUT/_checkpoint)",
    )
    g.add_argument(
        "--max-files-per-trigger",
        type=positive_int,
        default=None,
        metavar="N",
        help="read at most N new files per micro-batch",
    )
    g.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C)",
    )
    g.add_argument(
        "--until-drained",
        action="store_true",
        help="stop once a micro-batch finds no new file and no connection is open",
    )


def stream_argument_error(args: argparse.Namespace) -> str | None:
    """One line for a bad --stream invocation (exit 2 before Spark starts), else None."""
    if not args.stream:
        used = [o for o in ("duration", "until_drained", "checkpoint") if getattr(args, o)]
        if used:
            return f"--{used[0].replace('_', '-')} needs --stream"
        return None
    if len(args.files) != 1:
        return f"--stream watches one directory, got {len(args.files)} paths"
    path = args.files[0]
    if "://" not in path and not os.path.isdir(path):
        return f"{path}: --stream needs an existing directory"
    return None


def drained(query: StreamingQuery) -> bool:
    """The last micro-batch read no new file and no connection state is left."""
    p = query.lastProgress
    if not p or p.get("numInputRows", 1) != 0:
        return False
    return all(op.get("numRowsTotal", 1) == 0 for op in p.get("stateOperators", []))


def run_stream(spark: SparkSession, args: argparse.Namespace) -> int:
    from kanalyze.engine import EngineOptions
    from kanalyze.spark.streaming import (
        CheckpointError,
        StreamConfig,
        checkpoint_problem,
        start_stream,
    )

    config = StreamConfig(
        idle_timeout_s=args.idle_timeout,
        opts=EngineOptions(ports=frozenset(args.port), max_frame=args.max_frame),
        decode_bodies=not args.header_only,
        with_bodies=args.with_bodies,
    )
    if args.shuffle_partitions:  # the state store's partitions: fixed by the first checkpoint
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    out = args.out.rstrip("/")
    checkpoint = args.checkpoint or f"{out}/_checkpoint"
    try:
        query = start_stream(
            spark,
            args.files[0],
            out,
            checkpoint=checkpoint,
            config=config,
            trigger_s=args.trigger,
            capture_id=args.capture_id,
            max_files_per_trigger=args.max_files_per_trigger,
        )
    except CheckpointError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    sys.stderr.write(f"kanalyze: streaming {args.files[0]} -> {out}/exchanges (Ctrl-C stops)\n")
    deadline = time.monotonic() + args.duration if args.duration else None
    from pyspark.errors import StreamingQueryException

    try:
        while query.isActive:
            try:
                query.awaitTermination(0.5)
            except StreamingQueryException:
                break  # the query failed: its exception is reported below, in one line
            if args.until_drained and drained(query):
                break
            if deadline is not None and time.monotonic() > deadline:
                break
    except KeyboardInterrupt:
        sys.stderr.write("kanalyze: stopping the stream\n")
    finally:
        error = query.exception()
        query.stop()
    if error is not None:  # one line, not the JVM's stack
        text = str(error)
        old = checkpoint_problem(text, checkpoint)
        if old is not None:
            sys.stderr.write(f"kanalyze: error: {old}\n")
            return 2
        line = next((x.strip() for x in text.splitlines() if x.strip()), "unknown error")
        sys.stderr.write(f"kanalyze: error: the stream failed: {line[:500]}\n")
        return 1
    n = 0
    if _has_table(f"{out}/exchanges"):
        from kanalyze.spark import schemas as R

        n = spark.read.schema(R.spark_ddl(R.EXCHANGE_SCHEMA)).parquet(f"{out}/exchanges").count()
    sys.stdout.write(f"{n} exchanges in {out}/exchanges\n")
    return 0


def _has_table(path: str) -> bool:
    return "://" in path or os.path.isdir(os.path.join(path, "_spark_metadata"))
