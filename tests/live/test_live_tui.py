"""`kanalyze tui --live IFACE`: a live session feeds the same app, through its feed hook."""

from __future__ import annotations

import argparse
from pathlib import Path

import kanalyze.live as live
from kanalyze.commands import tui as tui_command
from tests.live.test_live_unit import FakeSource, export_lines, replay

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


def test_tui_live_feeds_the_app_every_exchange(monkeypatch):
    pkts, lt = replay(CAPTURES / "lib_acks.pcap")
    made: dict = {}
    source = FakeSource(pkts, lt, at_end=lambda: made["stop"]())
    monkeypatch.setattr(live, "open_source", lambda iface, bpf, *a, **k: source)

    class FakeApp:
        def __init__(self, **kwargs) -> None:  # noqa: ANN003
            made.update(kwargs)
            self.rows: list = []

        def add_exchanges(self, exs) -> None:  # noqa: ANN001
            self.rows.extend(exs)

        def run(self) -> None:
            made["feed"](self)  # what the app's worker does
            made["app"] = self

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    tui_command.add_parser(sub)
    args = parser.parse_args(["tui", "--live", "lo", "--header-only"])
    assert tui_command._run_live(args, FakeApp) == 0
    assert made["source_label"] == "lo (live)"
    assert source.closed
    got = [(e.conn.id, e.correlation_id, e.status) for e in made["app"].rows]
    assert len(got) == len(export_lines(CAPTURES / "lib_acks.pcap", decode=False))


def test_tui_needs_files_or_live(capsys):
    from kanalyze.cli import main

    assert main(["tui"]) == 2
    assert "--live" in capsys.readouterr().err
    assert main(["tui", "--live", "lo", str(CAPTURES / "lib_acks.pcap")]) == 2
