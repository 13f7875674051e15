"""The exchanges table: a virtual list (only the visible lines are ever rendered), so a million
rows scroll without a freeze. Rows are indices into the store; cells are built on demand."""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kanalyze.tui.store import ExchangeStore

# (title, width, sort key or None)
COLUMNS: tuple[tuple[str, int, str | None], ...] = (
    ("No.", 7, "time"),
    ("Time", 10, "time"),
    ("Conn", 5, "conn"),
    ("Client id", 14, None),
    ("API", 20, "api"),
    ("Corr", 7, "corr"),
    ("Topic/partitions", 24, None),
    ("Latency ms", 10, "latency"),
    ("Status / error", 22, "status"),
)


def _fit(text: str, width: int, right: bool = False) -> str:
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


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
        self._width = sum(w + 1 for _t, w, _k in COLUMNS)

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
        self.virtual_size = Size(self._width, len(self.rows) + 1)
        self.refresh()

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
            x = event.x + int(self.scroll_x)
            for _title, width, key in COLUMNS:
                if x < width + 1:
                    if key:
                        self.post_message(self.HeaderClicked(key))
                    return
                x -= width + 1
            return
        self.move_to(int(self.scroll_y) + event.y - 1)

    # -- rendering ------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self.rich_style
        if y == 0:
            style = self.get_component_rich_style("exchange-table--header")
            cells = []
            for title, w, key in COLUMNS:
                mark = ""
                if key == self.sort_key and title != "No.":
                    mark = "▼" if self.sort_reverse else "▲"
                cells.append(_fit(title + mark, w))
            return self._strip(" ".join(cells), style, scroll_x, width)
        pos = scroll_y + y - 1
        if pos >= len(self.rows):
            return Strip.blank(width, base)
        idx = self.rows[pos]
        text, problem = self._row_text(idx)
        style = base
        if problem:
            style = base + self.get_component_rich_style("exchange-table--error")
        if pos == self.cursor:
            style = style + self.get_component_rich_style("exchange-table--cursor")
        return self._strip(text, style, scroll_x, width)

    def _strip(self, text: str, style: Style, scroll_x: int, width: int) -> Strip:
        text = text[scroll_x:]
        return Strip([Segment(text.ljust(width)[:width], style)], width)

    def _row_text(self, idx: int) -> tuple[str, bool]:
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
            (str(idx + 1), True),
            (f"{st.rel_time(ex):.6f}", True),
            (str(ex.conn.id), True),
            (ex.client_id or "-", False),
            (api, False),
            ("-" if ex.correlation_id is None else str(ex.correlation_id), True),
            (topics or "-", False),
            ("-" if lat is None else f"{lat / 1e6:.3f}", True),
            (status, False),
        )
        text = " ".join(_fit(v, w, right) for (v, right), (_t, w, _k) in zip(vals, COLUMNS, strict=True))
        return text, ex.status != "ok" or bool(errors)
