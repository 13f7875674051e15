"""Shared behaviour of the views fed by the analysis report (replication, semantics, groups)."""

from __future__ import annotations

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Static


class ReportScreen(Screen):
    """Asks the app for the analysis when shown; redraws when a new report arrives."""

    title_text = ""

    def __init__(self) -> None:
        super().__init__()
        self._shown_report: object = None

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
            parts.append("waiting for indexing to finish" if not app.store.done else "no analysis yet (r)")
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
