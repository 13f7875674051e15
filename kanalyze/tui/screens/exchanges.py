"""The main screen: connections, the exchanges table with its filter bar, and the detail
(decoded request/response trees and the hex view)."""

from __future__ import annotations

import time
from array import array
from itertools import chain

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Static
from textual.worker import get_current_worker

from kanalyze.tui.filters import Filter, FilterError, parse_filter
from kanalyze.tui.messages import FieldHighlighted
from kanalyze.tui.spill import SpillClosed
from kanalyze.tui.store import SORT_KEYS
from kanalyze.tui.widgets.decode_tree import DecodeTree
from kanalyze.tui.widgets.exchange_table import ExchangeTable
from kanalyze.tui.widgets.hex_view import HexView

SORT_ORDER = tuple(SORT_KEYS)


class ConnectionsPane(DataTable):
    """client ↔ broker, client ids, exchange and problem counts; selecting one filters the table."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        self.add_columns("#", "client ↔ broker", "client id", "exch", "err")


class ExchangesScreen(Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("e", "export", "Export"),
        Binding("c", "focus_connections", "Connections", show=False),
        Binding("C", "toggle_connections", "Hide/show connections", show=False),
        Binding("x", "focus_table", "Exchanges", show=False),
        Binding("d", "focus_detail", "Detail", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter: Filter = Filter()
        self.conn: int | None = None
        self.applied_upto = 0  # store rows already filtered into the table
        self.filtering = False
        self._job = 0  # the latest filter job; older results are dropped
        self.filter_progress: float | None = None
        self.filter_error: str | None = None
        self._detail_timer: Timer | None = None
        self._conn_gen = -1
        self._conn_time = 0.0
        self._conn_count = -1
        self._conn_ids: list[int | None] = []

    def compose(self) -> ComposeResult:
        store = self.app.store
        with Horizontal(id="filter-row"):
            yield Static("filter", id="filter-label")
            yield Input(placeholder="api:Produce topic:orders client:web status:ok errors lat>5 text…  "
                        "(Enter applies, Esc clears)", id="filter")
        with Horizontal(id="top"):
            yield ConnectionsPane(id="connections")
            yield ExchangeTable(store, id="exchanges")
        with Horizontal(id="detail"):
            yield DecodeTree(id="tree")
            yield HexView(id="hex")
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ExchangeTable).focus()
        self.set_interval(0.2, self.tick)
        self.tick()

    # -- incremental updates (indexing worker, live capture) ---------------------------------
    def tick(self) -> None:
        store = self.app.store
        n = len(store)
        if not self.filtering and n > self.applied_upto:
            start, self.applied_upto = self.applied_upto, n
            flt = self.effective_filter()
            table = self.query_one(ExchangeTable)
            if flt.empty and table.sort_key == "time" and not table.sort_reverse:
                table.append_rows(array("q", range(start, n)))
            else:  # matching and merging into a sorted table happen in the worker
                self.filtering = True
                self._job += 1
                self._filter_worker(self._job, flt, start, n, append=True)
        if store.generation != self._conn_gen:
            # counts change with every batch: redraw the pane at most once a second while indexing
            now = time.monotonic()
            if store.done or len(store.conns) != self._conn_count or now - self._conn_time > 1.0:
                self._conn_gen = store.generation
                self._conn_time = now
                self._conn_count = len(store.conns)
                self.update_connections()
        self.update_status()

    def effective_filter(self) -> Filter:
        return self.filter.with_conn(self.conn) if self.conn is not None else self.filter

    @work(thread=True, exclusive=True, group="filter")
    def _filter_worker(self, job: int, flt: Filter, start: int, end: int, append: bool) -> None:
        worker = get_current_worker()
        store = self.app.store
        total = max(1, end - start)

        def progress(i: int) -> None:
            self.filter_progress = (i - start) / total

        try:
            rows = store.match_range(flt, start, end, lambda: worker.is_cancelled, progress)
        except SpillClosed:  # the app is exiting
            return
        if rows is None:
            return
        table = self.query_one(ExchangeTable)
        time_order = table.sort_key == "time" and not table.sort_reverse
        if append and not time_order:
            # the table does not change while `filtering` is set: merge into a copy here
            rows = store.sort_indices(chain(table.rows, rows), table.sort_key, table.sort_reverse)
            append = False
        elif not append and not time_order:
            rows = store.sort_indices(rows, table.sort_key, table.sort_reverse)
        if not worker.is_cancelled:
            self.app.call_from_thread(self._filter_done, job, rows, append)

    def _filter_done(self, job: int, rows: array, append: bool) -> None:
        if job != self._job:  # a newer filter or sort superseded this one
            return
        self.filtering = False
        self.filter_progress = None
        table = self.query_one(ExchangeTable)
        if append:
            table.append_rows(rows)
        else:
            table.set_rows(rows, table.current)
        self.update_status()

    def refilter(self) -> None:
        self.applied_upto = len(self.app.store)
        self.filtering = True
        self.filter_progress = 0.0
        self._job += 1
        self._filter_worker(self._job, self.effective_filter(), 0, self.applied_upto, append=False)
        self.update_status()

    # -- status -----------------------------------------------------------------------------
    def update_status(self) -> None:
        app = self.app
        store = app.store
        table = self.query_one(ExchangeTable)
        parts = [app.source_label]
        if store.error:
            parts.append(f"[b red]{store.error}[/]")
        elif not store.done:
            pct = "" if store.progress is None else f" {store.progress:.0%}"
            parts.append(f"[b]indexing{pct}[/]")
        elif store.summarized < len(store):
            parts.append(f"decoding summaries {store.summarized / max(1, len(store)):.0%}")
        flt = self.effective_filter()
        if self.filtering:
            pct = "" if self.filter_progress is None else f" {self.filter_progress:.0%}"
            parts.append(f"filtering{pct}…")
        if self.filter_error:
            parts.append(f"[b red]{self.filter_error}[/]")
        total = len(store)
        if flt.empty:
            parts.append(f"{total:,} exchanges")
        else:
            parts.append(f"{len(table.rows):,} of {total:,} match")
        if self.conn is not None:
            parts.append(f"conn {self.conn}")
        arrow = "▼" if table.sort_reverse else "▲"
        parts.append(f"sort: {table.sort_key} {arrow}")
        self.query_one("#status", Static).update(Text.from_markup(" │ ".join(parts)))

    def update_connections(self) -> None:
        pane = self.query_one(ConnectionsPane)
        store = self.app.store
        with store.lock:
            conns = sorted(store.conns.values(), key=lambda c: c.id)
        row = pane.cursor_row
        pane.clear()
        self._conn_ids = [None]
        pane.add_row("*", "all connections", "", str(len(store)), "")
        for c in conns:
            err = Text(str(c.problems), "bold red") if c.problems else Text("0")
            pane.add_row(str(c.id), f"{c.client} ↔ {c.broker}", c.client_id, str(c.exchanges), err)
            self._conn_ids.append(c.id)
        if 0 <= row < pane.row_count:
            pane.move_cursor(row=row, animate=False)

    # -- events -----------------------------------------------------------------------------
    @on(DataTable.RowSelected, "#connections")
    def conn_selected(self, event: DataTable.RowSelected) -> None:
        i = event.cursor_row
        conn = self._conn_ids[i] if 0 <= i < len(self._conn_ids) else None
        if conn != self.conn:
            self.conn = conn
            self.refilter()
        self.query_one(ExchangeTable).focus()

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        self.apply_filter(event.value)
        self.query_one(ExchangeTable).focus()

    def apply_filter(self, text: str) -> None:
        try:
            flt = parse_filter(text)
        except FilterError as e:
            self.filter_error = str(e)
            self.update_status()
            return
        self.filter_error = None
        self.filter = flt
        self.refilter()

    @on(ExchangeTable.CursorMoved)
    def cursor_moved(self, event: ExchangeTable.CursorMoved) -> None:
        if self._detail_timer is not None:
            self._detail_timer.stop()
        self._detail_timer = self.set_timer(0.08, lambda: self.show_detail(event.index))

    def show_detail(self, index: int | None) -> None:
        store = self.app.store
        if index is not None and index >= len(store):
            index = None
        tree = self.query_one(DecodeTree)
        if index is not None and tree.index == index:
            return  # the same row again (a refilter, an append): keep the user's place in the tree
        ex = None if index is None else store.exchange(index)  # read back from the spill file
        tree.show_exchange(ex, store.bodies, index)
        if ex is None:
            self.query_one(HexView).show(b"", "no exchange selected")

    @on(ExchangeTable.HeaderClicked)
    def header_clicked(self, event: ExchangeTable.HeaderClicked) -> None:
        table = self.query_one(ExchangeTable)
        if table.sort_key == event.key:
            table.sort_reverse = not table.sort_reverse
        else:
            table.sort_key, table.sort_reverse = event.key, False
        self.refilter()

    def on_field_highlighted(self, event: FieldHighlighted) -> None:
        self.query_one(HexView).show(event.data, event.title, event.offset, event.length)

    # -- actions ----------------------------------------------------------------------------
    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        inp = self.query_one("#filter", Input)
        if self.focused is inp or not self.filter.empty or self.conn is not None:
            inp.value = ""
            self.conn = None
            self.filter = Filter()
            self.filter_error = None
            self.refilter()
            self.query_one(ExchangeTable).focus()

    def action_sort(self) -> None:
        table = self.query_one(ExchangeTable)
        table.sort_key = SORT_ORDER[(SORT_ORDER.index(table.sort_key) + 1) % len(SORT_ORDER)]
        table.sort_reverse = False
        self.refilter()

    def action_reverse(self) -> None:
        table = self.query_one(ExchangeTable)
        table.sort_reverse = not table.sort_reverse
        self.refilter()

    def action_focus_connections(self) -> None:
        self.query_one(ConnectionsPane).focus()

    def action_toggle_connections(self) -> None:
        pane = self.query_one(ConnectionsPane)
        pane.toggle_class("hidden")
        if pane.has_class("hidden") and self.focused is pane:
            self.query_one(ExchangeTable).focus()

    def action_focus_table(self) -> None:
        self.query_one(ExchangeTable).focus()

    def action_focus_detail(self) -> None:
        self.query_one(DecodeTree).focus()

    def action_export(self) -> None:
        from kanalyze.tui.screens.export import ExportScreen

        rows = array("q", self.query_one(ExchangeTable).rows)  # a snapshot: later filters change the table

        def done(path: str | None) -> None:
            if path:
                self.app.export_rows(rows, path)

        self.app.push_screen(ExportScreen(len(rows)), done)

    def on_key(self, event) -> None:
        if event.key == "enter" and self.focused is self.query_one(ExchangeTable):
            self.query_one(DecodeTree).focus()
            event.stop()
