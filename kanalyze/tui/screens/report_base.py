"""Shared behaviour of the views fed by the analysis report (replication, semantics, groups)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.screen import Screen
from textual.widgets import DataTable, Static


class ReportScreen(Screen):
    """Asks the app for the analysis when shown; redraws when a new report arrives."""

    title_text = ""

    def __init__(self) -> None:
        super().__init__()
        self._shown_report: object = None
        # table id -> the frame each of its rows points at (Enter on a row jumps to its exchange)
        self.row_frames: dict[str, list[int | None]] = {}
        # table id -> the finding each row shows (a jump then selects the field it is about)
        self.row_findings: dict[str, list[dict]] = {}

    def frames_of(self, table_id: str) -> list[int | None]:
        """The (cleared) list of frames for a table's rows; fill it as rows are added."""
        out = self.row_frames[table_id] = []
        self.row_findings.pop(table_id, None)
        return out

    def findings_of(self, table_id: str) -> list[dict]:
        """The (cleared) list of findings for a table's rows, beside `frames_of`'s frames."""
        out = self.row_findings[table_id] = []
        return out

    @on(DataTable.RowSelected)
    def jump(self, event: DataTable.RowSelected) -> None:
        """Enter on a finding, a transaction, a rebalance or a timeline entry: the exchanges
        view with the exchange carried by its frame selected."""
        tid = event.data_table.id or ""
        frames = self.row_frames.get(tid)
        row = event.cursor_row
        if frames and 0 <= row < len(frames) and frames[row]:
            findings = self.row_findings.get(tid) or []
            self.app.jump_to_frame(frames[row], findings[row] if row < len(findings) else None)

    def on_mount(self) -> None:
        self.set_interval(0.25, self.poll)
        self.poll()

    def on_screen_resume(self) -> None:
        self.app.request_analysis()
        self.poll()

    def poll(self) -> None:
        app = self.app
        report = app.report
        if report is not None and report is not self._shown_report:
            self._shown_report = report
            self.show_report(report)
        self.query_one("#report-status", Static).update(Text.from_markup(self.status_text()))

    def status_text(self) -> str:
        app = self.app
        parts = [f"[b]{self.title_text}[/]", app.source_label]
        if app.analysis_running:
            parts.append(f"[b]analyzing {app.analysis_progress:.0%}[/]")
        elif app.report is None:
            parts.append(
                "waiting for indexing to finish" if not app.store.done else "no analysis yet (r)"
            )
        else:
            parts.append(f"analysis of {app.report_count:,} exchanges")
            if app.report_count < len(app.store):
                parts.append(f"{len(app.store) - app.report_count:,} newer: r to refresh")
        return " │ ".join(parts)

    def show_report(self, report: dict) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def v(x: object) -> str:
    return "-" if x is None else str(x)


def ms(x: object) -> str:
    return "-" if x is None else f"{x:.2f}"
