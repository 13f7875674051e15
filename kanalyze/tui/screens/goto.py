"""Ctrl-G: go to a frame (packet number, as Wireshark and the NDJSON count them) or to an
exchange (`#12`, the table's No.)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


def parse_target(text: str) -> tuple[str, int] | str:
    """("frame", n) or ("exchange", n) from `57` / `#12`; an error message otherwise."""
    t = text.strip()
    kind = "exchange" if t.startswith("#") else "frame"
    num = t.lstrip("#").strip()
    if not num.isdigit() or int(num) < 1:
        return "a frame number (57) or an exchange number (#12)"
    return kind, int(num)


class GotoScreen(ModalScreen["tuple[str, int] | None"]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-dialog"):
            yield Label("Go to frame (57) or exchange (#12):")
            yield Input("", id="goto-input")
            yield Label("Enter goes, Esc cancels", id="goto-hint", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        target = parse_target(event.value)
        if isinstance(target, str):
            self.query_one("#goto-hint", Label).update(f"[b red]{target}[/]")
            return
        self.dismiss(target)

    def action_cancel(self) -> None:
        self.dismiss(None)
