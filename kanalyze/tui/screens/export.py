"""Export the exchanges the table lists (filtered, in table order) to an NDJSON file, or the
packets carrying them to a pcap file (a name ending in .pcap); an existing file is overwritten
only after a second Enter."""

from __future__ import annotations

import os

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class ExportScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, count: int, default: str = "kanalyze-export.ndjson", pcap: bool = True
    ) -> None:
        super().__init__()
        self.count = count
        self.default = default
        self.pcap = pcap  # the inputs can be read again (not a live capture)
        self._confirmed: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export-dialog"):
            yield Label(f"Export {self.count:,} exchanges (the filtered table) to:")
            yield Input(self.default, id="export-path")
            hint = "NDJSON; a name ending in .pcap writes their packets" if self.pcap else "NDJSON"
            yield Label(f"{hint}. Enter to write, Esc to cancel", id="export-hint", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        hint = self.query_one("#export-hint", Label)
        if not path:
            return
        if path.endswith(".pcap") and not self.pcap:
            hint.update("[b red]no pcap from a live capture: its packets are not kept[/]")
            return
        if os.path.isdir(path):
            hint.update(f"[b red]{path} is a directory[/]")
            return
        if os.path.exists(path) and self._confirmed != path:
            self._confirmed = path
            hint.update(f"[b yellow]{path} exists: Enter again overwrites it, Esc cancels[/]")
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
