"""Export the exchanges the table lists (filtered, in table order) to an NDJSON file."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class ExportScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, count: int, default: str = "kanalyze-export.ndjson") -> None:
        super().__init__()
        self.count = count
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="export-dialog"):
            yield Label(f"Export {self.count:,} exchanges (the filtered table) as NDJSON to:")
            yield Input(self.default, id="export-path")
            yield Label("Enter to write, Esc to cancel", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
