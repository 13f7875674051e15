"""`kanalyze spark`: the engine over many or huge captures on Apache Spark, tables as Parquet.

Writes DIR/exchanges, DIR/partitions, DIR/connections, DIR/files and
DIR/aggregates/{api_latency,partition_hw,client_topic_usage,errors}.
Runs on local[*] by default; --master (or spark-submit) for a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kanalyze.commands.common import port, positive_int, topic_ids_file
from kanalyze.commands.spark_stream import add_stream_arguments, run_stream, stream_argument_error


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "spark",
        help="run the pipeline on Apache Spark and write Parquet tables",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.epilog = (
        "examples:\n  kanalyze spark captures/*.pcap --out /tmp/tables\n"
        "  kanalyze spark s3a://bucket/caps/ --out s3a://bucket/tables --master spark://host:7077\n"
        "  kanalyze spark new-captures/ --out /tmp/tables --mode append\n"
        "  kanalyze spark --stream /var/spool/kafka-pcap --out /tmp/tables --idle-timeout 900\n"
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="PATH",
        help=(
            "capture files, directories or globs: local (relative or absolute) or URIs "
            "(hdfs://, s3a://, gs://, file://) listed through Spark's Hadoop filesystem"
        ),
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output directory (one Parquet dataset per table)",
    )
    p.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default local[*]; under spark-submit, the submitted one)",
    )
    p.add_argument(
        "--port",
        type=port,
        action="append",
        default=[],
        metavar="P",
        help="treat TCP port P as a Kafka broker port (repeatable)",
    )
    p.add_argument(
        "--max-frame",
        type=positive_int,
        default=256 * 1024 * 1024,
        metavar="BYTES",
        help="largest plausible Kafka frame (default 256 MiB)",
    )
    p.add_argument(
        "--split-mb",
        type=positive_int,
        default=128,
        metavar="MB",
        help="cut uncompressed captures larger than this into byte ranges (default 128)",
    )
    p.add_argument(
        "--topic-ids",
        type=topic_ids_file,
        default=None,
        metavar="FILE",
        help="topic id -> name mapping: kafka-topics.sh --describe output or JSON {id: name}",
    )
    p.add_argument(
        "--header-only",
        action="store_true",
        help="do not decode bodies (no topics, partitions, error codes; fastest)",
    )
    p.add_argument(
        "--with-bodies",
        action="store_true",
        help="add request_body/response_body: each body as JSON text (credentials redacted)",
    )
    p.add_argument(
        "--mode",
        choices=("overwrite", "append"),
        default="overwrite",
        help="overwrite the tables (default), or append to them: inputs already in the files "
        "table (same content) are skipped, so re-running the same input adds nothing",
    )
    p.add_argument(
        "--capture-id",
        default=None,
        metavar="ID",
        help="one capture group for all inputs (default: each file's directory)",
    )
    p.add_argument(
        "--shuffle-partitions",
        type=positive_int,
        default=None,
        metavar="N",
        help="tasks for stage 2 (default: 2 x cores, more for big inputs)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    add_stream_arguments(p)
    p.set_defaults(run=run)


def _master(args: argparse.Namespace) -> str | None:
    if args.master:
        return args.master
    if os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.get("SPARK_SUBMIT_OPTS"):
        return None  # launched by spark-submit: keep its master
    return "local[*]"


def run(args: argparse.Namespace) -> int:
    from kanalyze.spark.session import SparkUnavailable, check_requirements

    problem = stream_argument_error(args)
    if problem:
        sys.stderr.write(f"kanalyze: error: {problem}\n")
        return 2
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            sys.stderr.write(f"kanalyze: error: --conf expects KEY=VALUE, got {item!r}\n")
            return 2
        conf[key] = value
    try:
        check_requirements()
    except SparkUnavailable as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    from kanalyze.spark.inputs import InputError, is_uri, resolve_inputs

    local = [p for p in args.files if not is_uri(p) and not args.stream]  # a stream may start empty
    try:  # local inputs are checked before the JVM starts: a typo costs no Spark start-up
        if local:
            resolve_inputs(local)
    except InputError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    from pyspark.sql import SparkSession

    from kanalyze.spark.session import get_session

    owned = SparkSession.getActiveSession() is None  # inside a notebook or test: leave it running
    try:
        spark = get_session(_master(args), "kanalyze", conf)
    except Exception as e:  # noqa: BLE001 - JVM start-up failures come as many types
        sys.stderr.write(f"kanalyze: error: could not start Spark: {_first_line(e)}\n")
        return 2
    if args.stream:
        try:
            return run_stream(spark, args)
        finally:
            if owned:
                spark.stop()
    from kanalyze.spark.pipeline import run_pipeline

    try:
        res = run_pipeline(
            spark,
            args.files,
            args.out,
            ports=args.port,
            split_bytes=args.split_mb * 1024 * 1024,
            decode_bodies=not args.header_only,
            with_bodies=args.with_bodies,
            mode=args.mode,
            capture_id=args.capture_id,
            shuffle_partitions=args.shuffle_partitions,
            max_frame=args.max_frame,
            topic_ids=args.topic_ids,
        )
    except InputError as e:  # a remote input that is missing or unreadable
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    except Exception as e:  # noqa: BLE001 - a Spark job failure: report it without a JVM stack
        sys.stderr.write(f"kanalyze: error: the Spark job failed: {_first_line(e)}\n")
        return 1
    finally:
        if owned:
            spark.stop()
    for problem in res.problems:
        sys.stderr.write(f"kanalyze: {problem}\n")
    for note in res.notes:
        sys.stderr.write(f"kanalyze: note: {note}\n")
    if res.skipped:
        n = len(res.skipped)
        sys.stderr.write(f"kanalyze: {n} input(s) already in {res.out_dir}: skipped\n")
    summary = {
        "out": res.out_dir,
        "files": len(res.plan.files),
        "units": len(res.plan.units),
        "skipped": len(res.skipped),
        "balance": res.balance,
        "notes": res.notes,
        "rows": res.counts,
        "seconds": {k: round(v, 2) for k, v in res.seconds.items()},
    }
    if args.json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        sys.stdout.write(
            f"{summary['files']} files in {summary['units']} units -> {res.out_dir} "
            f"({', '.join(f'{k}: {v}' for k, v in res.counts.items())}) "
            f"in {summary['seconds']['total']} s\n"
        )
    return 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:500]
    return type(e).__name__
