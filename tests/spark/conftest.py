"""One local[2] SparkSession for every Spark test; everything here is skipped cleanly when
pyspark, pyarrow or Java is missing. The environment is set before pyspark starts a JVM."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"


def _missing() -> str | None:
    for mod in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} is not installed (pip install 'kanalyze[spark]')"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "Java is not installed"
    return None


MISSING = _missing()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            if xdist:  # with `-n N --dist loadgroup` every Spark test runs in one worker: one JVM
                item.add_marker(pytest.mark.xdist_group("spark"))
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from kanalyze.spark.session import get_session

    s = get_session(
        "local[2]",
        "kanalyze-tests",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
            "spark.python.worker.faulthandler.enabled": "true",
        },
    )
    yield s
    s.stop()
