"""Drive `kanalyze tui` in a real terminal (tmux) as a person would: type, read the screen."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.tui.conftest import CAPTURES, ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.session = "kanalyze"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # pytest exports COLUMNS/LINES (80x24) to children; the app must measure the real pane
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
            env=env,
        )

    def start(self, command: str, width: int = 160, height: int = 45) -> None:
        # size the window first, then start the app in it (so it never starts at tmux's default
        # size)
        self.run(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            self.session,
            "-x",
            str(width),
            "-y",
            str(height),
            "sleep 600",
        )
        self.run("set-option", "-t", self.session, "window-size", "manual", check=False)
        self.run(
            "resize-window", "-t", self.session, "-x", str(width), "-y", str(height), check=False
        )
        self.run("respawn-pane", "-k", "-t", self.session, command)

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.run("send-keys", "-t", self.session, *(("-l",) if literal else ()), *keys)

    def screen(self) -> str:
        r = self.run("capture-pane", "-p", "-t", self.session, check=False)
        return r.stdout

    def alive(self) -> bool:
        return self.run("has-session", "-t", self.session, check=False).returncode == 0

    def wait_text(self, *texts: str, timeout: float = 60.0) -> str:
        """The screen once every one of `texts` is on it."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{texts!r} not on screen after {timeout}s:\n{screen}")
            time.sleep(0.2)


@pytest.fixture
def tmux():
    # a server name per test: the previous test's server, killed at its teardown, may still be
    # going away on a reused name, and a new server on it then "exited unexpectedly"
    t = Tmux(f"kanalyze-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    yield t
    t.run("kill-server", check=False)


def test_browse_filter_view_and_quit(tmux):
    cap = CAPTURES / "lib_codecs.pcap"
    env = f"cd {ROOT} && env -u COLUMNS -u LINES TERM=xterm-256color"
    tmux.start(f"{env} {sys.executable} -m kanalyze.cli tui {cap}")
    screen = tmux.wait_text("52 exchanges", "Latency ms", "Produce v10", "lib-producer-none")
    assert "? Help" in screen and "lib-gzip[0]" in screen

    tmux.keys("/")
    time.sleep(0.5)  # a person waits for the cursor to land in the filter bar
    tmux.keys("api:produce", literal=True)
    time.sleep(0.3)
    tmux.keys("Enter")
    screen = tmux.wait_text(
        "5 of 52 match", "REQUEST  Produce v10"
    )  # the count, the selected row's detail
    # table rows: No. then a time with 6 decimals (the connections pane, left of │, has neither)
    table_lines = [
        line for line in screen.splitlines() if re.search(r"│\s*\d+\s+\d+\.\d{6} ", line)
    ]
    assert len(table_lines) == 5 and all("Produce v10" in line for line in table_lines)

    tmux.keys("?")
    tmux.wait_text("Filter terms")
    tmux.keys("Escape")
    time.sleep(0.5)  # an Escape followed at once by a key reads as Alt+key

    tmux.keys("2")
    screen = tmux.wait_text("leader LEO 12")
    assert "lib-gzip-0" in screen and "Replication" in screen

    tmux.keys("q")
    deadline = time.monotonic() + 30
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tmux.alive()


def test_80x24_shows_api_latency_status_and_the_hex_follows(tmux):
    """A default ssh terminal: every row shows API with version, latency and status; the hex
    pane (H) names the frame of the row the cursor is on, also after moving."""
    cap = CAPTURES / "lib_codecs.pcap"
    env = f"cd {ROOT} && env -u COLUMNS -u LINES TERM=xterm-256color"
    tmux.start(f"{env} {sys.executable} -m kanalyze.cli tui {cap}", width=80, height=24)
    screen = tmux.wait_text("52 exchanges", "Latency ms", "Status / error")
    rows = [
        line
        for line in screen.splitlines()
        if "ApiVersions v3" in line and re.match(r"\s*\d+\s+\d+\.\d{6} ", line)
    ]  # table rows
    assert rows and all("0." in line and " ok" in line for line in rows)
    tmux.keys("H")
    tmux.wait_text("request frame 4 ")  # the first exchange's request: frame 4
    tmux.keys("Down")
    tmux.wait_text("request frame 8 ")  # the second row (Metadata v12) is in frame 8
    tmux.keys("q")


def test_go_to_frame_and_a_findings_jump_to_its_field(tmux):
    """Ctrl-G to a frame; then view 3, Tab to the findings, Enter on the HW regression: the
    exchanges view on frame 30's response, `high_watermark: 3` selected, the hex pane on its
    bytes."""
    from kanalyze.session import Session
    from kanalyze.tui.analysis_source import analyze_exchanges

    cap = CAPTURES / "replication" / "anomalies.pcap"
    findings = analyze_exchanges(Session([str(cap)]).exchanges(), {})["findings"]
    k = next(i for i, f in enumerate(findings) if f["kind"] == "hw_regression")
    env = f"cd {ROOT} && env -u COLUMNS -u LINES TERM=xterm-256color"
    tmux.start(f"{env} {sys.executable} -m kanalyze.cli tui {cap}")
    tmux.wait_text("exchanges", "Latency ms")
    tmux.keys("C-g")
    time.sleep(0.5)
    tmux.keys("24", literal=True)
    tmux.keys("Enter")
    tmux.wait_text("frame 24 ")  # the exchange carried by frame 24 is selected, its hex shown
    tmux.keys("3")
    tmux.wait_text("Findings", "hw_regression")
    tmux.keys("Tab")
    tmux.keys("Tab")
    time.sleep(0.3)
    for _ in range(k):
        tmux.keys("Down")
    time.sleep(0.3)
    tmux.keys("Enter")
    screen = tmux.wait_text("high_watermark: 3", "response frame 30  [bytes")
    assert "RESPONSE  Fetch" in screen
    tmux.keys("q")
