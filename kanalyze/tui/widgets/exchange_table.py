"""The exchanges table: a virtual list (only the visible lines are ever rendered), so a million
rows scroll without a freeze. Rows are indices into the store; cells are built on demand."""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kanalyze.tui.store import ExchangeStore


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: `least` is the narrowest it is drawn, `most` the widest its content may
    make it; `essential` columns are always shown (API with version, latency, status), the others
    only when their content fits beside them. `rank` is the order in which they claim room."""

    title: str
    least: int
    most: int
    rank: int
    sort: str | None = None
    right: bool = False
    essential: bool = False
    squeeze: bool = False  # shown narrower than its content rather than not at all


COLUMNS: tuple[Column, ...] = (
    Column("No.", 3, 9, 0, "time", right=True, essential=True),
    Column("Time", 9, 26, 4, "time", right=True, squeeze=True),
    Column("Conn", 4, 6, 6, "conn", right=True),
    Column("Client id", 9, 32, 5, None, squeeze=True),
    Column("API", 11, 30, 1, "api", essential=True),
    Column("Corr", 4, 11, 8, "corr", right=True),
    Column("Topic/partitions", 10, 60, 7, None),
    Column("Latency ms", 7, 12, 2, "latency", right=True, essential=True),
    Column("Status / error", 8, 60, 3, "status", essential=True),
)
TIME_FORMATS = ("relative", "absolute", "delta")  # seconds since the first exchange, UTC clock,
# seconds since the row above (as Wireshark's View > Time Display Format)


def _fit(text: str, width: int, right: bool = False) -> str:
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


def _fit_middle(text: str, width: int) -> str:
    """Cut in the middle: client ids differ at their end (producer-1, producer-2)."""
    if len(text) <= width:
        return text.ljust(width)
    if width < 5:
        return _fit(text, width)
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def layout(width: int, wanted: list[int]) -> list[int]:
    """Width of each column of COLUMNS (0: not shown) for a table `width` cells wide, given the
    width each column's content asks for. Columns claim room by rank at their wanted width;
    essential ones are always there (at their least width when room is short); what is left
    goes to the status (the last column)."""
    out = [0] * len(COLUMNS)
    used = 0
    by_rank = sorted(range(len(COLUMNS)), key=lambda i: COLUMNS[i].rank)
    for i in by_rank:
        c = COLUMNS[i]
        want = max(c.least, min(c.most, wanted[i]))
        if used + want + 1 <= width:
            out[i] = want
        elif c.squeeze and used + c.least + 1 <= width:
            out[i] = width - used - 1
        elif c.essential:
            out[i] = c.least
        else:
            continue
        used += out[i] + 1
    # too narrow even so: the essential columns give back their extra width, widest first
    while used > width:
        i = max(range(len(out)), key=lambda k: out[k] - COLUMNS[k].least if out[k] else -1)
        if not out[i] or out[i] <= COLUMNS[i].least:
            break
        out[i] -= 1
        used -= 1
    spare = width - used
    for i in (8, 6, 3):  # status (the last column), else topics, else client id takes the rest
        if out[i] and spare > 0:
            out[i] += spare
            break
    return out


class ExchangeTable(ScrollView, can_focus=True):
    """Virtual table over `store` rows listed in `rows`."""

    COMPONENT_CLASSES = {
        "exchange-table--header",
        "exchange-table--cursor",
        "exchange-table--error",
        "exchange-table--dim",
    }

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding("end,G", "last", "Last", show=False),
    ]

    class CursorMoved(Message):
        def __init__(self, table: ExchangeTable, index: int | None) -> None:
            super().__init__()
            self.table = table
            self.index = index  # into the store

        @property
        def control(self) -> ExchangeTable:
            return self.table

    class HeaderClicked(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, store: ExchangeStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.rows: array = array("q")  # store indices (8 bytes each: a million rows cost 8 MB)
        self.cursor = 0
        self.sort_key = "time"
        self.sort_reverse = False
        self.time_format = TIME_FORMATS[0]
        # the widest content met so far in each column (titles first): widths follow content
        self._seen = [len(c.title) for c in COLUMNS]
        self._widths = layout(80, self._seen)
        self._laid_out: tuple[int, tuple[int, ...]] = (-1, ())

    # -- data -----------------------------------------------------------------------------
    def set_rows(self, rows: Iterable[int], keep: int | None = None) -> None:
        """Replace the rows; keep the cursor on store index `keep` when it is still listed."""
        self.rows = rows = rows if isinstance(rows, array) else array("q", rows)
        if keep is not None:
            try:
                self.cursor = rows.index(keep)
            except ValueError:
                self.cursor = min(self.cursor, max(0, len(rows) - 1))
        else:
            self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self._resize()
        self._announce()

    def append_rows(self, rows: Iterable[int]) -> None:
        was_empty = not self.rows
        self.rows.extend(rows)
        self._resize()
        if was_empty and rows:
            self._announce()

    def _resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        self.refresh()

    def on_resize(self) -> None:
        self._resize()

    def widths(self) -> list[int]:
        """Column widths for the current size and content (recomputed when either changed)."""
        self._seen[0] = max(self._seen[0], len(str(len(self.store))))
        key = (self.size.width, tuple(self._seen))
        if key != self._laid_out:
            self._laid_out = key
            self._widths = layout(self.size.width, self._seen)
        return self._widths

    def set_time_format(self, fmt: str) -> None:
        self.time_format = fmt
        self._seen[1] = len(COLUMNS[1].title)
        self.refresh()

    def column_at(self, x: int) -> Column | None:
        for c, w in zip(COLUMNS, self.widths(), strict=True):
            if not w:
                continue
            if x < w + 1:
                return c
            x -= w + 1
        return None

    @property
    def current(self) -> int | None:
        return self.rows[self.cursor] if self.rows else None

    def _announce(self) -> None:
        self.post_message(self.CursorMoved(self, self.current))

    # -- movement -------------------------------------------------------------------------
    def move_to(self, row: int) -> None:
        if not self.rows:
            return
        row = max(0, min(len(self.rows) - 1, row))
        if row == self.cursor:
            return
        self.cursor = row
        self._scroll_cursor()
        self.refresh()
        self._announce()

    def _scroll_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * max(1, self.size.height - 2))

    def action_first(self) -> None:
        self.move_to(0)

    def action_last(self) -> None:
        self.move_to(len(self.rows) - 1)

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            col = self.column_at(event.x + int(self.scroll_x))
            if col is not None and col.sort:
                self.post_message(self.HeaderClicked(col.sort))
            return
        self.move_to(int(self.scroll_y) + event.y - 1)

    # -- rendering ------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self.rich_style
        widths = self.widths()
        if y == 0:
            style = self.get_component_rich_style("exchange-table--header")
            cells = []
            for c, w in zip(COLUMNS, widths, strict=True):
                if not w:
                    continue
                mark = ""
                if c.sort == self.sort_key and c.title != "No.":
                    mark = "▼" if self.sort_reverse else "▲"
                title = (
                    "Time (UTC)"
                    if c.title == "Time" and self.time_format == "absolute"
                    else c.title
                )
                if c.title == "Time" and self.time_format == "delta":
                    title = "Δ Time"
                cells.append(_fit(title + mark, w))
            return self._strip(" ".join(cells), style, scroll_x, width)
        pos = scroll_y + y - 1
        if pos >= len(self.rows):
            return Strip.blank(width, base)
        idx = self.rows[pos]
        text, problem = self._row_text(idx, pos, widths)
        style = base
        if problem:
            style = base + self.get_component_rich_style("exchange-table--error")
        if pos == self.cursor:
            style = style + self.get_component_rich_style("exchange-table--cursor")
        return self._strip(text, style, scroll_x, width)

    def _strip(self, text: str, style: Style, scroll_x: int, width: int) -> Strip:
        text = text[scroll_x:]
        return Strip([Segment(text.ljust(width)[:width], style)], width)

    def time_text(self, pos: int) -> str:
        """The Time cell of table line `pos` in the current time display format."""
        st = self.store
        row = st.row(self.rows[pos])
        if self.time_format == "absolute":
            sec, ns = divmod(row.start_ts, 1_000_000_000)
            return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec)) + f".{ns // 1000:06d}"
        if self.time_format == "delta":
            prev = st.row(self.rows[pos - 1]).start_ts if pos > 0 else row.start_ts
            return f"{(row.start_ts - prev) / 1e9:.6f}"
        return f"{st.rel_time(row):.6f}"

    def _row_text(self, idx: int, pos: int, widths: list[int]) -> tuple[str, bool]:
        st = self.store
        ex = st.row(idx)
        topics, errors = st.summary(idx)
        lat = ex.latency_ns
        api = ex.api or "?"
        if ex.api_version is not None:
            api = f"{api} v{ex.api_version}"
        status = ex.status if not errors else ",".join(errors)
        if ex.status != "ok" and errors:
            status = f"{ex.status} {status}"
        vals = (
            str(idx + 1),
            self.time_text(pos),
            str(ex.conn.id),
            ex.client_id or "-",
            api,
            "-" if ex.correlation_id is None else str(ex.correlation_id),
            topics or "-",
            "-" if lat is None else f"{lat / 1e6:.3f}",
            status,
        )
        seen = self._seen
        cells = []
        for i, (v, c, w) in enumerate(zip(vals, COLUMNS, widths, strict=True)):
            if len(v) > seen[i]:
                seen[i] = len(v)
                self.call_later(self.refresh)  # a wider value: lay the columns out again
            if w:
                cells.append(_fit_middle(v, w) if i == 3 else _fit(v, w, c.right))
        return " ".join(cells), ex.status != "ok" or bool(errors)
