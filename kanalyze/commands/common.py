"""Options shared by the commands that read captures."""

from __future__ import annotations

import argparse
import sys

from dissectors.context import DecodeContext, Limits
from kanalyze.capture import CaptureStats
from kanalyze.engine import EngineOptions, EngineStats
from kanalyze.flows import SUPPORTED_LINKTYPES
from kanalyze.reassembly import ReassemblyLimits
from kanalyze.session import Session


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A duration option (`--duration`, `--idle-timeout`, ...): a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def add_input_arguments(p: argparse.ArgumentParser, files_required: bool = True) -> None:
    p.add_argument(
        "files",
        nargs="+" if files_required else "*",
        metavar="FILE",
        help="pcap/pcapng files (.gz too), directories of them (a rotated set), glob "
             "patterns; '-' reads stdin; several files are merged by time",
    )
    p.add_argument(
        "--port",
        type=port,
        action="append",
        default=[],
        metavar="P",
        help="treat TCP port P as a Kafka broker port (repeatable); Kafka is detected on any "
             "port anyway",
    )
    add_topic_ids_argument(p)
    add_limit_arguments(p)


def add_topic_ids_argument(p: argparse.ArgumentParser) -> None:
    """--topic-ids FILE: names the run's topic-name registry starts with (every output uses
    them: export's topic_name, the report, the TUI, Spark rows, metrics labels)."""
    p.add_argument(
        "--topic-ids",
        type=topic_ids_file,
        default=None,
        metavar="FILE",
        help="topic id -> name mapping (kafka-topics.sh --describe output or JSON "
        "{id: name}) for topics the capture only shows by id",
    )


def topic_ids_file(path: str) -> dict[str, str]:
    """--topic-ids FILE read into an id → name mapping (a bad file is one argparse error)."""
    from kanalyze.bodies.names import TopicIdsError, load_topic_ids  # only with --topic-ids

    try:
        return load_topic_ids(path).mapping
    except TopicIdsError as exc:
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from None


def topic_names_of(args: argparse.Namespace) -> dict[str, str]:
    """A fresh id → name mapping for one run's registry, preloaded with --topic-ids."""
    return dict(getattr(args, "topic_ids", None) or {})


def add_limit_arguments(p: argparse.ArgumentParser) -> None:
    """The engine's resource bounds (docs/limits.md); each hit is counted in `summary`."""
    d = EngineOptions()
    r = d.reassembly
    g = p.add_argument_group("resource bounds (docs/limits.md)")
    g.add_argument(
        "--max-frame",
        type=positive_int,
        default=d.max_frame,
        metavar="BYTES",
        help="largest plausible Kafka frame (default 256 MiB)",
    )
    g.add_argument(
        "--max-buffered",
        type=positive_int,
        default=d.max_buffered,
        metavar="BYTES",
        help="what the engine may hold, in bytes with their Python objects: buffered data "
             "(partial frames, out-of-order data), requests waiting for a response, exchanges "
             "waiting for their turn; over it the output is written out early, then the largest "
             "buffers and waits are given up (default 1 GiB)",
    )
    g.add_argument(
        "--max-connections",
        type=positive_int,
        default=d.max_connections,
        metavar="N",
        help="connections open at once; over it the least recently active are closed (default "
             "100000)",
    )
    g.add_argument(
        "--max-pending",
        type=positive_int,
        default=d.max_pending,
        metavar="N",
        help="requests awaiting a response per connection; over it the oldest is given up "
             "(default 10000)",
    )
    g.add_argument(
        "--max-ooo-bytes",
        type=positive_int,
        default=r.max_ooo_bytes,
        metavar="BYTES",
        help="out-of-order bytes waiting behind a hole, per direction (default 32 MiB)",
    )
    g.add_argument(
        "--max-ooo-segments",
        type=positive_int,
        default=r.max_ooo_segments,
        metavar="N",
        help="out-of-order segments waiting behind a hole, per direction (default 8192)",
    )


def add_decode_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--show-secrets",
        action="store_true",
        help="do not redact SASL passwords, SCRAM proofs and tokens",
    )
    p.add_argument(
        "--max-value-bytes",
        type=positive_int,
        default=None,
        metavar="N",
        help="truncate record keys, values and header values to N bytes",
    )
    p.add_argument(
        "--header-only",
        action="store_true",
        help="do not decode bodies (fastest; headers, matching and timing only)",
    )
    p.add_argument(
        "--no-records",
        action="store_true",
        help="decode bodies but leave record batches undecoded (sizes only)",
    )
    d = Limits()
    g = p.add_argument_group("decoding bounds (docs/limits.md)")
    g.add_argument(
        "--max-decompressed",
        type=positive_int,
        default=d.max_decompressed_bytes,
        metavar="BYTES",
        help="cap on one batch's decompressed size (default 64 MiB)",
    )
    g.add_argument(
        "--max-decompression-ratio",
        type=positive_int,
        default=d.max_decompression_ratio,
        metavar="R",
        help="cap on decompressed size as a multiple of the compressed size (default 250)",
    )
    g.add_argument(
        "--max-array-count",
        type=positive_int,
        default=d.max_array_count,
        metavar="N",
        help="largest array decoded (default 10000000)",
    )
    g.add_argument(
        "--max-nesting",
        type=positive_int,
        default=d.max_nesting_depth,
        metavar="N",
        help="compressed legacy message sets nested deeper than N are not decompressed (default 2)",
    )
    g.add_argument(
        "--decode-budget-ratio",
        type=positive_int,
        default=d.decode_budget_ratio,
        metavar="R",
        help="what one frame's decoded tree may cost: R x the frame's size + 64 MiB of estimated "
             "Python objects, at most --decode-budget-max; the rest of a frame over it stays raw "
             "(default 128)",
    )
    g.add_argument(
        "--decode-budget-max",
        type=positive_int,
        default=d.decode_budget_max,
        metavar="BYTES",
        help="the most one frame's decoded tree may cost, whatever its size, in estimated bytes "
             "of Python objects (default 512 MiB)",
    )


def engine_options(args: argparse.Namespace, **extra: object) -> EngineOptions:
    return EngineOptions(
        ports=frozenset(args.port),
        max_frame=args.max_frame,
        max_buffered=args.max_buffered,
        max_connections=args.max_connections,
        max_pending=args.max_pending,
        reassembly=ReassemblyLimits(
            max_ooo_bytes=args.max_ooo_bytes, max_ooo_segments=args.max_ooo_segments
        ),
        **extra,  # type: ignore[arg-type]
    )


def decode_context(args: argparse.Namespace) -> DecodeContext:
    limits = Limits(
        max_decompressed_bytes=args.max_decompressed,
        max_decompression_ratio=args.max_decompression_ratio,
        max_array_count=args.max_array_count,
        max_nesting_depth=args.max_nesting,
        max_value_bytes=args.max_value_bytes,
        decode_budget_ratio=args.decode_budget_ratio,
        decode_budget_max=args.decode_budget_max,
    )
    return DecodeContext(
        limits=limits,
        show_secrets=args.show_secrets,
        decode_records=not args.no_records,
        topic_names=topic_names_of(args),
    )


def add_jobs_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="worker processes (default 1; for a full `export` of 64 MB or more, the usable "
        "cores, with the compiled build from 3 cores on; stdin is always read by one); the "
        "output is the same for every N",
    )


def with_jobs(session: Session, jobs: int | None) -> Session:
    """`session` itself, or with `--jobs N` (N > 1, every input a regular file) the same run
    over byte ranges in N processes (`kanalyze.parallel.range_session`: the same exchanges in
    the same order; imported only then). For a session no filter wraps (a filtered run is one
    process, as in `export`)."""
    if jobs is None or jobs == 1:
        return session
    from kanalyze.parallel.run import default_jobs

    n = default_jobs(session.paths, jobs)
    if n == 1:
        return session
    from kanalyze.parallel.range_session import RangeSession

    return RangeSession(session.paths, session.opts, progress=session.progress,
                        on_packet=session.on_packet, hold=session.hold,
                        park_held=session.park_held, jobs=n)


def report_capture_problems(session: Session) -> None:
    """Damage found inside capture files goes to stderr (the output stays machine-readable)."""
    st = session.engine.stats if session.engine is not None else None
    skipped = st.client.skipped + st.broker.skipped if st else 0
    # bytes a snaplen cut are said once by explain_nothing, not as capture losses
    gaps = (
        st.client.gaps + st.broker.gaps - st.client.uncaptured - st.broker.uncaptured if st else 0
    )
    capture_problems(session.capture, skipped, gaps)


def capture_problems(capture: CaptureStats, skipped: int, gaps: int) -> None:
    """`report_capture_problems` from the numbers (a `--jobs` run adds them up over shards)."""
    for name, d in capture.diagnostics:
        sys.stderr.write(f"kanalyze: {name}: offset {d.offset}: {d.message}\n")
    if skipped or gaps:
        sys.stderr.write(
            f"kanalyze: {skipped} bytes skipped while resynchronizing, {gaps} bytes lost in "
            "capture gaps "
            "(see `kanalyze summary`)\n"
        )


NOTHING_ANALYZED = 3  # exit status: the input was readable, but not one Kafka connection was in it


def _flows(flows: list[tuple[str, str, bool]], tls: bool | None = None) -> str:
    named = [f"{c} -> {b}" for c, b, t in flows if tls is None or t == tls]
    return ", ".join(named[:5]) + (", ..." if len(named) > 5 else "")


def tls_note(stats: EngineStats) -> str | None:
    """The closing note on connections that carried TLS where Kafka was expected, or None."""
    if not stats.tls_connections:
        return None
    return (
        f"TLS on {stats.tls_connections} connection(s) "
        f"({_flows(stats.non_kafka_flows, True)}): "
        "kanalyze reads Kafka only in clear text; capture a PLAINTEXT listener, or decrypt "
        "first (with the session keys, e.g. an SSLKEYLOGFILE key log)"
    )


def what_it_is(stats: EngineStats, packets: int) -> tuple[str | None, str | None]:
    """(a TLS note, the reason nothing was analyzed): each one line, or None."""
    tls = tls_note(stats)
    if stats.kafka_connections:
        return tls, None
    fl = stats.flows
    if not packets:
        return tls, "nothing analyzed: the capture holds no packets"
    if fl.unsupported_linktypes and not fl.tcp:
        kinds = ", ".join(
            f"{n} packets of link type {lt}" for lt, n in sorted(fl.unsupported_linktypes.items())
        )
        known = ", ".join(sorted(set(SUPPORTED_LINKTYPES.values())))
        return tls, f"nothing analyzed: unsupported link type ({kinds}); kanalyze reads {known}"
    if not fl.tcp:
        return tls, (
            f"nothing analyzed: no TCP packet among {packets} ({fl.not_ip} not IP, {fl.not_tcp} "
            "not TCP, "
            f"{fl.fragments} IP fragments, {fl.malformed} malformed)"
        )
    if stats.tls_connections and stats.tls_connections == stats.non_kafka_connections:
        return tls, "nothing analyzed: every connection is TLS"
    if stats.non_kafka_connections:
        return tls, (
            f"nothing analyzed: no Kafka request found on {stats.non_kafka_connections} TCP "
            "connection(s) "
            f"({_flows(stats.non_kafka_flows)}); if a broker listens on one of these ports, "
            "name it with --port P"
        )
    return tls, "nothing analyzed: no TCP connection carried data"


def explain_nothing(session: Session) -> int:
    """Say on stderr what the capture is when it is not (all) decodable Kafka (and once, when
    it was cut by a snaplen, which outputs are partial); the exit status:
    NOTHING_ANALYZED when not one Kafka connection was found, else 0."""
    if session.engine is None:
        return 0
    tls, nothing = what_it_is(session.engine.stats, session.capture.packets)
    cut = None
    if session.engine.stats.flows.cut_packets:  # the summary module only when it has to speak
        from kanalyze.analysis.summary import snaplen_notice

        cut = snaplen_notice(session.engine.stats)
    for line in (cut, tls, nothing):
        if line:
            sys.stderr.write(f"kanalyze: {line}\n")
    return NOTHING_ANALYZED if nothing else 0
