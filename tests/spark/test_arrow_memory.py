"""Arrow's memory pool in the pipeline's processes: the system allocator by default
(`kanalyze.spark.arrow_memory`), the user's choice when they made one."""

from __future__ import annotations

import os
import subprocess
import sys

from kanalyze.spark.arrow_memory import POOL_ENV
from kanalyze.spark.session import session_defaults

PROBE = "import kanalyze.spark, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def _pool_after_import(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != POOL_ENV}
    if env_value is not None:
        env[POOL_ENV] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_importing_the_package_first_makes_the_system_allocator_the_default():
    assert _pool_after_import(None) == "system"


def test_a_pool_the_user_chose_is_kept(monkeypatch):
    assert _pool_after_import("jemalloc") == "jemalloc"
    key = f"spark.executorEnv.{POOL_ENV}"
    monkeypatch.setenv(POOL_ENV, "jemalloc")
    assert session_defaults("local[2]")[key] == "jemalloc"  # the executors get it too
    monkeypatch.delenv(POOL_ENV)
    assert session_defaults("spark://127.0.0.1:7077")[key] == "system"


def test_python_workers_allocate_with_the_system_allocator(spark):
    def pools(batches):  # noqa: ANN001, ANN202 - a mapInArrow function
        import pyarrow as pa

        for _b in batches:
            yield pa.RecordBatch.from_pydict({"pool": [pa.default_memory_pool().backend_name]})

    got = {r["pool"] for r in spark.range(0, 2, 1, 2).mapInArrow(pools, "pool STRING").collect()}
    assert got == {"system"}
