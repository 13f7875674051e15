"""A progress bar on stderr for long reads: bytes read of the total, rate, time left.

Why here and not in the readers: the readers stay silent and fast; this wraps the packet
iterator of a `Session`, and every few thousand packets asks the open files how far they are
(`tell()` on the raw file, so a .gz file counts compressed bytes against its size on disk).

The bar is shown only where a person is watching: stderr is a terminal, `TERM` is not
`dumb`, and neither `CI` nor `NO_COLOR` is set (`KANALYZE_NO_PROGRESS` turns it off too).
It appears after `delay` seconds, so quick runs print nothing, and it is transient: the
line is erased when the read ends, leaving stdout's output as it would be without it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

from kanalyze.capture import CaptureStats, Packet

CHECK_EVERY = 2048  # packets between two looks at the clock
REFRESH_S = 0.2
DEFAULT_DELAY_S = 1.0


def wanted(stream: IO[str] | None = None, env: dict[str, str] | None = None) -> bool:
    """Whether a progress bar may be drawn on `stream` (default stderr)."""
    stream = sys.stderr if stream is None else stream
    env = os.environ if env is None else env  # type: ignore[assignment]
    if any(env.get(k) for k in ("CI", "NO_COLOR", "KANALYZE_NO_PROGRESS")):
        return False
    if env.get("TERM") == "dumb":
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
    env = os.environ if env is None else env  # type: ignore[assignment]
    text = env.get("KANALYZE_PROGRESS_DELAY")
    if text is None:
        return DEFAULT_DELAY_S
    try:
        return max(0.0, float(text))
    except ValueError:
        return DEFAULT_DELAY_S


def input_sizes(paths: Sequence[str]) -> list[int | None]:
    """Size on disk of each regular input file; None for stdin, pipes and what cannot be sized."""
    out: list[int | None] = []
    for p in paths:
        try:
            out.append(os.path.getsize(p) if p != "-" and os.path.isfile(p) else None)
        except OSError:
            out.append(None)
    return out


def bytes_read(stats: CaptureStats, sizes: Sequence[int | None]) -> int:
    """Bytes of the inputs read so far: a finished (closed) file counts whole."""
    done = 0
    for i, f in enumerate(stats.sources):
        size = sizes[i] if i < len(sizes) else None
        if f is None:
            continue
        if f.closed:
            done += size or 0
            continue
        try:
            done += f.tell()
        except (OSError, ValueError):
            done += 0
    return done


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
    stats: CaptureStats,
    stream: IO[str] | None = None,
    delay: float | None = None,
) -> Iterator[Packet]:
    """`packets` unchanged, with a progress bar on `stream` while they are read."""
    stream = sys.stderr if stream is None else stream
    delay = delay_from_env() if delay is None else delay
    sizes = input_sizes(paths)
    total = sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None
    start = time.monotonic()
    next_draw = start + delay
    bar: Bar | None = None
    n = 0
    try:
        for pkt in packets:
            yield pkt
            n += 1
            if n % CHECK_EVERY and n != 1:
                continue
            now = time.monotonic()
            if now < next_draw:
                continue
            if bar is None:
                bar = Bar(total, stream)
            bar.update(bytes_read(stats, sizes))
            next_draw = now + REFRESH_S
    finally:
        if bar is not None:
            bar.stop()
