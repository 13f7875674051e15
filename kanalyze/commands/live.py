"""`kanalyze live`: capture from a network interface, one NDJSON line per exchange as it completes.

Needs root or CAP_NET_RAW. Stops on SIGINT/SIGTERM, --duration or --max-packets,
then flushes every exchange still in flight and prints a summary to stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kanalyze.capture.writer import PcapWriter
from kanalyze.commands.common import (
    add_decode_arguments,
    add_limit_arguments,
    add_topic_ids_argument,
    decode_context,
    port,
    positive_int,
    positive_seconds,
)
from kanalyze.commands.live_output import (
    exchange_writer,
    live_options,
    opened,
    worker_pcap,
    write_summary,
)
from kanalyze.live.errors import LiveError
from kanalyze.live.output import NdjsonOutput
from kanalyze.query.cli import FILTER_EPILOG, add_filter_arguments, build_selection

if TYPE_CHECKING:
    from kanalyze.live import LiveSession
    from kanalyze.metrics import Metrics

__all__ = [
    "NdjsonOutput",
    "add_parser",
    "exchange_writer",
    "listen_address",
    "live_options",
    "positive_float",
    "run",
    "worker_pcap",
    "write_summary",
]


positive_float = positive_seconds  # the name tests and older code use


def listen_address(text: str) -> tuple[str, int]:
    """PORT or HOST:PORT (default host 127.0.0.1)."""
    host, sep, p = text.rpartition(":")
    return (host.strip("[]") if sep else "127.0.0.1"), port(p)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "live",
        help="capture live traffic and stream exchanges as NDJSON",
        description=__doc__,
        epilog=FILTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-i",
        "--interface",
        required=True,
        metavar="IFACE",
        help="interface to capture on (e.g. eth0, lo, any)",
    )
    p.add_argument(
        "--bpf",
        metavar="FILTER",
        default=None,
        help="BPF capture filter (default: 'tcp', or 'tcp port P ...' with --port)",
    )
    p.add_argument(
        "--port",
        type=port,
        action="append",
        default=[],
        metavar="P",
        help="TCP port P is a Kafka broker port (repeatable); Kafka is detected on any port anyway",
    )
    add_topic_ids_argument(p)
    add_limit_arguments(p)
    add_decode_arguments(p)
    p.add_argument(
        "-o", "--output", default="-", metavar="OUT", help="NDJSON output file (default: stdout)"
    )
    p.add_argument(
        "--format",
        choices=("ndjson", "events"),
        default="ndjson",
        help="events: flat index-ready documents, as export --format events (docs/dashboards.md)",
    )
    p.add_argument(
        "--rotate-bytes",
        type=positive_int,
        default=None,
        metavar="N",
        help="start a new output file (OUT.1, OUT.2, ...) after N bytes",
    )
    p.add_argument(
        "--rotate-seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help="start a new output file every S seconds",
    )
    p.add_argument(
        "--write-pcap",
        default=None,
        metavar="FILE",
        help="also save the captured packets to a pcap file",
    )
    p.add_argument(
        "--prometheus",
        type=listen_address,
        default=None,
        metavar="[HOST:]PORT",
        help="serve Prometheus metrics on HOST:PORT (default host 127.0.0.1)",
    )
    p.add_argument(
        "--pending-timeout",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="requests unanswered for S seconds are emitted as no_response (default 60)",
    )
    p.add_argument(
        "--idle-timeout",
        type=positive_float,
        default=600.0,
        metavar="S",
        help="connections silent for S seconds are closed and freed (default 600)",
    )
    p.add_argument(
        "--duration", type=positive_float, default=None, metavar="S", help="stop after S seconds"
    )
    p.add_argument(
        "--max-packets", type=positive_int, default=None, metavar="N", help="stop after N packets"
    )
    p.add_argument(
        "--snaplen",
        type=positive_int,
        default=262_144,
        metavar="BYTES",
        help="bytes kept per packet (default 256 KiB)",
    )
    p.add_argument(
        "--buffer-size",
        type=positive_int,
        default=32 << 20,
        metavar="BYTES",
        help="kernel receive buffer (default 32 MiB)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="capture with N processes that share the traffic by connection (an AF_PACKET"
        " fanout group, Linux); output and metrics are merged (default 1)",
    )
    add_filter_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kanalyze.live import LiveError, LiveSession, default_filter, open_source
    from kanalyze.live.report import of_session

    if args.workers > 1:
        from kanalyze.commands.live_workers import run_workers

        return run_workers(args)
    if (args.rotate_bytes or args.rotate_seconds) and args.output == "-":
        sys.stderr.write("kanalyze: error: --rotate-bytes/--rotate-seconds need -o FILE\n")
        return 2
    ctx = decode_context(args)
    # -Y and the selections pick the lines written (metrics still count every exchange)
    selection = build_selection(args, ctx, learn=not args.header_only)
    bpf = args.bpf if args.bpf is not None else default_filter(args.port)
    try:
        source = open_source(args.interface, bpf, args.snaplen, args.buffer_size)
    except LiveError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    try:
        outputs = _Outputs.open(args, source.linktype)
    except LiveError as e:
        source.close()
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2

    session = LiveSession(source, live_options(args), outputs.pcap)
    session.subscribe(
        exchange_writer(args, ctx, selection, session, outputs.ndjson, outputs.metrics)
    )
    # rotation by time; the encoder bounds its own per-connection cache
    session.on_tick(lambda _s: outputs.ndjson.tick())
    if outputs.metrics is not None:
        outputs.metrics.watch(session)
    sys.stderr.write(f"kanalyze: capturing on {args.interface} (filter: {bpf or 'none'})\n")
    sys.stderr.flush()
    _run_until_signalled(session, outputs)
    write_summary(of_session(session, streams=False), outputs.ndjson, args)
    return 1 if session.failed else 0


@dataclass(slots=True)
class _Outputs:
    """What a run writes to besides stderr: NDJSON, and optionally a pcap and a metrics endpoint."""

    ndjson: NdjsonOutput
    pcap: PcapWriter | None = None
    metrics: Metrics | None = None
    server: object | None = None  # the metrics HTTP server

    @classmethod
    def open(cls, args: argparse.Namespace, linktype: int) -> _Outputs:
        """Open every output the arguments ask for; LiveError (everything closed) if one fails."""
        metrics = server = pcap = None
        try:
            if args.prometheus is not None:
                from kanalyze.metrics import Metrics

                metrics = Metrics()
                host, mport = args.prometheus
                try:
                    server = metrics.serve(host, mport)
                except OSError as e:
                    raise LiveError(
                        f"cannot serve Prometheus metrics on {host}:{mport}: {e.strerror or e}"
                    ) from e
            if args.write_pcap:
                pcap = opened(
                    args.write_pcap, lambda: PcapWriter(args.write_pcap, linktype, args.snaplen)
                )
            ndjson = opened(
                args.output,
                lambda: NdjsonOutput(args.output, args.rotate_bytes, args.rotate_seconds),
            )
        except LiveError:
            if pcap is not None:
                pcap.close()
            if server is not None:
                server.shutdown()  # type: ignore[attr-defined]
            raise
        return cls(ndjson, pcap, metrics, server)

    def close(self) -> None:
        self.ndjson.close()
        if self.server is not None:
            self.server.shutdown()  # type: ignore[attr-defined]


def _run_until_signalled(session: LiveSession, outputs: _Outputs) -> None:
    """Run the session with SIGINT/SIGTERM stopping it; then close the outputs."""

    def on_signal(signum: int, _frame: object) -> None:
        session.stop(signal.Signals(signum).name)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        session.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        outputs.close()
        if outputs.ndjson.broken:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
