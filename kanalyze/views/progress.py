"""A progress bar on stderr for long reads: bytes read of the total, rate, time left.

Why here and not in the readers: the readers stay silent and fast; this wraps the packet
iterator of a `Session` and counts the bytes read from the packets (`ReadMeter`), so the
readers need no hook. The TUI's indexing percentage uses the same meter.

The bar is shown only where a person is watching: stderr is a terminal, `TERM` is not
`dumb`, and neither `CI` nor `NO_COLOR` is set (`KANALYZE_NO_PROGRESS` turns it off too).
It appears after `delay` seconds, so quick runs print nothing, and it is transient: the
line is erased when the read ends, leaving stdout's output as it would be without it.
"""

from __future__ import annotations

import gzip
import os
import sys
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

from kanalyze.capture import Packet

CHECK_EVERY = 2048  # packets between two looks at the clock
REFRESH_S = 0.2
DEFAULT_DELAY_S = 1.0


def wanted(stream: IO[str] | None = None, env: dict[str, str] | None = None) -> bool:
    """Whether a progress bar may be drawn on `stream` (default stderr)."""
    stream = sys.stderr if stream is None else stream
    env_: Mapping[str, str] = os.environ if env is None else env
    if any(env_.get(k) for k in ("CI", "NO_COLOR", "KANALYZE_NO_PROGRESS")):
        return False
    if env_.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def for_command(streams_stdout: bool) -> bool:
    """Progress for a command: wanted on stderr, and not while a streaming command's output
    scrolls on the same terminal (export, records to a terminal are not silent anyway)."""
    if not wanted():
        return False
    if streams_stdout:
        try:
            return not sys.stdout.isatty()
        except (AttributeError, ValueError):
            return True
    return True


def delay_from_env(env: dict[str, str] | None = None) -> float:
    """`KANALYZE_PROGRESS_DELAY` (seconds) overrides the default delay (tests use 0)."""
    env_: Mapping[str, str] = os.environ if env is None else env
    text = env_.get("KANALYZE_PROGRESS_DELAY")
    if text is None:
        return DEFAULT_DELAY_S
    try:
        return max(0.0, float(text))
    except ValueError:
        return DEFAULT_DELAY_S


GZIP_MAGIC = b"\x1f\x8b"
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
PCAP_HEADER = 24
PCAP_RECORD = 16  # per packet record header
PCAPNG_EPB = 32  # enhanced packet block: header, interface, time, lengths, trailing length


class ReadMeter:
    """How far the readers are in their files, counted from the packets they hand out.

    Why from the packets: the readers stay untouched and silent. A pcap file is exactly its
    header plus a 16-byte record header and the data per packet; a pcapng file is close to
    32 bytes and padding per enhanced packet block (options and other blocks are not seen,
    so the estimate ends a little short of 100 %). A .gz file is measured against its
    uncompressed size (the gzip trailer's, below 4 GiB). Stdin and pipes have no total."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.done: list[int] = []
        self.totals: list[int | None] = []
        self.pcapng: list[bool] = []
        for p in paths:
            kind, total = _probe(p)
            self.pcapng.append(kind == "pcapng")
            self.totals.append(total)
            self.done.append(PCAP_HEADER if kind == "pcap" else 0)
        known = [t for t in self.totals if t is not None]
        self.total: int | None = sum(known) if len(known) == len(self.totals) else None

    def packet(self, pkt: Packet) -> None:
        n = len(pkt.data)
        i = pkt.file_index
        if i < len(self.done):
            if self.pcapng[i]:
                self.done[i] += PCAPNG_EPB + n + (-n & 3)
            else:
                self.done[i] += PCAP_RECORD + n

    @property
    def bytes(self) -> int:
        return sum(self.done)

    def fraction(self) -> float | None:
        """0..1 of the inputs read; None when a total is unknown."""
        if not self.total:
            return None
        return min(1.0, self.bytes / self.total)


def _probe(path: str) -> tuple[str | None, int | None]:
    """(format, bytes the readers will go through) of one input; (None, None) when unknown."""
    if path == "-" or not os.path.isfile(path):
        return None, None
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] != GZIP_MAGIC:
                return ("pcapng" if head == PCAPNG_MAGIC else "pcap"), size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
        with gzip.open(path, "rb") as g:
            inner = g.read(4)
    except (OSError, EOFError, ValueError, zlib.error):
        return None, None
    if isize < size // 2:  # wrapped past 4 GiB (or damaged): no trustworthy total
        return None, None
    return ("pcapng" if inner == PCAPNG_MAGIC else "pcap"), isize


class Bar:
    """The rich progress display, created only once it is due (rich is imported then)."""

    def __init__(self, total: int | None, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        console = Console(file=stream, highlight=False)
        self.progress = Progress(
            TextColumn("reading"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.task: Any = self.progress.add_task("reading", total=total)
        self.progress.start()

    def update(self, done: int) -> None:
        self.progress.update(self.task, completed=done)
        self.progress.refresh()

    def stop(self) -> None:
        self.progress.stop()


def track(
    packets: Iterator[Packet],
    paths: Sequence[str],
    stream: IO[str] | None = None,
    delay: float | None = None,
) -> Iterator[Packet]:
    """`packets` unchanged, with a progress bar on `stream` while they are read."""
    stream = sys.stderr if stream is None else stream
    delay = delay_from_env() if delay is None else delay
    meter = ReadMeter(paths)
    count = meter.packet
    start = time.monotonic()
    next_draw = start + delay
    bar: Bar | None = None
    n = 0
    try:
        for pkt in packets:
            count(pkt)
            yield pkt
            n += 1
            if n % CHECK_EVERY and n != 1:
                continue
            now = time.monotonic()
            if now < next_draw:
                continue
            if bar is None:
                bar = Bar(meter.total, stream)
            bar.update(meter.bytes)
            next_draw = now + REFRESH_S
    finally:
        if bar is not None:
            bar.stop()
