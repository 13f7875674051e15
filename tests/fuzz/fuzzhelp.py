"""Shared helpers for the fuzz regression and property tests."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"
REGRESSIONS = ROOT / "fuzz" / "regressions"


class Hang(Exception):
    """An input ran longer than its time bound (a hang or super-linear behaviour)."""


def bounded(fn: Callable[[bytes], object], data: bytes, seconds: float = 5.0) -> object:
    """Call fn(data), raising Hang if it uses more than `seconds` of CPU time (ITIMER_PROF,
    so a busy machine does not make a slow test look like a hang; main thread only)."""

    def _alarm(_sig, _frame):  # noqa: ANN001
        raise Hang(f"input of {len(data)} bytes still running after {seconds} CPU s")

    old = signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return fn(data)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
