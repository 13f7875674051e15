"""A SparkSession that works offline, with the environment pyspark needs set first.

* ``SPARK_LOCAL_IP`` defaults to 127.0.0.1 for local masters: without it Spark
  binds to whatever the hostname resolves to, and an unresolvable hostname
  kills the JVM (``JAVA_GATEWAY_EXITED``).
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` default to this interpreter:
  otherwise the workers run ``python3`` from PATH, which may lack pyarrow or
  kanalyze.
* Nothing is ever downloaded (no ``spark.jars.packages``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from kanalyze.spark.arrow_memory import POOL_ENV, SYSTEM

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


class SparkUnavailable(RuntimeError):
    """pyspark, pyarrow or Java is missing; the message says how to fix it."""


def check_requirements() -> None:
    """Raise SparkUnavailable with an actionable message when the pieces are not installed."""
    missing = []
    for mod in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise SparkUnavailable(
            f"the Spark pipeline needs {', '.join(missing)}: "
            "install it with `pip install 'kanalyze[spark]'`"
        )
    java = find_java()
    if java is None:
        raise SparkUnavailable(
            "the Spark pipeline needs Java 17 or 21 (not found on PATH or in JAVA_HOME); "
            "on Debian/Ubuntu: `apt-get install -y openjdk-17-jre-headless`"
        )
    version = java_major_version(java)
    if version is not None and version < 17:
        raise SparkUnavailable(f"Spark 4 needs Java 17 or newer; {java} is Java {version}")


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = os.path.join(home, "bin", "java")
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    for tok in out.split():
        tok = tok.strip('"')
        if tok[:1].isdigit():
            head = tok.split(".")
            try:
                major = int(head[0])
                return int(head[1]) if major == 1 and len(head) > 1 else major
            except ValueError:
                continue
    return None


def prepare_environment(master: str | None = None) -> None:
    """Environment defaults that must be in place before the JVM starts."""
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if not os.environ.get("JAVA_HOME"):
        java = shutil.which("java")
        if java:
            os.environ["JAVA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(java)))


def get_session(
    master: str | None = "local[*]", app_name: str = "kanalyze", conf: dict[str, str] | None = None
) -> SparkSession:
    """Create (or reuse) a SparkSession with offline-safe defaults and the Data Source registered.

    `master` None leaves the master to spark-submit.
    """
    check_requirements()
    prepare_environment(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in session_defaults(master, conf).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def session_defaults(master: str | None, conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings `get_session` applies, `conf` last. The UI is turned off only for local
    masters (no port 4040 to clash in tests and notebooks); on a cluster, or under spark-submit
    (`master` None), it stays as the cluster configures it."""
    defaults = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
        # the Python workers' Arrow pool (`arrow_memory`; the user's, when set here): mimalloc's
        # huge pages cost a first large run 0.1-0.2 s of kernel time per write task
        f"spark.executorEnv.{POOL_ENV}": os.environ.get(POOL_ENV) or SYSTEM,
    }
    if master and master.startswith("local"):
        cores = os.cpu_count() or 2
        defaults["spark.ui.enabled"] = "false"
        defaults["spark.sql.shuffle.partitions"] = str(2 * cores)
        defaults["spark.driver.memory"] = "2g"
        # the one local JVM only plans and schedules (Python decodes and, on the range path,
        # writes): its optimizing JIT compiler (C2) cost more CPU than it saved, and G1's
        # concurrent and parallel GC threads 0.3-1 CPU-s a GB of capture more than the serial
        # collector, on the cores the Python tasks need (docs/spark.md, E6)
        defaults["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    defaults.update(conf or {})
    return defaults


def register(spark: SparkSession) -> None:
    """Register the `kafka-pcap` Data Source explicitly (auto-registration may miss a module
    installed after the session started, or an editable install)."""
    from kanalyze.spark.datasource import KafkaPcapDataSource

    spark.dataSource.register(KafkaPcapDataSource)
