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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dissectors.context import DecodeContext
    from kanalyze.query.selection import Selection

FILTER_EPILOG = """\
filter examples (docs/filters.md):
  -Y 'api == "Fetch" and latency > 100ms'
  -Y 'errors and topic == "orders"' --from 02:10 --to 02:15
"""


def add_filter_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("selecting exchanges (docs/filters.md)")
    g.add_argument(
        "-Y",
        "--filter",
        metavar="EXPR",
        default=None,
        help="display filter, e.g. 'api == \"Fetch\" and latency > 100ms'",
    )
    g.add_argument(
        "--from",
        dest="time_from",
        metavar="TIME",
        default=None,
        help="exchanges that begin at or after TIME: ISO-8601 or epoch seconds, HH:MM[:SS] "
        "(UTC, on the capture's first day), or +DURATION after the capture start (+30s)",
    )
    g.add_argument(
        "--to",
        dest="time_to",
        metavar="TIME",
        default=None,
        help="exchanges that begin before TIME (same forms as --from)",
    )
    g.add_argument(
        "--conn",
        action="append",
        default=[],
        metavar="ID|IP:PORT",
        help="only this connection: its id, or the client's or broker's IP:PORT or IP (repeatable)",
    )
    g.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME",
        help="only exchanges that touch topic NAME (repeatable)",
    )


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
        q = json.dumps(v)  # endpoints are written ip:port and [v6]:port
        return f"client == {q} or broker == {q}"
    if re.fullmatch(r"[0-9A-Fa-f.:]+", v.strip("[]")):
        q = json.dumps(v.strip("[]"))
        return f"client.ip == {q} or broker.ip == {q}"
    _fail(f"--conn {value!r}: expected a connection id, IP:PORT or IP")
    return ""  # pragma: no cover


def build_selection(
    args: argparse.Namespace,
    ctx: DecodeContext | None = None,
    *,
    paths: Sequence[str] = (),
    learn: bool = False,
) -> Selection | None:
    """The selection the options ask for, None when none was given; a bad filter or option is
    one error (with a caret under the bad token) on stderr and exit status 2."""
    text = getattr(args, "filter", None)
    conns = getattr(args, "conn", None) or []
    topics = getattr(args, "topic", None) or []
    lo_text, hi_text = getattr(args, "time_from", None), getattr(args, "time_to", None)
    if text is None and not conns and not topics and lo_text is None and hi_text is None:
        return None
    # imported only now: a run without selection options never loads the filter language
    from kanalyze.query.compile import Filter, compile_filter
    from kanalyze.query.parse import FilterError
    from kanalyze.query.selection import Selection, TimeBound
    from kanalyze.query.subject import Env

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
        filters.append(
            compile_filter(" or ".join(f"topic == {json.dumps(t)}" for t in topics), env)
        )
    bounds = (
        TimeBound(lo_text, "--from") if lo_text is not None else None,
        TimeBound(hi_text, "--to") if hi_text is not None else None,
    )
    return Selection(filters, bounds, env, paths, learn)


def selected_session(
    args: argparse.Namespace,
    session,
    ctx: DecodeContext | None = None,  # noqa: ANN001
    learn: bool = False,
):  # noqa: ANN201 - Session or SelectedSession
    """`session` itself without selection options, else a view of it keeping the selected
    exchanges (exit 2 on a bad filter)."""
    sel = build_selection(args, ctx, paths=session.paths, learn=learn)
    if sel is None:
        return session
    from kanalyze.query.selection import SelectedSession

    return SelectedSession(session, sel)


def selection_callback(
    args: argparse.Namespace,
    ctx: DecodeContext | None,
) -> Callable[[object], bool] | None:
    """For push consumers (live): a predicate, or None when every exchange is kept."""
    return build_selection(args, ctx)
