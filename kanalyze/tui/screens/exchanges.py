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

from kanalyze.tui.filters import Filter, FilterError, parse_any
from kanalyze.tui.locate import Target
from kanalyze.tui.messages import FieldHighlighted
from kanalyze.tui.spill import SpillClosed
from kanalyze.tui.store import SORT_KEYS
from kanalyze.tui.widgets.decode_tree import DecodeTree
from kanalyze.tui.widgets.exchange_table import TIME_FORMATS, ExchangeTable
from kanalyze.tui.widgets.hex_view import HexView

SORT_ORDER = tuple(SORT_KEYS)
CONNECTIONS_WIDTH = 44
HEX_WIDTH = 77  # offsets, 16 bytes in hex and ASCII, a border and a scrollbar
MIN_TABLE = 96  # below this beside the connections pane, the pane folds away (C brings it back)
MIN_TREE = 40  # the decoded tree never gets less; a hex pane that would leave less folds away


class ConnectionsPane(DataTable):
    """client ↔ broker, client ids, exchange and problem counts; selecting one filters the table."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        # counts first: a narrow pane cuts the long columns, never the error counts; fixed
        # widths (content-sized ones would change with the redraws while indexing)
        for label, width in (
            ("#", 3),
            ("exch", 6),
            ("err", 5),
            ("client id", 20),
            ("client ↔ broker", 44),
        ):
            self.add_column(label, width=width)


class ExchangesScreen(Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("e", "export", "Export"),
        Binding("c", "focus_connections", "Connections", show=False),
        Binding("C", "toggle_connections", "Conns", show=False),
        Binding("H", "toggle_hex", "Hex", show=False),
        Binding("left_square_bracket", "resize_hex(4)", "Narrower hex", show=False),
        Binding("right_square_bracket", "resize_hex(-4)", "Wider hex", show=False),
        Binding("left_curly_bracket", "resize_connections(-4)", "Narrower connections", show=False),
        Binding("right_curly_bracket", "resize_connections(4)", "Wider connections", show=False),
        Binding("T", "time_format", "Time format", show=False),
        Binding("ctrl+g", "goto", "Go to", show=False),
        Binding("f", "follow", "Follow conn", show=False),
        Binding("x", "focus_table", "Exchanges", show=False),
        Binding("d", "focus_detail", "Detail", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter: Filter = Filter()
        self.query_filter: object | None = (
            None  # a kanalyze.query Filter when the text is in that language
        )
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
        self._select_after_filter: int | None = None  # a go-to waiting for the refilter
        # a finding's jump: (row, the field it is about, its frame), selected once shown
        self._reveal: tuple[int, Target, int | None] | None = None
        # side panes: None follows the terminal width, True/False is the user's choice (C, H)
        self.show_connections: bool | None = None
        self.show_hex: bool | None = None
        self.connections_width: int | None = None  # None: a quarter of the width, 44 to 64
        self.hex_width = HEX_WIDTH

    def compose(self) -> ComposeResult:
        store = self.app.store
        with Horizontal(id="filter-row"):
            yield Static("filter", id="filter-label")
            yield Input(
                placeholder="api:Produce topic:orders client:web status:ok errors lat>5 text…  "
                "(Enter applies, Esc clears)",
                id="filter",
            )
            yield Static("", id="filter-msg")
        with Horizontal(id="top"):
            yield ConnectionsPane(id="connections")
            yield ExchangeTable(store, id="exchanges")
        with Horizontal(id="detail"):
            yield DecodeTree(id="tree")
            yield HexView(id="hex")
        yield Static("", id="status")
        yield Footer()

    def on_resize(self) -> None:
        self.apply_layout()

    def apply_layout(self) -> None:
        """Fit the side panes to the terminal: below a width they fold away (C / H bring them
        back); a pane shown by hand where there is no room takes its neighbour's place."""
        width = self.size.width
        conns = self.query_one(ConnectionsPane)
        table = self.query_one(ExchangeTable)
        show = self.show_connections
        cw = self.connections_width or max(CONNECTIONS_WIDTH, min(64, width // 4))
        if show is None:
            show = width - cw >= MIN_TABLE
        cw = min(cw, max(20, width - 20))
        conns.styles.width = cw
        conns.set_class(not show, "hidden")
        table.set_class(bool(show) and width - cw < 30, "hidden")  # no room for both: pane only
        hexv = self.query_one(HexView)
        tree = self.query_one(DecodeTree)
        show = self.show_hex
        if show is None:
            show = width - self.hex_width >= MIN_TREE
        hexv.styles.width = min(self.hex_width, width)
        hexv.set_class(not show, "hidden")
        tree.set_class(bool(show) and width - self.hex_width < MIN_TREE, "hidden")
        for w in (conns, hexv, tree, table):  # a hidden pane gives the focus to its neighbour
            if w.has_class("hidden") and self.focused is w:
                (
                    table if w is conns else tree if w is hexv else hexv if w is tree else conns
                ).focus()

    def on_mount(self) -> None:
        self.apply_layout()
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
            if (
                flt.empty
                and self.query_filter is None
                and table.sort_key == "time"
                and not table.sort_reverse
            ):
                table.append_rows(array("q", range(start, n)))
            else:  # matching and merging into a sorted table happen in the worker
                self.filtering = True
                self._job += 1
                self._filter_worker(self._job, flt, start, n, append=True, query=self.query_filter)
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
    def _filter_worker(
        self, job: int, flt: Filter, start: int, end: int, append: bool, query: object | None = None
    ) -> None:
        worker = get_current_worker()
        store = self.app.store
        total = max(1, end - start)

        def progress(i: int) -> None:
            self.filter_progress = (i - start) / total

        try:
            if query is not None:
                rows = store.match_query(
                    query, start, end, self.conn, lambda: worker.is_cancelled, progress
                )
            else:
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
            keep, self._select_after_filter = self._select_after_filter, None
            table.set_rows(rows, table.current if keep is None else keep)
            if keep is not None:
                table._scroll_cursor()
        self.update_status()

    def refilter(self) -> None:
        self.applied_upto = len(self.app.store)
        self.filtering = True
        self.filter_progress = 0.0
        self._job += 1
        self._filter_worker(
            self._job,
            self.effective_filter(),
            0,
            self.applied_upto,
            append=False,
            query=self.query_filter,
        )
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
        if flt.empty and self.query_filter is None:
            parts.append(f"{total:,} exchanges")
        else:
            parts.append(f"{len(table.rows):,} of {total:,} match")
        if self.conn is not None:
            parts.append(f"conn {self.conn}")
        arrow = "▼" if table.sort_reverse else "▲"
        parts.append(f"sort: {table.sort_key} {arrow}")
        if table.time_format != TIME_FORMATS[0]:
            parts.append(f"time: {table.time_format}")
        folded = [
            k
            for k, sel in (("C conns", ConnectionsPane), ("H hex", HexView))
            if self.query_one(sel).has_class("hidden")
        ]
        if folded:
            parts.append(" ".join(folded))
        self.query_one("#status", Static).update(Text.from_markup(" │ ".join(parts)))

    def update_connections(self) -> None:
        pane = self.query_one(ConnectionsPane)
        store = self.app.store
        with store.lock:
            conns = sorted(store.conns.values(), key=lambda c: c.id)
        row = pane.cursor_row
        pane.clear()
        self._conn_ids = [None]
        pane.add_row("*", str(len(store)), "", "all connections", "")
        for c in conns:
            err = Text(str(c.problems), "bold red") if c.problems else Text("0")
            pane.add_row(str(c.id), str(c.exchanges), err, c.client_id, f"{c.client} ↔ {c.broker}")
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

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        """Live validation: green when the text parses, red with the reason when it does not."""
        inp = event.input
        msg = self.query_one("#filter-msg", Static)
        text = event.value
        if not text.strip():
            inp.remove_class("valid", "invalid")
            msg.update("")
            return
        ok = True
        try:
            parse_any(text)
        except FilterError as e:
            ok = False
            msg.update(Text(str(e)))
        else:
            msg.update(Text("✓ Enter applies"))
        for w in (inp, msg):
            w.set_class(ok, "valid")
            w.set_class(not ok, "invalid")

    @on(Input.Submitted, "#filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        if self.apply_filter(event.value):
            self.query_one(ExchangeTable).focus()  # on an error the box keeps focus, red, with why

    def apply_filter(self, text: str) -> bool:
        try:
            flt = parse_any(text, self.app.store.query_env())
        except FilterError as e:
            self.filter_error = str(e)
            self.update_status()
            return False
        self.filter_error = None
        if isinstance(flt, Filter):
            self.filter, self.query_filter = flt, None
        else:  # the query language: the bar's own terms stay empty
            self.filter, self.query_filter = Filter(text=""), flt
        self.refilter()
        return True

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
            self._apply_reveal(index)
            return  # the same row again (a refilter, an append): keep the user's place in the tree
        ex = None if index is None else store.exchange(index)  # read back from the spill file
        tree.show_exchange(ex, store.bodies, index)
        if ex is None:
            self.query_one(HexView).show(b"", "no exchange selected")
        else:
            self._apply_reveal(index)

    def _apply_reveal(self, index: int) -> None:
        """A finding's jump landed on its row: select the field it is about in the tree."""
        if self._reveal is None or self._reveal[0] != index:
            return
        _i, target, frame = self._reveal
        self._reveal = None
        tree = self.query_one(DecodeTree)
        names = self.app.store.topic_names
        if tree.reveal(target, frame, getattr(names, "mapping", names)):
            tree.focus()

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
        if (
            self.focused is inp
            or not self.filter.empty
            or self.conn is not None
            or self.query_filter is not None
        ):
            inp.value = ""
            self.conn = None
            self.query_filter = None
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
        if self.query_one(ConnectionsPane).has_class("hidden"):
            self.show_connections = True
            self.apply_layout()
        self.query_one(ConnectionsPane).focus()

    def action_toggle_connections(self) -> None:
        self.show_connections = self.query_one(ConnectionsPane).has_class("hidden")
        self.apply_layout()

    def action_toggle_hex(self) -> None:
        self.show_hex = self.query_one(HexView).has_class("hidden")
        self.apply_layout()

    def action_resize_hex(self, delta: int) -> None:
        """`[` / `]`: the tree gets wider / narrower (the hex pane gives or takes the room)."""
        self.hex_width = max(20, min(self.size.width - MIN_TREE, self.hex_width - delta))
        self.apply_layout()

    def action_resize_connections(self, delta: int) -> None:
        now = self.query_one(ConnectionsPane).size.width or CONNECTIONS_WIDTH
        self.connections_width = max(20, min(self.size.width - 30, now + delta))
        self.apply_layout()

    def action_time_format(self) -> None:
        """`T`: relative (seconds since the first exchange), absolute (UTC), delta (since the
        row above), like Wireshark's View > Time Display Format."""
        table = self.query_one(ExchangeTable)
        table.set_time_format(
            TIME_FORMATS[(TIME_FORMATS.index(table.time_format) + 1) % len(TIME_FORMATS)]
        )
        self.update_status()

    def action_focus_table(self) -> None:
        self.query_one(ExchangeTable).focus()

    def action_focus_detail(self) -> None:
        self.query_one(DecodeTree).focus()

    def action_goto(self) -> None:
        from kanalyze.tui.screens.goto import GotoScreen

        def done(target: tuple[str, int] | None) -> None:
            if target is not None:
                self.goto(*target)

        self.app.push_screen(GotoScreen(), done)

    def goto(self, kind: str, number: int, target: Target | None = None) -> None:
        """Select the exchange `#number`, or the one carried by frame `number`; a row the
        filter hides is shown by clearing the filter. With `target` (a finding's jump), the
        field it names is then selected in the tree."""
        store = self.app.store
        if kind == "exchange":
            index = number - 1 if 0 < number <= len(store) else None
        else:
            index = store.find_frame(number)
        if index is None:
            self.notify(
                f"no exchange {'#' if kind == 'exchange' else 'in frame '}{number}",
                severity="warning",
            )
            return
        self._reveal = (
            None if target is None else (index, target, number if kind == "frame" else None)
        )
        self.select_index(index)

    def select_index(self, index: int) -> None:
        table = self.query_one(ExchangeTable)
        try:
            pos = table.rows.index(index)
        except ValueError:
            pos = -1
        if pos >= 0 and not self.filtering:
            table.move_to(pos)
            if self.query_one(DecodeTree).index == index:  # already shown: no cursor move comes
                self._apply_reveal(index)
            return
        self.query_one("#filter", Input).value = ""
        self.filter = Filter()
        self.query_filter = None
        self.conn = None
        self.filter_error = None
        self._select_after_filter = index
        self.refilter()

    def action_follow(self) -> None:
        """`f`: only the selected row's connection (Esc shows all again)."""
        current = self.query_one(ExchangeTable).current
        if current is None:
            return
        conn = self.app.store.row(current).conn.id
        if conn != self.conn:
            self.conn = conn
            self.refilter()

    def action_export(self) -> None:
        from kanalyze.tui.screens.export import ExportScreen

        rows = array(
            "q", self.query_one(ExchangeTable).rows
        )  # a snapshot: later filters change the table

        def done(path: str | None) -> None:
            if path:
                self.app.export_rows(rows, path)

        self.app.push_screen(ExportScreen(len(rows), pcap=bool(self.app.paths)), done)

    def on_key(self, event) -> None:
        if event.key == "enter" and self.focused is self.query_one(ExchangeTable):
            self.query_one(DecodeTree).focus()
            event.stop()
