"""Consumer groups: generations and rebalances, members and assignments, committed offsets and lag."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Static

from kanalyze.tui.screens.report_base import ReportScreen, ms, v


class GroupsScreen(ReportScreen):
    title_text = "Consumer groups"

    def compose(self) -> ComposeResult:
        yield Static("", id="report-status")
        with Vertical():
            yield Static("[b]Rebalances[/] (one row per generation)", classes="section")
            yield DataTable(id="rebalances", cursor_type="row")
            yield Static("[b]Members[/]", classes="section")
            yield DataTable(id="members", cursor_type="row")
            yield Static("[b]Lag[/] (committed offset vs high watermark)", classes="section")
            yield DataTable(id="lag", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#rebalances", DataTable).add_columns(
            "group", "protocol", "generation", "members", "assignor", "leader", "rebalance ms"
        )
        self.query_one("#members", DataTable).add_columns(
            "group", "client id", "generations", "assignment", "left"
        )
        self.query_one("#lag", DataTable).add_columns(
            "group", "partition", "committed", "HW", "lag", "status"
        )
        super().on_mount()

    def show_report(self, report: dict) -> None:
        reb = self.query_one("#rebalances", DataTable)
        mem = self.query_one("#members", DataTable)
        lag = self.query_one("#lag", DataTable)
        for t in (reb, mem, lag):
            t.clear()
        reb_frames = self.frames_of("rebalances")
        for g in report.get("groups") or []:
            gid = g.get("group_id") or "-"
            for r in g.get("rebalances") or []:
                leader = (r.get("leader") or "-")[:24]
                reb_frames.append(r.get("started_frame") or r.get("completed_frame"))
                reb.add_row(
                    gid,
                    g.get("protocol") or "-",
                    v(r.get("generation_id")),
                    v(r.get("members")),
                    v(r.get("assignor")),
                    leader,
                    ms(r.get("duration_ms")),
                )
            for m in g.get("members") or []:
                mem.add_row(
                    gid,
                    m.get("client_id") or "-",
                    ",".join(str(x) for x in m.get("generations") or []),
                    ",".join(str(x) for x in m.get("assignment") or []),
                    "yes" if m.get("left") else "",
                )
            for key, s in (g.get("lag") or {}).items():
                lag.add_row(
                    gid,
                    key,
                    v(s.get("committed")),
                    v(s.get("high_watermark")),
                    v(s.get("lag")),
                    v(s.get("status")),
                )
