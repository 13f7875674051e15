"""Aligned text tables and the units in their cells, drawn by rich.

Why rich: alignment, column widths and colour (with `NO_COLOR` respected) are its job, and a
hand-padded f-string breaks at the first long client id. Output is plain text when stdout is
not a terminal: no escape codes, no wrapping (the table keeps its natural width), no trailing
spaces, so snapshots and `grep` see the same lines a person does.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO

PLAIN_WIDTH = 1000  # piped output: wide enough that no table wraps
RICH_MAX_ROWS = 2000  # longer tables are written directly even on a terminal (rich: ~1.5 ms/row)


@dataclass(frozen=True, slots=True)
class Col:
    """One column: header, the row key it shows, a formatter, right-aligned unless text."""

    header: str
    key: str
    fmt: Callable[[object], str] = lambda v: dash(v)
    right: bool = True


def dash(v: object) -> str:
    """A cell's text: '-' for missing, lists joined by ', ' (never a Python repr)."""
    if v is None or v == "" or v == []:
        return "-"
    if isinstance(v, list | tuple | set | frozenset):
        return ", ".join(dash(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k} {dash(x)}" for k, x in v.items())
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def count(v: object) -> str:
    return "-" if v is None else f"{v:,}"


def nbytes(v: object) -> str:
    """Bytes with a binary unit: 812 B, 5.2 KiB, 13.1 MiB."""
    if v is None:
        return "-"
    n = float(v)  # type: ignore[arg-type]
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def ms(v: object) -> str:
    """Milliseconds: 0.43 ms, 12.5 ms, 1,234 ms."""
    if v is None:
        return "-"
    x = float(v)  # type: ignore[arg-type]
    if x >= 1000:
        return f"{x:,.0f} ms"
    if x >= 10:
        return f"{x:.1f} ms"
    return f"{x:.2f} ms"


def seconds(v: object) -> str:
    return "-" if v is None else f"{float(v):.3f} s"  # type: ignore[arg-type]


def rate(v: object) -> str:
    """Bytes per second with a unit."""
    return "-" if v is None else nbytes(v) + "/s"


def clock(v: object) -> str:
    """A capture timestamp (epoch seconds) as UTC time of day with milliseconds."""
    if v is None:
        return "-"
    t = datetime.fromtimestamp(float(v), UTC)  # type: ignore[arg-type]
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def stamp(v: object) -> str:
    """A capture timestamp as a full UTC date and time."""
    if v is None:
        return "-"
    t = datetime.fromtimestamp(float(v), UTC)  # type: ignore[arg-type]
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d} UTC"


class Out:
    """Where text views are written: a terminal gets colour (unless NO_COLOR) and its width;
    anything else gets plain text at the tables' natural width."""

    def __init__(self, stream: IO[str] | None = None, color: bool | None = None) -> None:
        from rich.console import Console

        self.stream = sys.stdout if stream is None else stream
        tty = _isatty(self.stream)
        self.color = tty and not os.environ.get("NO_COLOR") if color is None else color
        self.tty = tty
        self._buf = io.StringIO()
        self.console = Console(
            file=self._buf,
            width=_width(self.stream) if tty else PLAIN_WIDTH,
            color_system="standard" if self.color else None,
            force_terminal=self.color,
            no_color=not self.color,
            highlight=False,
            emoji=False,
            markup=False,
        )

    def _flush(self) -> None:
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        self.stream.write("\n".join(line.rstrip() for line in text.split("\n")))

    def heading(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(text, style="bold underline" if self.color else ""))
        self._flush()

    def line(self, text: str = "", style: str = "") -> None:
        from rich.text import Text

        self.console.print(Text(text, style=style if self.color else ""))
        self._flush()

    def table(
        self,
        cols: Sequence[Col],
        rows: Iterable[dict[str, object]],
        empty: str = "(none)",
        row_style: Callable[[dict[str, object]], str] | None = None,
    ) -> None:
        from rich import box
        from rich.table import Table

        rows = list(rows)
        if not rows:
            self.line("  " + empty)
            return
        if not self.tty and not self.color or len(rows) > RICH_MAX_ROWS:
            self._flush()
            self.stream.write(plain_table(cols, rows))
            return
        t = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1),
            header_style="bold" if self.color else "",
        )
        for c in cols:
            t.add_column(
                c.header,
                justify="right" if c.right else "left",
                no_wrap=not self.tty,
                overflow="fold",
            )
        for r in rows:
            style = row_style(r) if row_style is not None and self.color else None
            t.add_row(*(c.fmt(r.get(c.key)) for c in cols), style=style)
        self.console.print(t)
        self._flush()


def plain_table(cols: Sequence[Col], rows: Sequence[dict[str, object]]) -> str:
    """The same text rich draws for a table of one-line cells (SIMPLE_HEAD box, no edge, one
    space of padding: header, a rule, the rows), computed directly: rich measures every cell
    through its layout engine (about 1.5 ms a row), too slow for a table of 100,000 rows."""
    from rich.cells import cell_len

    cells = [[c.fmt(r.get(c.key)) for c in cols] for r in rows]
    heads = [c.header for c in cols]
    widths = [max(cell_len(x) for x in col) for col in zip(heads, *cells, strict=True)]

    def line(values: Sequence[str]) -> str:
        parts = []
        for c, v, w in zip(cols, values, widths, strict=True):
            pad = " " * (w - cell_len(v))
            parts.append(pad + v if c.right else v + pad)
        return "   ".join(parts).rstrip()

    total = sum(widths) + 3 * (len(widths) - 1)
    out = [line(heads), "─" * total]
    out.extend(line(v) for v in cells)
    return "\n".join(out) + "\n"


def render(fn: Callable[[Out], None], width: int | None = None) -> str:
    """A view's plain text (no colour) as a string: what tests snapshot."""
    buf = io.StringIO()
    fn(Out(buf, color=False))
    return buf.getvalue()


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _width(stream: IO[str]) -> int:
    """The terminal's width; a terminal that reports none (a fresh pty reports 0 columns)
    gets $COLUMNS or 100."""
    try:
        cols = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        cols = 0
    if cols >= 20:
        return cols
    env = os.environ.get("COLUMNS", "")
    return int(env) if env.isdigit() and int(env) >= 20 else 100
