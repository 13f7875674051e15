"""A selection at work: the compiled -Y filter, --conn/--topic as filters, --from/--to
resolved against the capture's start, applied to each exchange in capture order (and the
topic-id names learned from every exchange, selected or not, when anything decodes bodies).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from kanalyze.capture import CaptureStats, read_captures
from kanalyze.query.compile import Filter
from kanalyze.query.fields import start_us
from kanalyze.query.subject import Env, Subject
from kanalyze.query.values import DURATION_MS, parse_time

_REL = re.compile(r"\+?([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|min|h)")
_CLOCK = re.compile(r"[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?")


def _fail(message: str) -> None:
    sys.stderr.write(f"kanalyze: error: {message}\n")
    raise SystemExit(2)


class TimeBound:
    """--from/--to: absolute, clock time on the capture's first day, or relative to its start."""

    def __init__(self, text: str, option: str) -> None:
        self.text = text
        self.absolute: int | None = None
        self.offset_ns: int | None = None
        self.clock: timedelta | None = None
        t = text.strip()
        m = _REL.fullmatch(t)
        if m is not None:
            self.offset_ns = int(float(m.group(1)) * DURATION_MS[m.group(2)] * 1e6)
        elif _CLOCK.fullmatch(t):
            h, mi, *rest = t.split(":")
            self.clock = timedelta(
                hours=int(h), minutes=int(mi), seconds=float(rest[0]) if rest else 0
            )
        elif re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
            if float(t) < 1e8:  # 1973: surely meant as seconds after the start
                _fail(
                    f"{option} {text!r}: a plain number is epoch seconds; for {t} seconds "
                    f"after the capture start write +{t}s"
                )
            self.absolute = int(round(float(t) * 1e6)) * 1000
        else:
            self.absolute = parse_time(t)
            if self.absolute is None:
                _fail(
                    f"{option} {text!r}: expected ISO-8601, epoch seconds, HH:MM[:SS] "
                    "or +DURATION (+30s)"
                )

    def resolve(self, start_ns: int) -> int:
        if self.absolute is not None:
            return self.absolute
        if self.offset_ns is not None:
            return start_ns + self.offset_ns
        day = datetime.fromtimestamp(start_ns / 1e9, UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        assert self.clock is not None
        return int(round((day + self.clock).timestamp() * 1e6)) * 1000

    @property
    def needs_start(self) -> bool:
        return self.absolute is None


def capture_start(paths: Sequence[str]) -> int | None:
    """The first packet's time (read again from the files; None for stdin or no packet)."""
    if "-" in paths:
        return None
    try:
        for pkt in read_captures(paths, CaptureStats()):
            return pkt.ts_ns
    except Exception:  # noqa: BLE001 - the real run reports unreadable inputs itself
        return None
    return None


class Selection:
    """The conjunction of -Y and the selection options; call it on each exchange in order."""

    def __init__(
        self,
        filters: list[Filter],
        bounds: tuple[TimeBound | None, TimeBound | None],
        env: Env,
        paths: Sequence[str],
        learn: bool,
    ) -> None:
        self.filters = filters
        self.env = env
        self.bounds = bounds
        self.paths = paths
        self._lo: int | None = None
        self._hi: int | None = None
        self._resolved = not any(b is not None for b in bounds)
        self.needs_bodies = any(f.needs_bodies for f in filters)
        self.learn = learn or self.needs_bodies
        self.preds = [f.pred for f in sorted(filters, key=lambda f: f.cost)]
        self.selected = 0

    def _resolve(self, first_ts: int) -> None:
        lo, hi = self.bounds
        start = None
        if any(b is not None and b.needs_start for b in self.bounds):
            start = capture_start(self.paths)
        if start is None:
            start = first_ts
        self.env.capture_start_ns = start
        self._lo = lo.resolve(start) if lo is not None else None
        self._hi = hi.resolve(start) if hi is not None else None
        self._resolved = True

    def __call__(self, ex) -> bool:  # noqa: ANN001 - an Exchange
        if self.learn:
            self.env.decoder.learn(ex)
        if not self._resolved:
            self._resolve(ex.start_ts)
        if self._lo is not None or self._hi is not None:
            ts = start_us(ex.start_ts)
            if (self._lo is not None and ts < self._lo) or (
                self._hi is not None and ts >= self._hi
            ):
                return False
        s = Subject(ex, self.env)
        for p in self.preds:
            if not p(s):
                return False
        self.selected += 1
        return True


def select(exchanges: Iterator, sel: Selection | None) -> Iterator:
    """The exchanges the selection keeps (all of them without one)."""
    if sel is None:
        yield from exchanges
        return
    for ex in exchanges:
        if sel(ex):
            yield ex


class SelectedSession:
    """A Session whose `exchanges()` yields only the selected ones (stats stay whole-capture)."""

    def __init__(self, session, sel: Selection) -> None:  # noqa: ANN001 - a Session
        self.base = session
        self.selection = sel

    def __getattr__(self, name: str) -> object:
        return getattr(self.base, name)

    def exchanges(self) -> Iterator:
        return select(self.base.exchanges(), self.selection)
