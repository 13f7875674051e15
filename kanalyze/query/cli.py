"""The filter and selection options every reading command shares (-Y, --from/--to, --conn,
--topic), and the one place that turns them into a selection or a one-line error, exit 2.

Commands call `add_filter_arguments(parser)` and wrap their session with
`selected_session(args, session, ctx)`; nothing else in a command needs to know filters.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureStats, read_captures
from kanalyze.query.compile import Filter, compile_filter
from kanalyze.query.fields import start_us
from kanalyze.query.parse import FilterError
from kanalyze.query.subject import Env, Subject
from kanalyze.query.values import DURATION_MS, parse_time

FILTER_EPILOG = """\
filter examples (docs/filters.md):
  -Y 'api == "Fetch" and latency > 100ms'
  -Y 'errors and topic == "orders"' --from 02:10 --to 02:15
"""

_REL = re.compile(r"\+?([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|min|h)")
_CLOCK = re.compile(r"[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?")


def add_filter_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selecting exchanges (docs/filters.md)")
    g.add_argument("-Y", "--filter", metavar="EXPR", default=None,
                   help='display filter, e.g. \'api == "Fetch" and latency > 100ms\'')
    g.add_argument("--from", dest="time_from", metavar="TIME", default=None,
                   help="exchanges that begin at or after TIME: ISO-8601 or epoch seconds, HH:MM[:SS] "
                        "(UTC, on the capture's first day), or +DURATION after the capture start (+30s)")
    g.add_argument("--to", dest="time_to", metavar="TIME", default=None,
                   help="exchanges that begin before TIME (same forms as --from)")
    g.add_argument("--conn", action="append", default=[], metavar="ID|IP:PORT",
                   help="only this connection: its id, or the client's or broker's IP:PORT or IP (repeatable)")
    g.add_argument("--topic", action="append", default=[], metavar="NAME",
                   help="only exchanges that touch topic NAME (repeatable)")


def _fail(message: str) -> None:
    sys.stderr.write(f"kanalyze: error: {message}\n")
    raise SystemExit(2)


def _conn_text(value: str) -> str:
    """The filter text for one --conn value."""
    v = value.strip()
    if v.isdigit():
        return f"conn == {int(v)}"
    host, sep, port = v.rpartition(":")
    if sep and port.isdigit() and host and (host.count(":") == 0 or host.startswith("[")):
        q = json.dumps(v if not host.startswith("[") else v)
        return f"client == {q} or broker == {q}"
    if re.fullmatch(r"[0-9A-Fa-f.:]+", v):
        q = json.dumps(v.strip("[]"))
        return f"client.ip == {q} or broker.ip == {q}"
    _fail(f"--conn {value!r}: expected a connection id, IP:PORT or IP")
    return ""  # pragma: no cover


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
            self.clock = timedelta(hours=int(h), minutes=int(mi), seconds=float(rest[0]) if rest else 0)
        elif re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
            self.absolute = int(round(float(t) * 1e6)) * 1000
        else:
            self.absolute = parse_time(t)
            if self.absolute is None:
                _fail(f"{option} {text!r}: expected ISO-8601, epoch seconds, HH:MM[:SS] or +DURATION (+30s)")

    def resolve(self, start_ns: int) -> int:
        if self.absolute is not None:
            return self.absolute
        if self.offset_ns is not None:
            return start_ns + self.offset_ns
        day = datetime.fromtimestamp(start_ns / 1e9, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
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

    def __init__(self, filters: list[Filter], bounds: tuple[TimeBound | None, TimeBound | None],
                 env: Env, paths: Sequence[str], learn: bool) -> None:
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
            if (self._lo is not None and ts < self._lo) or (self._hi is not None and ts >= self._hi):
                return False
        s = Subject(ex, self.env)
        for p in self.preds:
            if not p(s):
                return False
        self.selected += 1
        return True


def build_selection(args: argparse.Namespace, ctx: DecodeContext | None = None, *,
                    paths: Sequence[str] = (), learn: bool = False) -> Selection | None:
    """The selection the options ask for, None when none was given; a bad filter or option is
    one error (with a caret under the bad token) on stderr and exit status 2."""
    text = getattr(args, "filter", None)
    conns = getattr(args, "conn", None) or []
    topics = getattr(args, "topic", None) or []
    lo_text, hi_text = getattr(args, "time_from", None), getattr(args, "time_to", None)
    if text is None and not conns and not topics and lo_text is None and hi_text is None:
        return None
    env = Env(ctx)
    filters: list[Filter] = []
    if text is not None:
        try:
            filters.append(compile_filter(text, env))
        except FilterError as e:
            sys.stderr.write(f"kanalyze: error: bad filter: {e.render(text, '  ')}\n")
            raise SystemExit(2) from None
    if conns:
        filters.append(compile_filter(" or ".join(f"({_conn_text(c)})" for c in conns), env))
    if topics:
        filters.append(compile_filter(" or ".join(f"topic == {json.dumps(t)}" for t in topics), env))
    bounds = (TimeBound(lo_text, "--from") if lo_text is not None else None,
              TimeBound(hi_text, "--to") if hi_text is not None else None)
    return Selection(filters, bounds, env, paths, learn)


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


def selected_session(args: argparse.Namespace, session, ctx: DecodeContext | None = None,  # noqa: ANN001
                     learn: bool = False):  # noqa: ANN201 - Session or SelectedSession
    """`session` itself without selection options, else a view of it keeping the selected
    exchanges (exit 2 on a bad filter)."""
    sel = build_selection(args, ctx, paths=session.paths, learn=learn)
    return session if sel is None else SelectedSession(session, sel)


def selection_callback(args: argparse.Namespace, ctx: DecodeContext | None,
                       ) -> Callable[[object], bool] | None:
    """For push consumers (live): a predicate, or None when every exchange is kept."""
    return build_selection(args, ctx)
