"""Delivery semantics: producers (idempotence, sequences), transactions, findings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Static

from kanalyze.tui.locate import jump_frame
from kanalyze.tui.screens.report_base import ReportScreen, ms, v


class SemanticsScreen(ReportScreen):
    title_text = "Delivery semantics"

    def compose(self) -> ComposeResult:
        yield Static("", id="report-status")
        with Vertical():
            yield Static("[b]Producers[/]", classes="section")
            yield DataTable(id="producers", cursor_type="row")
            yield Static("[b]Transactions[/]", classes="section")
            yield DataTable(id="transactions", cursor_type="row")
            yield Static("[b]Findings[/]", classes="section")
            yield DataTable(id="findings", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#producers", DataTable).add_columns(
            "client id",
            "pid",
            "epoch",
            "idempotent",
            "acks",
            "txn id",
            "in flight",
            "partition",
            "sequences",
            "batches",
            "records",
            "dup",
            "gaps",
            "retries",
            "errors",
        )
        self.query_one("#transactions", DataTable).add_columns(
            "txn id", "pid", "epoch", "outcome", "partitions", "states", "markers", "frames", "ms"
        )
        self.query_one("#findings", DataTable).add_columns("severity", "kind", "message", "frames")
        super().on_mount()

    def show_report(self, report: dict) -> None:
        prod = self.query_one("#producers", DataTable)
        prod.clear()
        for p in report.get("producers") or []:
            head = (
                p.get("client_id") or "-",
                v(p.get("producer_id")),
                v(p.get("producer_epoch")),
                "yes" if p.get("idempotent") else "no",
                v(p.get("acks")),
                v(p.get("transactional_id")),
                v(p.get("max_in_flight")),
            )
            errors = ",".join(f"{k}x{n}" for k, n in (p.get("errors") or {}).items()) or "-"
            parts = list((p.get("partitions") or {}).items()) or [("-", {})]
            for i, (key, s) in enumerate(parts):
                seq = (
                    "-"
                    if s.get("first_sequence") is None
                    else f"{s['first_sequence']}..{s['last_sequence']}"
                )
                row = head if i == 0 else ("",) * len(head)
                prod.add_row(
                    *row,
                    key,
                    seq,
                    v(s.get("batches")),
                    v(s.get("records")),
                    v(s.get("duplicates")),
                    v(s.get("gaps")),
                    v(s.get("retries")),
                    errors if i == 0 else "",
                )
        txn = self.query_one("#transactions", DataTable)
        txn.clear()
        txn_frames = self.frames_of("transactions")
        for t in report.get("transactions") or []:
            txn_frames.append(t.get("first_frame"))
            markers = (
                ",".join(f"{k}:{m}" for k, m in (t.get("control_records") or {}).items()) or "-"
            )
            txn.add_row(
                t.get("transactional_id") or "-",
                v(t.get("producer_id")),
                v(t.get("producer_epoch")),
                (t.get("outcome") or "-").upper(),
                ",".join(t.get("partitions") or []),
                " → ".join(t.get("states") or []),
                markers,
                f"{v(t.get('first_frame'))}-{v(t.get('last_frame'))}",
                ms(t.get("duration_ms")),
            )
        fnd = self.query_one("#findings", DataTable)
        fnd.clear()
        fnd_frames = self.frames_of("findings")
        fnd_items = self.findings_of("findings")
        for f in report.get("findings") or []:
            fnd_frames.append(jump_frame(f))
            fnd_items.append(f)
            fnd.add_row(
                f["severity"].upper(),
                f["kind"],
                f["message"],
                ",".join(str(x) for x in f["frames"][:8]),
            )
