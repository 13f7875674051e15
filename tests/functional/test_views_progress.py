"""The progress bar appears on a terminal (a pseudo-terminal here) and never in piped output;
a missing input path is one line and exit 2, at once, for every command."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.views.progress import wanted

ROOT = Path(__file__).resolve().parents[2]
CAP = "captures/lib_group_rebalance.pcap"


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "KANALYZE_NO_PROGRESS")
    }
    env.update(PYTHONPATH=str(ROOT), TERM="xterm", KANALYZE_PROGRESS_DELAY="0")
    env.update(extra)
    return env


def run_with_pty_stderr(argv: list[str], env: dict[str, str]) -> tuple[bytes, bytes, int]:
    """(stdout, what the terminal on stderr received, exit code); stdout is a pipe."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kanalyze.cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out = proc.stdout.read()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    os.close(master)
    return out, bytes(seen), proc.wait()


@pytest.mark.parametrize("command", [["stats", "-z", "conv"], ["report"], ["records"]])
def test_progress_bar_on_a_terminal_only(command: list[str]) -> None:
    out, term, code = run_with_pty_stderr([*command, CAP], _env())
    assert code == 0
    assert b"reading" in term and b"\x1b[" in term  # the bar was drawn (and erased)
    piped = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", *command, CAP],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        check=True,
    )
    assert piped.stderr == b""  # no bar when stderr is not a terminal
    assert piped.stdout == out  # stdout is the same with or without the bar
    assert b"\x1b[" not in out


@pytest.mark.parametrize("off", [{"NO_COLOR": "1"}, {"CI": "true"}, {"TERM": "dumb"}])
def test_no_progress_when_told(off: dict[str, str]) -> None:
    _out, term, code = run_with_pty_stderr(["stats", "-z", "io", CAP], _env(**off))
    assert code == 0 and b"reading" not in term


def test_wanted_rules() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    assert wanted(Tty(), {"TERM": "xterm"})  # type: ignore[arg-type]
    assert not wanted(Tty(), {"TERM": "xterm", "NO_COLOR": "1"})  # type: ignore[arg-type]
    assert not wanted(Tty(), {"CI": "1"})  # type: ignore[arg-type]
    with open(os.devnull, "w") as devnull:
        assert not wanted(devnull, {})


@pytest.mark.parametrize(
    "command", ["export", "summary", "report", "stats", "metadata", "records", "spark"]
)
def test_missing_path_is_one_line_exit_2(command: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "kanalyze.cli", command, str(tmp_path / "nope.pcap")]
    if command == "spark":
        argv += ["--out", str(tmp_path / "out")]
    r = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    missing = tmp_path / "nope.pcap"
    assert r.stderr == f"kanalyze: error: {missing}: cannot open: No such file or directory\n"
    assert r.stdout == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "low"),
    [("lib_codecs.pcap", 1.0), ("crafted/gzip.pcap.gz", 1.0), ("crafted/pcapng_multi.pcapng", 0.9)],
)
def test_read_meter_counts_the_file(name: str, low: float) -> None:
    """The bytes counted from the packets reach the file's size (exactly for pcap, also
    inside gzip; pcapng blocks other than packets are not seen)."""
    from kanalyze.capture import read_captures
    from kanalyze.views.progress import ReadMeter

    path = str(ROOT / "captures" / name)
    meter = ReadMeter([path])
    seen = []
    for pkt in read_captures([path]):
        meter.packet(pkt)
        seen.append(meter.fraction())
    assert seen == sorted(seen) and seen[0] < 0.5  # it advances with the reading
    assert low <= seen[-1] <= 1.0
    assert ReadMeter(["-"]).fraction() is None
