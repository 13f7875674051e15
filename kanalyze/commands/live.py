"""`kanalyze live`: capture from a network interface, one NDJSON line per exchange as it completes.

Needs root or CAP_NET_RAW. Stops on SIGINT/SIGTERM, --duration or --max-packets,
then flushes every exchange still in flight and prints a summary to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from dataclasses import replace
from typing import TextIO

from kanalyze.commands.common import (
    add_decode_arguments,
    add_limit_arguments,
    decode_context,
    engine_options,
    port,
    positive_int,
)
from kanalyze.query.cli import FILTER_EPILOG, add_filter_arguments, build_selection


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def listen_address(text: str) -> tuple[str, int]:
    """PORT or HOST:PORT (default host 127.0.0.1)."""
    host, sep, p = text.rpartition(":")
    return (host.strip("[]") if sep else "127.0.0.1"), port(p)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("live", help="capture live traffic and stream exchanges as NDJSON", description=__doc__,
                       epilog=FILTER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--interface", required=True, metavar="IFACE", help="interface to capture on (e.g. eth0, lo, any)")
    p.add_argument("--bpf", metavar="FILTER", default=None, help="BPF capture filter (default: 'tcp', or 'tcp port P ...' with --port)")
    p.add_argument("--port", type=port, action="append", default=[], metavar="P", help="TCP port P is a Kafka broker port (repeatable); Kafka is detected on any port anyway")
    add_limit_arguments(p)
    add_decode_arguments(p)
    p.add_argument("-o", "--output", default="-", metavar="OUT", help="NDJSON output file (default: stdout)")
    p.add_argument("--rotate-bytes", type=positive_int, default=None, metavar="N", help="start a new output file (OUT.1, OUT.2, ...) after N bytes")
    p.add_argument("--rotate-seconds", type=positive_float, default=None, metavar="S", help="start a new output file every S seconds")
    p.add_argument("--write-pcap", default=None, metavar="FILE", help="also save the captured packets to a pcap file")
    p.add_argument("--prometheus", type=listen_address, default=None, metavar="[HOST:]PORT", help="serve Prometheus metrics on HOST:PORT (default host 127.0.0.1)")
    p.add_argument("--pending-timeout", type=positive_float, default=60.0, metavar="S", help="requests unanswered for S seconds are emitted as no_response (default 60)")
    p.add_argument("--idle-timeout", type=positive_float, default=600.0, metavar="S", help="connections silent for S seconds are closed and freed (default 600)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S", help="stop after S seconds")
    p.add_argument("--max-packets", type=positive_int, default=None, metavar="N", help="stop after N packets")
    p.add_argument("--snaplen", type=positive_int, default=262_144, metavar="BYTES", help="bytes kept per packet (default 256 KiB)")
    p.add_argument("--buffer-size", type=positive_int, default=32 << 20, metavar="BYTES", help="kernel receive buffer (default 32 MiB)")
    add_filter_arguments(p)
    p.set_defaults(run=run)


class NdjsonOutput:
    """Lines to stdout or a file, flushed per line; optional rotation to OUT.1, OUT.2, ..."""

    def __init__(self, path: str, rotate_bytes: int | None = None, rotate_seconds: float | None = None) -> None:
        if path == "-" and (rotate_bytes or rotate_seconds):
            raise ValueError("--rotate-bytes/--rotate-seconds need -o FILE")
        self.path = path
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.files: list[str] = []
        self.lines = 0
        self.broken = False
        self._f: TextIO = sys.stdout
        self._open()

    def _open(self) -> None:
        if self.path == "-":
            self._f = sys.stdout
            return
        name = self.path if not self.files else f"{self.path}.{len(self.files)}"
        self._f = open(name, "w", encoding="utf-8")  # noqa: SIM115
        self.files.append(name)
        self._size = 0
        self._opened = time.monotonic()

    def write(self, line: str) -> None:
        f = self._f
        f.write(line)
        f.write("\n")
        f.flush()
        self.lines += 1
        if self.path != "-":
            self._size += len(line) + 1
            if self.rotate_bytes is not None and self._size >= self.rotate_bytes:
                self._rotate()

    def tick(self) -> None:
        if self.rotate_seconds is not None and self.path != "-" and time.monotonic() - self._opened >= self.rotate_seconds:
            self._rotate()

    def _rotate(self) -> None:
        self._f.close()
        self._open()

    def close(self) -> None:
        if self._f is not sys.stdout:
            self._f.close()
        elif not self.broken:
            with contextlib.suppress(BrokenPipeError):
                self._f.flush()


def run(args: argparse.Namespace) -> int:
    from kanalyze.export.ndjson import ExchangeEncoder, dumps
    from kanalyze.live import (
        LiveError,
        LiveOptions,
        LiveSession,
        PcapWriter,
        default_filter,
        open_source,
    )

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

    metrics = server = None
    pcap = None
    try:
        if args.prometheus is not None:
            from kanalyze.metrics import Metrics

            metrics = Metrics()
            host, mport = args.prometheus
            try:
                server = metrics.serve(host, mport)
            except OSError as e:
                raise LiveError(f"cannot serve Prometheus metrics on {host}:{mport}: {e.strerror or e}") from e
        if args.write_pcap:
            try:
                pcap = PcapWriter(args.write_pcap, source.linktype, args.snaplen)
            except OSError as e:
                raise LiveError(f"cannot write {args.write_pcap}: {e.strerror or e}") from e
        try:
            out = NdjsonOutput(args.output, args.rotate_bytes, args.rotate_seconds)
        except OSError as e:
            raise LiveError(f"cannot write {args.output}: {e.strerror or e}") from e
    except LiveError as e:
        source.close()
        if pcap is not None:
            pcap.close()
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2

    eopts = engine_options(args, pending_timeout_ns=int(args.pending_timeout * 1e9))
    lopts = LiveOptions(
        engine=eopts,
        pending_timeout_s=args.pending_timeout,
        idle_timeout_s=args.idle_timeout,
        duration_s=args.duration,
        max_packets=args.max_packets,
    )
    session = LiveSession(source, lopts, pcap)
    decode = not args.header_only
    enc = ExchangeEncoder(ctx, decode=decode)
    # metrics need bodies; in header-only mode a second encoder decodes them (records skipped)
    menc = enc if decode else ExchangeEncoder(replace(ctx, decode_records=False), decode=True)

    def on_exchange(ex) -> None:  # noqa: ANN001
        d = None
        if metrics is not None:
            d = menc.encode(ex)
            metrics.observe(ex, d)
        if out.broken or (selection is not None and not selection(ex)):
            return
        line = dumps(d) if d is not None and menc is enc else enc.line(ex)
        try:
            out.write(line)
        except BrokenPipeError:
            out.broken = True
            session.stop("output closed")

    session.subscribe(on_exchange)

    def on_tick(_s: object) -> None:
        out.tick()
        # the header-only encoder caches one JSON text per connection id, forever (reported
        # upstream); a long run with many connections would grow it without bound
        cache = getattr(enc, "_conn_json", None)
        if isinstance(cache, dict) and len(cache) > 10_000:
            cache.clear()

    session.on_tick(on_tick)
    if metrics is not None:
        metrics.watch(session)

    def on_signal(signum: int, _frame: object) -> None:
        session.stop(signal.Signals(signum).name)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.stderr.write(f"kanalyze: capturing on {args.interface} (filter: {bpf or 'none'})\n")
    sys.stderr.flush()
    try:
        session.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        out.close()
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
        if out.broken:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    write_summary(session, out, args)
    return 1 if session.failed else 0


def write_summary(session, out: NdjsonOutput, args: argparse.Namespace) -> None:  # noqa: ANN001
    st = session.stats
    c = session.source.counters
    es = session.engine.stats
    lines = [f"kanalyze live: {st.stop_reason or 'stopped'} after {st.stopped - st.started:.1f} s on {args.interface}"]
    kern = ""
    if c.kernel_packets is not None:
        kern = f" (kernel: {c.kernel_packets} passed the filter, {c.kernel_drops} dropped)"
    lines.append(f"  packets: {c.packets} captured, {c.bytes} bytes{kern}")
    if c.interface_down:
        lines.append(f"  interface down: {c.interface_down} times (capture resumed each time it came back)")
    if c.truncated:
        lines.append(f"  truncated: {c.truncated} packets longer than the snap length ({args.snaplen})")
    status = ", ".join(f"{k} {v}" for k, v in sorted(st.by_status.items()))
    lines.append(f"  exchanges: {st.exchanges}" + (f" ({status})" if status else ""))
    lines.append(
        f"  connections: {es.connections} seen, {es.kafka_connections} Kafka, {es.non_kafka_connections} not Kafka, "
        f"{es.empty_connections} empty, {st.idle_closed} closed as idle"
    )
    skipped = es.client.skipped + es.broker.skipped
    gaps = es.client.gaps + es.broker.gaps
    if skipped or gaps:
        lines.append(f"  bytes skipped while resynchronizing: {skipped}; lost in capture gaps: {gaps}")
    # the engine's bounds (connections closed so far); decoding bounds show on the exchanges
    hits = {"max_frame": es.event_counts.get("frame_too_large", 0), "max_ooo": es.client.limit_gaps + es.broker.limit_gaps, **es.limit_hits}
    hit = ", ".join(f"{k} {v}" for k, v in hits.items() if v)
    if hit:
        lines.append(f"  limits hit: {hit} (docs/limits.md)")
    if out.files:
        lines.append(f"  output: {', '.join(out.files)} ({out.lines} lines)")
    elif out.broken:
        lines.append("  output: stdout closed by the reader")
    if args.write_pcap:
        lines.append(f"  pcap: {args.write_pcap}")
    sys.stderr.write("\n".join(lines) + "\n")
