"""The readable outputs: fixed-width snapshots of the report text on two captures, and no
Python repr (of a dict, list, None, True/False) anywhere in any text output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_views_stats import snapshot

from kanalyze.cli import main

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted((ROOT / "captures").glob("*.pcap")) + sorted(
    (ROOT / "captures" / "replication").glob("*.pcap")
)
# what str() of a dict, list, tuple or None leaves in text
REPR = re.compile(r"\{'|\['|\('|': |\bNone\b|\bTrue\b|\bFalse\b|<[a-z_.]+ object at 0x")


@pytest.mark.parametrize("name", ["lib_group_rebalance", "lib_transactions"])
def test_report_text_snapshot(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["report", f"captures/{name}.pcap"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    heads = [line for line in out.splitlines() if line and not line.startswith((" ", "─"))]
    assert heads.index("Capture") == 0 and heads[1].startswith("Findings")  # findings come first
    snapshot(f"report_{name}.txt", out)


def test_report_marks_expected_errors_and_waits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / "captures" / "lib_group_rebalance.pcap")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("MEMBER_ID_REQUIRED"))
    assert "expected: first JoinGroup" in line
    assert re.search(r"^Fetch +16 +long-poll", out, re.M)
    assert re.search(r"^JoinGroup +5 +rebalance wait", out, re.M)
    assert "window:      2026-11-22 03:37:13.338 UTC" in out


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.stem)
def test_no_python_repr_in_text(cap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # records: kanalyze's own tokens (raw keys and values are the clients' bytes, not ours)
    records = ["records", "--all", "-f", "%t %p %o %T %K %S %d %c %h\\n"]
    for command in (["report"], ["stats"], ["metadata"], ["summary"], records):
        assert main([*command, str(cap)]) == 0
        out = capsys.readouterr().out
        bad = [line for line in out.splitlines() if REPR.search(line)]
        assert not bad, (command, bad[:3])


def test_truncated_and_lossy_captures_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    crafted = ROOT / "captures" / "crafted"
    assert main(["report", str(crafted / "bad_truncated.pcap")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  note: +.*truncated packet record.*\(the capture ends early\)$", out, re.M)
    assert main(["stats", "--json", "-z", "conv", str(crafted / "bad_truncated.pcap")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["ended"] for r in doc["tables"]["conv"]] == ["cut"]
    assert any("ends early" in n for n in doc["capture"]["notes"])
    assert main(["report", str(crafted / "gap.pcap")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"note: +[\d,]+ bytes never captured \(2 gaps\)", out)
    assert main(["report", str(ROOT / "captures" / "lib_codecs.pcap")]) == 0
    assert "integrity:   no capture damage, no bytes lost in gaps" in capsys.readouterr().out


def _stdout_on_a_terminal(argv: list[str], **env: str) -> bytes:
    import os
    import pty
    import select
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI")}
    base.update(PYTHONPATH=str(ROOT), TERM="xterm", KANALYZE_NO_PROGRESS="1", COLUMNS="200")
    base.update(env)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "kanalyze.cli", *argv], cwd=ROOT, env=base,
                            stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    # the slave stays open here until the child is gone: Linux drops what a pty holds once
    # its last slave descriptor closes, so the parent reads everything first
    seen = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            seen += os.read(master, 65536)
        elif proc.poll() is not None:
            break
    os.close(slave)
    os.close(master)
    assert proc.wait() == 0
    return bytes(seen)


def test_colour_on_a_terminal_unless_no_color() -> None:
    argv = ["report", "captures/lib_transactions.pcap"]
    coloured = _stdout_on_a_terminal(argv)
    assert b"\x1b[" in coloured and b"Findings" in coloured
    plain = _stdout_on_a_terminal(argv, NO_COLOR="1")
    assert b"\x1b[" not in plain and b"Findings" in plain
