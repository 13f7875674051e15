"""`kanalyze live --workers N` (N > 1): the command around `kanalyze.live.pool.WorkerPool`.

Same arguments, outputs and exit statuses as one process (kanalyze/commands/live.py); what
differs: the NDJSON lines come from N engines, merged in start-time order by the workers'
watermarks (`kanalyze.live.merge`: a silent worker holds the others' lines at most a second),
`--write-pcap live.pcap` writes one file per worker (`live.w0.pcap`, ...), the summary adds
a per-worker line, and `/metrics` adds `kanalyze_worker_*{worker}` series. Each worker learns
topic ids from the Metadata responses it sees itself: pass `--topic-ids` to name them in every
worker.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from kanalyze.capture.writer import PcapWriter
from kanalyze.commands.common import decode_context
from kanalyze.commands.live_output import (
    exchange_writer,
    live_options,
    opened,
    worker_pcap,
    write_summary,
)
from kanalyze.live.errors import LiveError
from kanalyze.live.output import NdjsonOutput
from kanalyze.query.cli import build_selection

if TYPE_CHECKING:
    from kanalyze.correlation import Exchange
    from kanalyze.live.merge import Line
    from kanalyze.live.pool import WorkerPool
    from kanalyze.live.session import LiveSession
    from kanalyze.live.worker import Batcher
    from kanalyze.metrics import Metrics, Observation


def _open_outputs(args: argparse.Namespace, linktype: int) -> tuple[NdjsonOutput, list]:
    pcaps: list[PcapWriter | None] = []
    try:
        if args.write_pcap:
            for i in range(args.workers):
                name = worker_pcap(args.write_pcap, i)
                pcaps.append(opened(name, lambda n=name: PcapWriter(n, linktype, args.snaplen)))
        ndjson = opened(
            args.output,
            lambda: NdjsonOutput(args.output, args.rotate_bytes, args.rotate_seconds),
        )
    except LiveError:
        for p in pcaps:
            if p is not None:
                p.close()
        raise
    return ndjson, pcaps or [None] * args.workers


def _serve(pool: WorkerPool, args: argparse.Namespace) -> tuple[Metrics, object]:
    from kanalyze.live.pool_metrics import PoolCollector
    from kanalyze.metrics import Metrics

    metrics = Metrics()
    metrics.registry.register(PoolCollector(pool))
    host, mport = args.prometheus
    try:
        server = metrics.serve(host, mport)
    except OSError as e:
        raise LiveError(
            f"cannot serve Prometheus metrics on {host}:{mport}: {e.strerror or e}"
        ) from e
    return metrics, server


def run_workers(args: argparse.Namespace) -> int:
    from kanalyze.live import default_filter
    from kanalyze.live.fanout import open_fanout
    from kanalyze.live.pool import WorkerPool

    if (args.rotate_bytes or args.rotate_seconds) and args.output == "-":
        sys.stderr.write("kanalyze: error: --rotate-bytes/--rotate-seconds need -o FILE\n")
        return 2
    ctx = decode_context(args)
    selection = build_selection(args, ctx, learn=not args.header_only)
    bpf = args.bpf if args.bpf is not None else default_filter(args.port)
    try:
        sources, _group = open_fanout(
            args.interface, bpf, args.workers, args.snaplen, args.buffer_size
        )
    except LiveError as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    try:
        ndjson, pcaps = _open_outputs(args, sources[0].linktype)
    except LiveError as e:
        for src in sources:
            src.close()
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    observe = args.prometheus is not None

    def subscriber(session: LiveSession, batch: Batcher) -> Callable[[Exchange], None]:
        return exchange_writer(args, ctx, selection, session, batch, batch if observe else None)

    pool = WorkerPool(sources, live_options(args), subscriber, pcaps)
    pool.start()  # forked before any thread of ours starts (the metrics server's)
    metrics = server = None
    if observe:
        try:
            metrics, server = _serve(pool, args)
        except LiveError as e:
            pool.stop(str(e))
            pool.stop(str(e))
            pool.run(lambda _lines: None)
            ndjson.close()
            sys.stderr.write(f"kanalyze: error: {e}\n")
            return 2

    def on_lines(lines: list[Line]) -> None:
        if ndjson.broken:
            return
        try:
            ndjson.write_many(lines)
        except BrokenPipeError:
            ndjson.broken = True
            pool.stop("output closed")

    def on_observations(obs: list[Observation]) -> None:
        if metrics is not None:
            for o in obs:
                metrics.apply(o)

    def on_signal(signum: int, _frame: object) -> None:
        pool.stop(signal.Signals(signum).name)

    sys.stderr.write(
        f"kanalyze: capturing on {args.interface} (filter: {bpf or 'none'};"
        f" {args.workers} workers)\n"
    )
    sys.stderr.flush()
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = pool.run(
            on_lines,
            on_observations if metrics is not None else None,
            ndjson.tick,
            args.duration,
        )
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        ndjson.close()
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
        if ndjson.broken:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    for i in result.lost:
        sys.stderr.write(f"kanalyze: worker {i} ended without its final report\n")
    write_summary(result.total, ndjson, args, result.workers)
    return 1 if result.total.failed or result.lost else 0
