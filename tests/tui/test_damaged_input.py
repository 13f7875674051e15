"""Issue 20: damaged input never takes the TUI down (the Replication view used to exit the app)."""

from __future__ import annotations

from kanalyze.tui.app import KanalyzeApp
from kanalyze.tui.screens.replication import ReplicationScreen
from tests.tui.conftest import ROOT, aio, wait_indexed, wait_report

CRASH = ROOT / "tests" / "data" / "bounded" / "produce_partial_second_batch.pcap"


@aio
async def test_replication_view_on_a_cut_second_batch():
    app = KanalyzeApp([str(CRASH)])
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_indexed(pilot)
        await pilot.press("2")
        await wait_report(pilot)
        assert isinstance(app.screen, ReplicationScreen) and app.is_running
        parts = app.screen.query_one("#partitions")
        assert parts.row_count == 1 and parts.get_row_at(0)[0] == "t-0"
        assert not [f for f in app.report["findings"] if f["kind"] == "analyzer_error"]
