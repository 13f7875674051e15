"""The spark-submit recipe on a real standalone cluster: a master and a worker on loopback
started here (Spark's own Master and Worker classes, through spark-class) and stopped by PID;
the job submitted with the packed archive gives exactly `kanalyze export`'s exchanges.

The cluster test takes 1-5 minutes on two cores (four JVMs), so the normal run skips it; CI's
last step runs it: `KANALYZE_SPARK_CLUSTER=1 python -m pytest -n 0 tests/spark/test_submit.py`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from kanalyze.spark.session import session_defaults
from kanalyze.spark.submit import ENTRY_NAME, ZIP_NAME, cli, pack
from tests.spark.support import LONG_CAPTURE, offline_keys, spark_keys

pytestmark = pytest.mark.spark
START_S = 120  # master + worker up, on a loaded 2-core machine
JOB_S = 400


def test_pack_writes_an_importable_archive_and_the_entry_script(tmp_path, capsys):
    assert cli([str(tmp_path / "dist")]) == 0
    lines = capsys.readouterr().out.splitlines()
    archive, entry = tmp_path / "dist" / ZIP_NAME, tmp_path / "dist" / ENTRY_NAME
    assert lines[:2] == [str(archive), str(entry)]
    assert lines[2].startswith("spark-submit --master ") and f"--py-files {archive}" in lines[2]
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"kanalyze/cli.py", "kanalyze/spark/submit.py", "dissectors/__init__.py",
            "pyspark_kafka_pcap.py"} <= names  # fmt: skip
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # a fresh interpreter that can import kanalyze only from the archive runs the entry script
    env = {**os.environ, "PYTHONPATH": str(archive)}
    code = "import kanalyze.spark.submit as s, sys; print(s.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    assert out.startswith(str(archive))
    assert "from kanalyze.spark.submit import main" in entry.read_text()


def test_ui_is_forced_off_only_for_local_masters():
    assert session_defaults("local[2]")["spark.ui.enabled"] == "false"
    assert "spark.ui.enabled" not in session_defaults(None)  # under spark-submit
    assert "spark.ui.enabled" not in session_defaults("spark://127.0.0.1:7077")
    assert session_defaults("local[2]", {"spark.ui.enabled": "true"})["spark.ui.enabled"] == "true"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - the local master's UI
        return json.loads(r.read())


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


@pytest.fixture
def cluster(tmp_path):
    """A standalone master and one worker (1 core, 1 GB) on 127.0.0.1; both stopped by PID."""
    spark_class = _spark_home() / "bin" / "spark-class"
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(_spark_home())}
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, args: list[str]) -> None:
        with open(logs / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen(
                [str(spark_class), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                cwd=tmp_path,
            ))  # fmt: skip

    url = f"spark://127.0.0.1:{port}"
    try:
        start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(ui)])  # fmt: skip
        start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
                         "--work-dir", str(tmp_path / "work"), url])  # fmt: skip
        deadline = time.monotonic() + START_S
        state: dict = {}
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), (logs / "master.log").read_text()
            try:
                state = _json(f"http://127.0.0.1:{ui}/json/")
            except OSError:
                state = {}
            if state.get("aliveworkers", 0) >= 1:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the standalone cluster did not start in {START_S} s: {state}")
        yield {"url": url, "ui": ui, "env": env, "logs": logs}
    finally:
        for p in reversed(procs):  # by PID: spark-class execs the JVM, so the PID is the JVM's
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("KANALYZE_SPARK_CLUSTER") != "1",
    reason="1-5 min: a standalone cluster; CI's last step runs it (KANALYZE_SPARK_CLUSTER=1)",
)
def test_spark_submit_on_a_standalone_cluster_equals_offline_export(spark, cluster, tmp_path):
    archive, entry = pack(tmp_path / "dist")
    out = tmp_path / "out"
    # the job must find kanalyze in the archive: no repository on its path, not run from it
    env = {k: v for k, v in cluster["env"].items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark_submit = _spark_home() / "bin" / "spark-submit"
    proc = subprocess.run(
        [str(spark_submit), "--master", cluster["url"], "--py-files", str(archive),
         "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
         "--conf", f"spark.ui.port={_free_port()}",
         str(entry), str(LONG_CAPTURE), "--out", str(out), "--json", "--split-mb", "1"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=JOB_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["rows"]["exchanges"] == 93
    rows = [r.asDict() for r in spark.read.parquet(str(out / "exchanges")).collect()]
    assert spark_keys(rows) == offline_keys(LONG_CAPTURE)
    # it ran on the cluster (an application the master completed), with its UI on
    apps = _json(f"http://127.0.0.1:{cluster['ui']}/json/")["completedapps"]
    assert [a["name"] for a in apps] == ["kanalyze"]
    assert "Successfully started service 'SparkUI'" in proc.stderr
