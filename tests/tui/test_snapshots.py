"""Snapshots of each main screen at a pinned terminal size (pytest-textual-snapshot).

Update after an intended change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and review the SVGs (the report opens in a browser on failure)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from kanalyze.tui.app import KanalyzeApp  # noqa: E402
from kanalyze.tui.widgets.decode_tree import DecodeTree  # noqa: E402
from kanalyze.tui.widgets.exchange_table import ExchangeTable  # noqa: E402
from kanalyze.tui.widgets.hex_view import HexView  # noqa: E402
from tests.tui.conftest import CAPTURES, wait_for, wait_indexed, wait_report  # noqa: E402

SIZE = (160, 45)


def app_for(name: str, theme: str = "textual-dark") -> KanalyzeApp:
    return KanalyzeApp([str(CAPTURES / name)], theme=theme)


async def select_produce_field(pilot) -> None:
    """Filter to Produce, pick the gzip one, walk the tree to its topic name."""
    await wait_indexed(pilot)
    screen = pilot.app.screen
    screen.apply_filter("api:produce topic:lib-gzip")
    table = screen.query_one(ExchangeTable)
    tree = screen.query_one(DecodeTree)
    await wait_for(pilot, lambda: not screen.filtering and len(table.rows) == 1, what="filter")
    await wait_for(pilot, lambda: tree.index == table.rows[0], what="detail")
    table.focus()
    await pilot.press(
        "enter", "down", "down", "down", "down", "down", "down", "right", "right", "right", "right"
    )
    hexview = screen.query_one(HexView)
    # the topic name (compact string: length byte + "lib-gzip") is bytes 36..44 of the request frame
    await wait_for(
        pilot, lambda: hexview.highlight == (36, 9), what="hex highlight on the topic name"
    )
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.2)


def test_exchanges_dark(snap_compare):
    assert snap_compare(
        app_for("lib_codecs.pcap"), terminal_size=SIZE, run_before=select_produce_field
    )


def test_exchanges_light(snap_compare):
    assert snap_compare(
        app_for("lib_codecs.pcap", "textual-light"),
        terminal_size=SIZE,
        run_before=select_produce_field,
    )


async def _view(pilot, key: str) -> None:
    await wait_indexed(pilot)
    await pilot.press(key)
    await wait_report(pilot)


def test_replication(snap_compare):
    async def run_before(pilot):
        await _view(pilot, "2")

    assert snap_compare(
        app_for("replication/textbook.pcap"), terminal_size=SIZE, run_before=run_before
    )


def test_semantics(snap_compare):
    async def run_before(pilot):
        await _view(pilot, "3")

    assert snap_compare(app_for("lib_transactions.pcap"), terminal_size=SIZE, run_before=run_before)


def test_groups(snap_compare):
    async def run_before(pilot):
        await _view(pilot, "4")

    assert snap_compare(
        app_for("lib_group_rebalance.pcap"), terminal_size=SIZE, run_before=run_before
    )


def test_help(snap_compare):
    async def run_before(pilot):
        await wait_indexed(pilot)
        tree = pilot.app.screen.query_one(DecodeTree)
        await wait_for(pilot, lambda: tree.exchange is not None, what="detail")
        await pilot.pause(0.3)
        await pilot.press("question_mark")
        await pilot.pause(0.5)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app_for("lib_codecs.pcap"), terminal_size=SIZE, run_before=run_before)


async def _second_produce(pilot) -> None:
    """Indexed, cursor on the fifth row (a Produce), its detail and hex shown."""
    await wait_indexed(pilot)
    screen = pilot.app.screen
    table = screen.query_one(ExchangeTable)
    tree = screen.query_one(DecodeTree)
    await pilot.press("down", "down", "down", "down")
    await wait_for(pilot, lambda: tree.index == table.current == 4, what="detail")
    await pilot.pause(0.3)
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_exchanges_at_size(snap_compare, size):
    """80x24 (a default ssh terminal): API with version, latency and status on every row, the
    side panes folded, the tree full width; wider: columns from content, side panes back."""
    assert snap_compare(app_for("lib_codecs.pcap"), terminal_size=size, run_before=_second_produce)
