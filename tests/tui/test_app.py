"""The app driven through Textual's Pilot as a person would: keys first, a few clicks."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest

from kanalyze.cli import main as cli_main
from kanalyze.session import Session
from kanalyze.tui.app import KanalyzeApp
from kanalyze.tui.screens.exchanges import ConnectionsPane, ExchangesScreen
from kanalyze.tui.screens.help import HelpScreen
from kanalyze.tui.widgets.decode_tree import DecodeTree
from kanalyze.tui.widgets.exchange_table import ExchangeTable
from kanalyze.tui.widgets.hex_view import HexView
from tests.tui.conftest import CAPTURES, aio, wait_for, wait_indexed, wait_report

SIZE = (160, 45)
CODECS = str(CAPTURES / "lib_codecs.pcap")


def status_text(app) -> str:
    return str(app.screen.query_one("#status").render())


@aio
async def test_open_filter_select_expand_hex_export(tmp_path):
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        table = app.screen.query_one(ExchangeTable)
        assert len(table.rows) == len(app.store) == 52
        assert "52 exchanges" in status_text(app)
        assert app.first_rows_s is not None

        # filter: `/`, type, Enter; the count of matching rows is shown
        await pilot.press("slash")
        await pilot.press(*"api:produce")
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: not app.screen.filtering and len(table.rows) == 5, what="filter"
        )
        assert "5 of 52 match" in status_text(app)
        current = table.current
        assert (
            app.store.row(current).api == "Produce" and "lib-none" in app.store.summary(current)[0]
        )

        # select it: the detail shows its decoded request (read back from the spill file, equal to
        # what was indexed); Enter moves to the tree
        tree = app.screen.query_one(DecodeTree)
        hexv = app.screen.query_one(HexView)
        await wait_for(
            pilot,
            lambda: tree.index == current and hexv.title.startswith("request frame"),
            what="detail",
        )
        assert tree.exchange == list(Session([CODECS]).exchanges())[current]
        await pilot.press("enter")
        assert app.screen.focused is tree
        # REQUEST > header > body > TransactionalId > Acks
        await pilot.press("down", "down", "down", "down")
        await pilot.pause(0.1)
        node = tree.cursor_node.data.node
        assert node.name == "Acks"
        assert hexv.highlight == (node.offset, node.length) == (29, 2)
        # Acks is -1: the highlighted bytes are ff ff
        assert hexv.data[29:31] == b"\xff\xff"

        # expand TopicData (→) and walk into it: the highlight follows each field
        await pilot.press("down", "down")
        assert tree.cursor_node.data.node.name == "TopicData"
        before = hexv.highlight
        await pilot.press("right", "right")  # expand, then first child
        await pilot.pause(0.1)
        item = tree.cursor_node.data.node
        assert item.name == "0" and hexv.highlight == (item.offset, item.length) != before
        await pilot.press("right", "right")  # the topic struct -> its Name
        await pilot.pause(0.1)
        name = tree.cursor_node.data.node
        assert name.name == "Name" and name.value == "lib-none"
        assert hexv.highlight == (name.offset, name.length)
        assert hexv.data[name.offset : name.offset + name.length].endswith(b"lib-none")

        # export the filtered table and read it back
        out = tmp_path / "produce.ndjson"
        await pilot.press("e")
        await wait_for(
            pilot, lambda: app.screen.__class__.__name__ == "ExportScreen", what="export dialog"
        )
        app.screen.query_one("#export-path").value = str(out)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.last_export is not None, what="export")
        lines = out.read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        assert len(rows) == 5 and {r["api"] for r in rows} == {"Produce"}
        assert all(r["schema"] == "kanalyze.exchange/1" and r["request"]["body"] for r in rows)
        assert [r["request"]["frame"] for r in rows] == [
            app.store.exchange(i).request.pdu.last_pkt for i in table.rows
        ]
        # byte-identical to `kanalyze export` of the same capture, for the same rows
        cli = tmp_path / "all.ndjson"
        with cli.open("w") as f, contextlib.redirect_stdout(f):
            assert cli_main(["export", CODECS]) == 0
        expected = cli.read_text().splitlines()
        assert len(expected) == len(app.store) and lines == [expected[i] for i in table.rows]


@aio
async def test_decompressed_buffer_highlight():
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        screen.apply_filter("api:fetch topic:lib-gzip")
        table = screen.query_one(ExchangeTable)
        await wait_for(pilot, lambda: not screen.filtering and table.rows, what="filter")
        tree = screen.query_one(DecodeTree)
        hexv = screen.query_one(HexView)
        assert len(table.rows) == 2  # the first Fetch returns records of every codec
        await wait_for(pilot, lambda: tree.index == table.rows[0], what="detail")

        # expand everything under the response until a record from the decompressed buffer shows up
        def find(node):
            for child in node.children:
                ref = child.data
                if ref is not None and ref.node is not None and ref.source > 0:
                    return child
                if child.allow_expand:
                    child.expand()
                    tree._populate(child)
                found = find(child)
                if found is not None:
                    return found
            return None

        target = find(tree.root)
        assert target is not None
        await pilot.pause(0.1)
        tree.move_cursor(target)
        await pilot.pause(0.2)
        ref = target.data
        assert hexv.title.startswith("response decompressed buffer #")
        assert hexv.highlight == (ref.offset, ref.length)
        assert hexv.data == ref.side.ctx.buffers[ref.source - 1]


@aio
async def test_connections_sort_help_theme_and_quit():
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        pane = screen.query_one(ConnectionsPane)
        assert pane.row_count == len(app.store.conns) + 1

        # pick connection 2 (third row): only its exchanges are listed
        await pilot.press("c")
        await pilot.press("down", "down", "enter")
        conn = screen._conn_ids[2]
        await wait_for(
            pilot, lambda: not screen.filtering and screen.conn == conn, what="conn filter"
        )
        assert table.rows and all(app.store.row(i).conn.id == conn for i in table.rows)
        assert f"conn {conn}" in status_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not screen.filtering and len(table.rows) == 52, what="clear")

        # sort: s cycles the key (time -> latency), S reverses; clicking a header sorts too
        await pilot.press("s", "S")
        await wait_for(
            pilot, lambda: not screen.filtering and table.sort_key == "latency", what="sort"
        )
        lats = [app.store.row(i).latency_ns or -1 for i in table.rows]
        assert lats == sorted(lats, reverse=True)
        await pilot.click(ExchangeTable, offset=(45, 0))  # the "API" header
        await wait_for(
            pilot, lambda: not screen.filtering and table.sort_key == "api", what="click sort"
        )
        await pilot.click(ExchangeTable, offset=(5, 3))  # a row
        assert table.cursor == 2

        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, ExchangesScreen)

        theme = app.theme
        await pilot.press("t")
        assert app.theme != theme
        await pilot.press("q")
        await pilot.pause(0.2)
    assert app.return_code == 0


@aio
async def test_replication_view_textbook_hw_reaches_1():
    app = KanalyzeApp([str(CAPTURES / "replication" / "textbook.pcap")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        await pilot.press("2")
        await wait_report(pilot)
        screen = app.screen
        parts = screen.query_one("#partitions")
        assert parts.row_count == 1 and parts.get_row_at(0)[:3] == ["tb-0", "1", "1"]
        hw = screen.query_one("#rep-chart").series["HW"]
        assert hw[0] == 0 and hw[-1] == 1 and max(hw) == 1
        assert "HW 1" in str(screen.query_one("#rep-summary").render())
        assert "follower 2: LEO 1" in str(screen.query_one("#rep-summary").render())
        assert screen.query_one("#rep-timeline").row_count == len(
            app.report["replication"][0]["timeline"]
        )
        await pilot.press("1")
        assert isinstance(app.screen, ExchangesScreen)


@aio
async def test_semantics_and_groups_views():
    app = KanalyzeApp([str(CAPTURES / "lib_transactions.pcap")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        await pilot.press("3")
        await wait_report(pilot)
        txn = app.screen.query_one("#transactions")
        outcomes = {str(txn.get_row_at(i)[3]) for i in range(txn.row_count)}
        assert outcomes == {"COMMITTED", "ABORTED"}
        assert app.screen.query_one("#findings").row_count >= 1
    app = KanalyzeApp([str(CAPTURES / "lib_group_rebalance.pcap")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        await pilot.press("4")
        await wait_report(pilot)
        reb = app.screen.query_one("#rebalances")
        assert reb.row_count >= 2 and {str(reb.get_row_at(i)[0]) for i in range(reb.row_count)} == {
            "lib-group-1"
        }


@aio
async def test_exchanges_appended_while_running():
    """The live-capture hook: another thread feeds exchanges, the table follows."""
    exs = list(Session([CODECS]).exchanges())
    app = KanalyzeApp(source_label="live test")
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(ExchangeTable)
        app.screen.apply_filter("api:produce")
        t = threading.Thread(target=lambda: [app.add_exchanges([ex]) for ex in exs])
        t.start()
        t.join()
        await wait_for(
            pilot, lambda: len(table.rows) == 5 and app.screen.applied_upto == 52, what="live rows"
        )
        assert "indexing" in status_text(app)
        app.finish_indexing()
        await wait_for(pilot, lambda: "indexing" not in status_text(app), what="done")
        assert "5 of 52 match" in status_text(app)


@aio
async def test_sorted_table_takes_appended_rows():
    exs = list(Session([CODECS]).exchanges())
    app = KanalyzeApp(source_label="live test")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        await pilot.press("s", "S")  # latency, longest first
        for i in range(0, len(exs), 10):
            app.add_exchanges(exs[i : i + 10])
            await pilot.pause(0.05)
        app.finish_indexing()
        await wait_indexed(pilot)
        assert len(table.rows) == 52 and table.sort_key == "latency"
        lats = [app.store.row(i).latency_ns or -1 for i in table.rows]
        assert lats == sorted(lats, reverse=True)


@aio
async def test_feed_hook_like_a_live_session():
    """`feed` runs in a worker and pushes exchanges one by one (a LiveSession subscriber would);
    `stop` is called when the app exits."""
    exs = list(Session([CODECS]).exchanges())
    stopped = threading.Event()

    def feed(app):
        for ex in exs:
            if stopped.is_set():
                return
            app.add_exchanges([ex])

    app = KanalyzeApp(source_label="lo (live)", feed=feed, stop=stopped.set)
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        assert len(app.screen.query_one(ExchangeTable).rows) == 52
        assert "lo (live)" in status_text(app)
    assert stopped.is_set()


@aio
async def test_not_a_capture_is_reported():
    app = KanalyzeApp([str(CAPTURES / "crafted" / "bad_text.txt")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.store.done, what="done")
        await pilot.pause(0.3)
        assert "error" in status_text(app)


@aio
async def test_million_rows_scroll():
    """The table is virtual: a million rows append, jump to the end and page without a freeze."""
    ex = next(iter(Session([CODECS]).exchanges()))
    app = KanalyzeApp(source_label="synthetic")
    async with app.run_test(size=SIZE) as pilot:
        app.add_exchanges([ex] * 1_000_000)
        app.finish_indexing()
        table = app.screen.query_one(ExchangeTable)
        await wait_for(pilot, lambda: len(table.rows) == 1_000_000, what="rows")
        await pilot.press("end")
        await pilot.pause(0.1)
        assert table.cursor == 999_999 and table.scroll_y > 999_000
        await pilot.press("pageup", "up")
        await pilot.pause(0.1)
        assert 999_900 < table.cursor < 999_999
        assert app.screen.query_one("#status").render()


@aio
async def test_spill_file_freed_when_the_app_exits_also_on_an_error():
    """Frames live in an anonymous temporary file while the app runs; it is closed when the app
    exits, also when the session ends with an exception (and the system drops it with the
    process)."""
    app = KanalyzeApp([CODECS])
    with pytest.raises(RuntimeError, match="boom"):
        async with app.run_test(size=SIZE) as pilot:
            await wait_indexed(pilot)
            assert not app.store.spill.closed and app.store.spill.size > 0
            raise RuntimeError("boom")
    assert app.store.spill.closed
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        await pilot.press("q")
    assert app.store.spill.closed


@aio
async def test_spill_write_error_is_reported(monkeypatch):
    from kanalyze.tui import spill
    from kanalyze.tui.spill import FrameSpill

    flush = FrameSpill._flush

    def failing(self):
        if self.size > 4000:  # the disk fills up after a few frames
            raise OSError(28, "No space left on device")
        return flush(self)

    monkeypatch.setattr(spill, "FLUSH_BYTES", 0)
    monkeypatch.setattr(FrameSpill, "_flush", failing)
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.store.done, what="done")
        await pilot.pause(0.3)
        assert "cannot write the spill file" in status_text(app)
        assert 0 < len(app.store) < 52


def hex_first_line(app) -> str:
    """The hex pane's first line as drawn (its title)."""
    return "".join(seg.text for seg in app.screen.query_one(HexView).render_line(0)).strip()


@aio
async def test_hex_pane_follows_table_moves_filter_sort_and_switch():
    """The hex pane's first line names the frame of the exchange the table selects, after every
    cursor move, filter, sort and screen switch (it used to keep the first exchange's bytes)."""
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        tree = screen.query_one(DecodeTree)

        async def in_step(what: str) -> None:
            def ok() -> bool:
                i = table.current
                if i is None or tree.index != i:
                    return False
                ex = app.store.exchange(i)
                msg = ex.request or ex.response
                side = "request" if ex.request else "response"
                return hex_first_line(app).startswith(f"{side} frame {msg.pdu.last_pkt}")

            await wait_for(pilot, ok, timeout=10, what=f"hex pane in step after {what}")

        await in_step("start")
        first = hex_first_line(app)
        for _ in range(3):
            await pilot.press("down")
            await in_step("down")
        assert hex_first_line(app) != first
        await pilot.press("end")
        await in_step("end")
        screen.apply_filter("api:fetch")
        await wait_for(pilot, lambda: not screen.filtering, what="filter")
        await in_step("filter")
        await pilot.press("s")  # sort by latency
        await wait_for(
            pilot, lambda: not screen.filtering and table.sort_key == "latency", what="sort"
        )
        await pilot.press("end")
        await in_step("sort")
        await pilot.press("2")
        await pilot.press("1")
        await pilot.press("up")
        await in_step("screen switch")


@aio
async def test_filter_box_validates_live():
    """Red with the reason while the text cannot be parsed (nothing applied), green when it can."""
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        inp = screen.query_one("#filter")
        msg = screen.query_one("#filter-msg")
        await pilot.press("slash", *"lat<1")
        await pilot.pause(0.1)
        assert inp.has_class("invalid") and "latency" in str(msg.render())  # the language's hint
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert screen.focused is inp and screen.filter.empty  # nothing applied, the box keeps focus
        assert len(screen.query_one(ExchangeTable).rows) == 52
        for _ in range(5):
            await pilot.press("backspace")
        await pilot.press(*"frame:57")
        await pilot.pause(0.1)
        assert inp.has_class("invalid") and "unknown term frame" in str(msg.render())
        for _ in range(8):
            await pilot.press("backspace")
        await pilot.press(*"api:fetch")
        await pilot.pause(0.1)
        assert inp.has_class("valid") and not inp.has_class("invalid")
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: not screen.filtering and len(screen.query_one(ExchangeTable).rows) < 52,
            what="filter",
        )


@aio
async def test_layout_80x24_folds_side_panes_and_keys_bring_them_back():
    from kanalyze.tui.widgets.exchange_table import COLUMNS

    app = KanalyzeApp([CODECS])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        tree = screen.query_one(DecodeTree)
        hexv = screen.query_one(HexView)
        conns = screen.query_one(ConnectionsPane)
        shown = {c.title for c, w in zip(COLUMNS, table.widths(), strict=True) if w}
        assert {"API", "Latency ms", "Status / error"} <= shown
        line = "".join(seg.text for seg in table.render_line(1))
        assert "ApiVersions v3" in line and "0.413" in line and " ok" in line
        assert conns.has_class("hidden") and hexv.has_class("hidden") and tree.size.width >= 40
        await pilot.press("H")  # the hex pane takes the detail area (no room for both)
        await pilot.pause(0.1)
        assert not hexv.has_class("hidden") and tree.has_class("hidden")
        await pilot.press("H")
        await pilot.pause(0.1)
        assert hexv.has_class("hidden") and not tree.has_class("hidden")
        await pilot.press("C")
        await pilot.pause(0.1)
        assert not conns.has_class("hidden")
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        hexv = screen.query_one(HexView)
        tree = screen.query_one(DecodeTree)
        before = hexv.size.width
        await pilot.press("left_square_bracket", "left_square_bracket")  # a wider tree
        await pilot.pause(0.1)
        assert hexv.size.width == before - 8 and tree.size.width >= 40
        await pilot.press("T")  # absolute time
        await pilot.pause(0.1)
        assert screen.query_one(ExchangeTable).time_text(0).startswith("20")


@aio
async def test_goto_follow_palette_and_finding_jump():
    app = KanalyzeApp([str(CAPTURES / "lib_transactions.pcap")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        store = app.store
        # Ctrl-G 12 selects the exchange carried by frame 12 of the capture... or #5, the fifth row
        target = store.exchange(7)
        frame = target.request.pdu.last_pkt
        await pilot.press("ctrl+g", *str(frame), "enter")
        await wait_for(pilot, lambda: table.current == 7, what="go to frame")
        await pilot.press("ctrl+g", "#", "3", "enter")
        await wait_for(pilot, lambda: table.current == 2, what="go to exchange")
        # a row the filter hides: the filter is cleared and the row selected
        screen.apply_filter("api:produce")
        await wait_for(pilot, lambda: not screen.filtering, what="filter")
        assert 2 not in table.rows
        screen.goto("exchange", 3)
        await wait_for(
            pilot, lambda: not screen.filtering and table.current == 2, what="go to hidden"
        )
        # follow: only this row's connection
        conn = store.row(2).conn.id
        await pilot.press("f")
        await wait_for(pilot, lambda: not screen.filtering and screen.conn == conn, what="follow")
        assert all(store.row(i).conn.id == conn for i in table.rows)
        # the command palette knows the screen's actions
        commands = {c.title for c in app.get_system_commands(screen)}
        assert any(t.startswith("Go to") for t in commands) and any(
            t.startswith("Filter") for t in commands
        )
        # view 3: Enter on a finding opens the exchange of its first frame
        await pilot.press("escape")
        await pilot.press("3")
        await wait_report(pilot)
        findings = app.report["findings"]
        fnd = app.screen.query_one("#findings")
        fnd.focus()
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: isinstance(app.screen, ExchangesScreen), what="back to exchanges"
        )
        want = store.find_frame(findings[0]["frames"][0])
        await wait_for(pilot, lambda: table.current == want, what="finding's exchange")


@aio
async def test_export_pcap_asks_before_overwriting(tmp_path):
    app = KanalyzeApp([CODECS])
    out = tmp_path / "produce.pcap"
    out.write_bytes(b"old")
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        screen.apply_filter("api:produce")
        await wait_for(
            pilot,
            lambda: not screen.filtering and len(screen.query_one(ExchangeTable).rows) == 5,
            what="filter",
        )
        await pilot.press("e")
        await wait_for(
            pilot, lambda: app.screen.__class__.__name__ == "ExportScreen", what="export dialog"
        )
        app.screen.query_one("#export-path").value = str(out)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert app.screen.__class__.__name__ == "ExportScreen"  # asked first
        assert (
            "exists" in str(app.screen.query_one("#export-hint").render())
            and out.read_bytes() == b"old"
        )
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.last_export is not None, what="export")
    # the pcap reads back as the five Produce exchanges, nothing else
    again = list(Session([str(out)]).exchanges())
    assert len(again) == 5 and {ex.api for ex in again} == {"Produce"}
    # and it is the file `export -Y ... -w` writes for the same selection
    from tests.functional.test_filter_pcap import run

    cli = tmp_path / "cli.pcap"
    run("export", CODECS, "-Y", 'api == "Produce"', "-w", str(cli))
    assert out.read_bytes() == cli.read_bytes()


@aio
async def test_filter_box_takes_the_query_language():
    """`-Y` expressions work in the box too (kanalyze.query), with the same rows as `export -Y`."""
    from kanalyze.query import Env, compile_filter

    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        text = 'api == "Fetch" and topic == "lib-gzip"'
        await pilot.press("slash", *text)
        await pilot.pause(0.1)
        assert screen.query_one("#filter").has_class("valid")
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: not screen.filtering and screen.query_filter is not None, what="filter"
        )
        env = Env()
        flt = compile_filter(text, env)
        expected = []
        for i, ex in enumerate(Session([CODECS]).exchanges()):  # as docs/filters.md says: names
            env.decoder.learn(ex)  # learned in capture order
            if flt.match(ex):
                expected.append(i)
        assert list(table.rows) == expected and len(expected) == 2
        assert f"2 of {len(app.store)} match" in status_text(app)
        # an expression that does not parse: the language's message and column, nothing applied
        await pilot.press("slash", "ctrl+a", *'latency > "x"')
        await pilot.pause(0.1)
        assert screen.query_one("#filter").has_class("invalid")
        assert "column" in str(screen.query_one("#filter-msg").render())


@aio
async def test_finding_and_alert_jumps_select_the_field():
    """Enter on a finding (view 3) or a replication alert (view 2): the exchanges view on the
    exchange of its frame, the field the finding is about selected in the tree and its bytes
    highlighted in the hex pane."""
    app = KanalyzeApp([str(CAPTURES / "replication" / "anomalies.pcap")])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
        await pilot.press("3")
        await wait_report(pilot)
        findings = app.report["findings"]
        k = next(i for i, f in enumerate(findings) if f["kind"] == "hw_regression")
        fnd = app.screen.query_one("#findings")
        fnd.focus()
        fnd.move_cursor(row=k)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ExchangesScreen), what="exchanges")
        tree = app.screen.query_one(DecodeTree)
        hexv = app.screen.query_one(HexView)

        def on_field(name: str, value: object) -> bool:
            node = tree.cursor_node
            ref = node.data if node is not None else None
            return bool(
                ref is not None
                and ref.node is not None
                and ref.node.name == name
                and ref.node.value == value
                and hexv.highlight == (ref.node.offset, ref.node.length)
            )

        await wait_for(pilot, lambda: on_field("HighWatermark", 3), what="HW field")
        assert app.screen.focused is tree
        assert hex_first_line(app).startswith(f"response frame {findings[k]['frames'][-1]}")
        # view 2: the partition's alerts are a table; Enter on one jumps the same way
        await pilot.press("2")
        await wait_report(pilot)
        alerts = app.screen.query_one("#rep-alerts")
        items = app.screen.row_findings["rep-alerts"]
        assert alerts.row_count == len(items) >= 2
        j = next(i for i, f in enumerate(items) if f["kind"] == "epoch_end_offset")
        alerts.focus()
        alerts.move_cursor(row=j)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ExchangesScreen), what="exchanges")
        tree = app.screen.query_one(DecodeTree)
        hexv = app.screen.query_one(HexView)
        await wait_for(pilot, lambda: on_field("EndOffset", items[j]["end_offset"]), what="field")


@aio
async def test_hex_pane_stays_in_step_through_live_appends():
    """Live appends (another thread feeding rows) never leave the hex pane on another
    exchange: it names the selected row's frame before, during and after them."""
    exs = list(Session([CODECS]).exchanges())
    app = KanalyzeApp(source_label="live test")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        tree = screen.query_one(DecodeTree)
        app.add_exchanges(exs[:10])

        def in_step() -> bool:
            i = table.current
            if i is None or tree.index != i:
                return False
            msg = exs[i].request or exs[i].response
            side = "request" if exs[i].request else "response"
            return hex_first_line(app).startswith(f"{side} frame {msg.pdu.last_pkt}")

        await wait_for(pilot, lambda: len(table.rows) == 10 and in_step(), what="first rows")
        table.focus()
        await pilot.press("down", "down")
        await wait_for(pilot, lambda: table.current == 2 and in_step(), what="row 3")
        for k in range(10, len(exs), 7):  # rows arrive while the selection stays
            app.add_exchanges(exs[k : k + 7])
            await pilot.pause(0.05)
            assert tree.index in (None, table.current) and table.current == 2
        await wait_for(pilot, lambda: len(table.rows) == 52 and in_step(), what="appended")
        await pilot.press("end")  # onto a row that came live
        await wait_for(pilot, lambda: table.current == 51 and in_step(), what="last row")
        app.finish_indexing()


@aio
async def test_indexing_percentage_advances_with_bytes_read(monkeypatch):
    """The status line's `indexing NN%` is the share of the file read (a classic pcap here),
    rising batch by batch, not a jump from nothing to done."""
    from kanalyze.tui import app as app_module
    from kanalyze.tui.store import ExchangeStore

    seen: list[float] = []

    class Recording(ExchangeStore):
        @property
        def progress(self) -> float | None:
            return self._progress

        @progress.setter
        def progress(self, value: float | None) -> None:
            self._progress = value
            if value is not None:
                seen.append(value)

    monkeypatch.setattr(app_module, "ExchangeStore", Recording)
    monkeypatch.setattr(app_module, "BATCH_EXCHANGES", 4)
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_indexed(pilot)
    during = seen[:-1]  # the last is finish_indexing's 1.0
    assert len(set(during)) >= 5 and during == sorted(during)
    assert 0 < during[0] < 0.5 and 0.5 < during[-1] <= 1.0 and seen[-1] == 1.0


@aio
async def test_spill_closed_under_the_indexer_ends_it_quietly(monkeypatch):
    """Quitting while a file is indexed closes the spill file under the worker; the engine's
    `hold` then meets it (SpillClosed, simulated here without closing the file the screen
    still reads): the worker stops without an error (no traceback on exit)."""
    from kanalyze.tui.spill import FrameSpill, SpillClosed

    put = FrameSpill.put
    refused = []

    def closing(self, pdu):
        if self.size > 2000:
            refused.append(pdu)
            raise SpillClosed
        return put(self, pdu)

    monkeypatch.setattr(FrameSpill, "put", closing)
    app = KanalyzeApp([CODECS])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: refused, what="spill refused")
        await pilot.pause(0.3)
        # an exception out of the worker would have ended the app (and run_test raised)
        assert app.is_running and not app.store.done and app.store.error is None
        assert 0 < len(app.store) < 52
