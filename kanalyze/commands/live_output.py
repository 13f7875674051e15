"""What one live process and `live --workers` share: the engine options from the command line,
the exchange writer (NDJSON lines and metrics observations) and the summary on stderr.

Apart from `commands/live.py` so that the worker front end (`commands/live_workers.py`) uses
them without importing the command that dispatches to it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar

from kanalyze.commands.common import engine_options
from kanalyze.live.errors import LiveError

if TYPE_CHECKING:
    from dissectors import DecodeContext
    from kanalyze.correlation import Exchange
    from kanalyze.live import LiveOptions, LiveSession
    from kanalyze.live.output import NdjsonOutput
    from kanalyze.live.report import LiveReport
    from kanalyze.query.selection import Selection

__all__ = [
    "LineOut",
    "Observer",
    "exchange_writer",
    "live_options",
    "opened",
    "worker_pcap",
    "write_summary",
]

T = TypeVar("T")


def opened(name: str, make: Callable[[], T]) -> T:
    """`make()`, an output file opened; a failure is the one-line `LiveError` naming `name`."""
    try:
        return make()
    except OSError as e:
        raise LiveError(f"cannot write {name}: {e.strerror or e}") from e


def live_options(args: argparse.Namespace) -> LiveOptions:
    from kanalyze.live import LiveOptions

    eopts = engine_options(args, pending_timeout_ns=int(args.pending_timeout * 1e9))
    return LiveOptions(
        engine=eopts,
        pending_timeout_s=args.pending_timeout,
        idle_timeout_s=args.idle_timeout,
        duration_s=args.duration,
        max_packets=args.max_packets,
    )


class LineOut(Protocol):
    """Where the exchange writer puts lines: `NdjsonOutput`, or a worker's batch."""

    broken: bool

    def write(self, line: str) -> None: ...


class Observer(Protocol):
    """What sees every exchange with its encoded form: `Metrics`, or a worker's batch."""

    def observe(self, ex: Exchange, d: dict) -> None: ...


def exchange_writer(
    args: argparse.Namespace,
    ctx: DecodeContext,
    selection: Selection | None,
    session: LiveSession,
    out: LineOut,
    metrics: Observer | None,
) -> Callable[[Exchange], None]:
    """The subscriber: one NDJSON line per selected exchange, and the metrics observation
    (of every exchange)."""
    from kanalyze.export import ExchangeEncoder, dumps

    decode = not args.header_only
    enc = ExchangeEncoder(ctx, decode=decode)
    # metrics need bodies; in header-only mode a second encoder decodes them (records skipped)
    menc = enc if decode else ExchangeEncoder(replace(ctx, decode_records=False), decode=True)
    if args.format == "events":
        from kanalyze.export.events import EventEncoder, TextLines

        enc = TextLines(EventEncoder(ctx, decode=decode))  # type: ignore[assignment]

    def on_exchange(ex: Exchange) -> None:
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

    return on_exchange


def write_summary(
    r: LiveReport,
    out: NdjsonOutput,
    args: argparse.Namespace,
    workers: list[LiveReport] | None = None,
) -> None:
    """The summary on stderr; with `--workers`, `r` is the sum and `workers` each one's share."""
    c = r.counters
    lines = [
        f"kanalyze live: {r.stop_reason or 'stopped'} after {r.stopped - r.started:.1f} s"
        f" on {args.interface}"
    ]
    kern = ""
    if c.kernel_packets is not None:
        kern = f" (kernel: {c.kernel_packets} passed the filter, {c.kernel_drops} dropped)"
    lines.append(f"  packets: {c.packets} captured, {c.bytes} bytes{kern}")
    if workers:

        def each(values: list[int | None]) -> str:
            return " + ".join(str(v or 0) for v in values)

        lines.append(
            f"  workers: {len(workers)}: packets {each([w.counters.packets for w in workers])}"
            f", kernel drops {each([w.counters.kernel_drops for w in workers])}"
            f", exchanges {each([w.exchanges for w in workers])}"
        )
    if c.interface_down:
        lines.append(
            f"  interface down: {c.interface_down} times (capture resumed each time it came back)"
        )
    if c.truncated:
        lines.append(
            f"  truncated: {c.truncated} packets longer than the snap length ({args.snaplen})"
        )
    status = ", ".join(f"{k} {v}" for k, v in sorted(r.by_status.items()))
    lines.append(f"  exchanges: {r.exchanges}" + (f" ({status})" if status else ""))
    lines.append(
        f"  connections: {r.connections} seen, {r.kafka_connections} Kafka, "
        f"{r.non_kafka_connections} not Kafka, "
        f"{r.empty_connections} empty, {r.idle_closed} closed as idle"
    )
    if r.skipped or r.gaps:
        lines.append(
            f"  bytes skipped while resynchronizing: {r.skipped}; lost in capture gaps: {r.gaps}"
        )
    # the engine's bounds (connections closed so far); decoding bounds show on the exchanges
    hit = ", ".join(f"{k} {v}" for k, v in r.limit_hits.items() if v)
    if hit:
        lines.append(f"  limits hit: {hit} (docs/limits.md)")
    if out.files:
        lines.append(f"  output: {', '.join(out.files)} ({out.lines} lines)")
    elif out.broken:
        lines.append("  output: stdout closed by the reader")
    if args.write_pcap:
        pcaps = [worker_pcap(args.write_pcap, i) for i in range(len(workers))] if workers else []
        lines.append(f"  pcap: {', '.join(pcaps) or args.write_pcap}")
    sys.stderr.write("\n".join(lines) + "\n")


def worker_pcap(path: str, index: int) -> str:
    """The pcap file of worker `index` for --write-pcap PATH: live.pcap -> live.w0.pcap."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.w{index}.{ext}" if dot and "/" not in ext else f"{path}.w{index}"
