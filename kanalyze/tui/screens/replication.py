"""Replication progress per partition: leader LEO, HW and follower LEOs over time, lag, alerts."""

from __future__ import annotations

import re
import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Static

from kanalyze.tui.locate import jump_frame
from kanalyze.tui.screens.report_base import ReportScreen, ms, v
from kanalyze.tui.widgets.chart import StepChart


def partition_series(part: dict) -> dict[str, list[int | None]]:
    """Chart series of one partition's timeline: leader LEO, HW, each follower's LEO."""
    tl = part["timeline"]
    series: dict[str, list[int | None]] = {
        "leader LEO": [e.get("leader_leo") for e in tl],
        "HW": [e.get("high_watermark") for e in tl],
    }
    followers = sorted({f for e in tl for f in (e.get("followers") or {})}, key=str)
    for f in followers:
        series[f"follower {f} LEO"] = [
            ((e.get("followers") or {}).get(f) or {}).get("leo") for e in tl
        ]
    return series


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
NAME_ROOM = 24  # the partitions pane shows this much of a name before the partition number


def partition_labels(parts: list[dict]) -> list[str]:
    """`topic-partition` for the partitions pane, the partition number always visible: a topic
    id (unresolved) is cut to the shortest prefix (8 hex digits or more) that no other id in
    the list shares, with `…`; a long name is cut in the middle."""
    ids = sorted({p["topic"] for p in parts if _UUID.match(str(p["topic"]))})
    short: dict[str, str] = {}
    for tid in ids:
        n = 8
        while n < len(tid) and any(o != tid and o.startswith(tid[:n]) for o in ids):
            n += 1
        short[tid] = tid[:n] + "…" if n < len(tid) else tid
    out = []
    for p in parts:
        topic = str(p["topic"])
        if topic in short:
            topic = short[topic]
        elif len(topic) > NAME_ROOM:
            half = (NAME_ROOM - 1) // 2
            topic = topic[:half] + "…" + topic[-(NAME_ROOM - 1 - half) :]
        out.append(f"{topic}-{p['partition']}")
    return out


def time_label(ts: float) -> str:
    """A capture timestamp (seconds) as a UTC clock, for the chart's left end."""
    return time.strftime("%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d} UTC"


class ReplicationScreen(ReportScreen):
    title_text = "Replication"

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[dict] = []
        self.current: dict | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="report-status")
        with Horizontal():
            yield DataTable(id="partitions", cursor_type="row")
            with Vertical(id="rep-main"):
                yield Static("", id="rep-summary")
                yield Static("", id="rep-legend")
                yield StepChart(id="rep-chart")
                yield DataTable(id="rep-timeline", cursor_type="row")
                yield Static("", id="rep-alerts-title")
                # Enter on an alert: the exchange of its frame, the field it is about selected
                yield DataTable(id="rep-alerts", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#partitions", DataTable).add_columns("partition", "LEO", "HW", "ISR")
        self.query_one("#rep-timeline", DataTable).add_columns(
            "frame", "event", "LEO", "HW", "LSO", "log start", "followers LEO/remote/HW", "ISR"
        )
        self.query_one("#rep-alerts", DataTable).add_columns(
            "severity", "kind", "message", "frames"
        )
        super().on_mount()

    def show_report(self, report: dict) -> None:
        self.report = report
        self.parts = list(report.get("replication") or [])
        table = self.query_one("#partitions", DataTable)
        table.clear()
        for p, label in zip(self.parts, partition_labels(self.parts), strict=True):
            fin = p.get("final") or {}
            table.add_row(
                label,
                v(fin.get("leader_leo")),
                v(fin.get("high_watermark")),
                v(fin.get("isr")),
            )
        if self.parts:
            self.show_partition(0)
        else:
            self.query_one("#rep-summary", Static).update(
                "no Produce or Fetch traffic in this capture"
            )

    @on(DataTable.RowHighlighted, "#partitions")
    def part_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.parts):
            self.show_partition(event.cursor_row)

    def show_partition(self, i: int) -> None:
        p = self.parts[i]
        if p is self.current:
            return
        self.current = p
        key = f"{p['topic']}-{p['partition']}"
        fin = p.get("final") or {}
        lines = [
            f"[b]{key}[/]  leader epoch {v(p.get('leader_epoch'))}  "
            f"sources: {', '.join(p.get('sources') or [])}",
            f"leader LEO [b]{v(fin.get('leader_leo'))}[/]   "
            f"HW [b]{v(fin.get('high_watermark'))}[/]   "
            f"LSO {v(fin.get('last_stable_offset'))}   "
            f"log start {v(fin.get('log_start_offset'))}   ISR {v(fin.get('isr'))}",
        ]
        for fid, fs in (fin.get("followers") or {}).items():
            lag = fs.get("lag_records")
            style = "b red" if lag else "green"
            lines.append(
                f"follower {fid}: LEO {v(fs.get('leo'))}  HW {v(fs.get('hw'))}  "
                f"lag [{style}]{v(lag)} records / {ms(fs.get('lag_ms'))} ms[/]"
            )
        hl = p.get("hw_advance_latency_ms") or {}
        if hl.get("count"):
            lines.append(
                f"HW advance latency ms: p50 {ms(hl.get('p50'))}  p99 {ms(hl.get('p99'))}  "
                f"max {ms(hl.get('max'))}  ({hl['count']} batches)"
            )
        self.query_one("#rep-summary", Static).update(Text.from_markup("\n".join(lines)))
        chart = self.query_one(StepChart)
        tl = p.get("timeline") or []
        xs = [e.get("ts") for e in tl]
        if tl and all(isinstance(t, int | float) for t in xs):
            x = (time_label(xs[0]), f"+{xs[-1] - xs[0]:.3f} s (frame {tl[-1]['frame']})")
            chart.set_series(partition_series(p), x, xs)
        else:
            x = (f"frame {tl[0]['frame']}", f"frame {tl[-1]['frame']}") if tl else ("", "")
            chart.set_series(partition_series(p), x)
        self.query_one("#rep-legend", Static).update(chart.legend())
        table = self.query_one("#rep-timeline", DataTable)
        table.clear()
        frames = self.frames_of("rep-timeline")
        for e in tl:
            frames.append(e.get("frame"))
            fol = " ".join(
                f"{k}:{v(f.get('leo'))}/{v(f.get('remote_leo'))}/{v(f.get('hw'))}"
                for k, f in (e.get("followers") or {}).items()
            )
            table.add_row(
                str(e.get("frame")),
                e.get("event", ""),
                v(e.get("leader_leo")),
                v(e.get("high_watermark")),
                v(e.get("last_stable_offset")),
                v(e.get("log_start_offset")),
                fol or "-",
                v(e.get("isr")),
            )
        if p.get("timeline_dropped"):
            table.add_row("…", f"{p['timeline_dropped']} earlier entries dropped", *[""] * 6)
        alerts = [
            f
            for f in (self.report.get("findings") or [])
            if f.get("partition_key") == key
            or (f.get("topic") == p["topic"] and f.get("partition") == p["partition"])
            or f.get("message", "").startswith(key + ":")
        ]
        table = self.query_one("#rep-alerts", DataTable)
        table.clear()
        frames, items = self.frames_of("rep-alerts"), self.findings_of("rep-alerts")
        title = self.query_one("#rep-alerts-title", Static)
        table.display = bool(alerts)
        if not alerts:
            title.update(Text("no alerts for this partition", "green"))
        else:
            title.update(Text(f"ALERTS ({len(alerts)}): Enter opens the frame", "bold"))
        for f in alerts:
            frames.append(jump_frame(f))
            items.append(f)
            bad = f["severity"] in ("error", "critical")
            table.add_row(
                Text(f["severity"].upper(), "bold red" if bad else "yellow"),
                f["kind"],
                f["message"],
                ",".join(str(x) for x in f.get("frames", [])[:8]),
            )
