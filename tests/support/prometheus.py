"""A real Prometheus server (Debian's `prometheus` package) on loopback in a temp dir, and its
HTTP query API, for the dashboard tests."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest


def binary(name: str) -> str:
    """The path of `name` (prometheus, promtool); the test is skipped where it is not installed
    (CI installs it in .ci/run)."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian package prometheus)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """`prometheus` on 127.0.0.1 with its data in `workdir`; `config` is the YAML text."""

    def __init__(
        self, workdir: Path, config: str = "scrape_configs: []\n", data: Path | None = None
    ) -> None:
        exe = binary("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (workdir / "prometheus.yml").write_text(config)
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={data or workdir / 'data'}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.2)

    def api(self, path: str, **params: object) -> dict:
        q = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=30) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query's result vector (at `at`, seconds, or now)."""
        params: dict[str, object] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step
        )["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
