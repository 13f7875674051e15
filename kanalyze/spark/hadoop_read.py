"""Byte ranges of any Hadoop FileSystem path, read from a Python worker (no pyspark, no libhdfs).

A Spark task's Python worker cannot call its executor's JVM, and `pyarrow.fs` reaches only the
file systems it was built for (`hdfs://` needs libhdfs, a scheme registered in Hadoop's
configuration is unknown to it). So each worker process starts, on first use, one small JVM of
its own (`java/HadoopRead.java`) on Spark's jars, with the Hadoop settings the driver shipped
(`hadoop_settings`): the same FileSystem classes and configuration Spark writes the
tables with. It answers positional reads; `HadoopStream` turns them into a seekable file
object read in `BLOCK` blocks, so a task holds one block of a file, never the file.

The JVM lives as long as the worker (it ends when its stdin closes) and serves every task the
worker runs; it costs about 1-3 s to start. Its Java class is compiled once per host (`javac`,
cached under the temporary directory); without `javac`, Java's source launcher runs the file.
"""

from __future__ import annotations

import atexit
import glob
import hashlib
import io
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import IO, Any

from kanalyze.capture import CaptureError
from kanalyze.capture.source import PositionalStream

BLOCK = 4 << 20  # bytes per read request (and the buffer a stream holds)
SOURCE = resources.files("kanalyze.spark").joinpath("java/HadoopRead.java")
_lock = threading.Lock()
_readers: dict[tuple, HadoopReader] = {}


def hadoop_settings(spark: Any) -> dict[str, str]:  # noqa: ANN401 - a SparkSession
    """The driver's Hadoop configuration as the workers' reader needs it: every property not
    from Hadoop's own defaults (`*-default.xml`): the `spark.hadoop.*` settings, the site files
    and what was set at run time on `sparkContext.hadoopConfiguration()`. One JVM call."""
    import json

    sc = spark.sparkContext
    conf = sc._jsc.hadoopConfiguration()
    writer = sc._jvm.java.io.StringWriter()
    sc._jvm.org.apache.hadoop.conf.Configuration.dumpConfiguration(conf, writer)
    out: dict[str, str] = {}
    for prop in json.loads(writer.toString()).get("properties", []):
        where = str(prop.get("resource") or "")
        if not where.endswith("-default.xml") and prop.get("value") is not None:
            out[str(prop["key"])] = str(prop["value"])
    return out


def _spark_jars() -> str:
    home = os.environ.get("SPARK_HOME")
    if not home:
        try:
            from pyspark.find_spark_home import _find_spark_home

            home = _find_spark_home()
        except Exception:  # noqa: BLE001 - any failure means: no Spark here
            home = ""
    jars = os.path.join(home, "jars") if home else ""
    if not jars or not glob.glob(os.path.join(jars, "*.jar")):
        raise CaptureError("reading Hadoop paths needs Spark's jars (SPARK_HOME/jars)")
    # the executor's working directory holds the jars the application added (--jars)
    return os.pathsep.join([os.path.join(jars, "*"), os.path.join(os.getcwd(), "*")])


def _command(classpath: str) -> list[str]:
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get(
        "JAVA_HOME") else shutil.which("java")
    if not java:
        raise CaptureError("reading Hadoop paths needs Java")
    code = SOURCE.read_bytes()  # works from a --py-files zip too
    tag = hashlib.sha1(code).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"kanalyze-hadoop-read-{tag}"
    if (cache / "HadoopRead.class").exists():
        return [java, "-cp", os.pathsep.join([str(cache), classpath]), "HadoopRead"]
    work = Path(tempfile.mkdtemp(prefix="kanalyze-javac-"))
    src = work / "HadoopRead.java"
    src.write_bytes(code)
    javac = shutil.which("javac", path=os.path.dirname(java)) or shutil.which("javac")
    if javac is None:  # Java's source launcher compiles it at each start
        return [java, "-cp", classpath, str(src)]
    done = subprocess.run([javac, "-nowarn", "-cp", classpath, "-d", str(work), str(src)],  # noqa: S603
                          capture_output=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise CaptureError(f"cannot compile HadoopRead.java: {' '.join(tail)}")
    try:
        os.replace(work, cache)  # atomic; another worker may have won the race
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return [java, "-cp", os.pathsep.join([str(cache), classpath]), "HadoopRead"]


def _pack(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">i", len(b)) + b


class HadoopReader:
    """One JVM answering positional reads (see the module docstring); thread-safe."""

    def __init__(self, settings: dict[str, str]) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the reader
        self._proc = subprocess.Popen(  # noqa: S603 - our own program
            _command(_spark_jars()), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._err)
        head = struct.pack(">i", len(settings)) + b"".join(
            _pack(k) + _pack(v) for k, v in sorted(settings.items()))
        self._send(head)
        self._lock = threading.Lock()

    def _send(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            self._died()

    def _died(self) -> None:
        self._err.seek(0)
        lines = self._err.read().decode(errors="replace").strip().splitlines()
        why = next((ln for ln in reversed(lines) if ln.strip() and not ln.startswith("\t")),
                   "it exited")
        raise CaptureError(f"the Hadoop reader JVM failed: {why.strip()}")

    def _take(self, n: int) -> bytes:
        data = self._proc.stdout.read(n)  # type: ignore[union-attr]
        if data is None or len(data) < n:
            self._died()
        return data  # type: ignore[return-value]

    def _ask(self, path: str, offset: int, length: int) -> bytes | int:
        with self._lock:
            self._send(_pack(path) + struct.pack(">qi", offset, length))
            (status,) = struct.unpack(">i", self._take(4))
            if status < 0:
                (n,) = struct.unpack(">i", self._take(4))
                raise CaptureError(f"{path}: {self._take(n).decode(errors='replace')}")
            if length < 0:
                return struct.unpack(">q", self._take(8))[0]
            return self._take(status)

    def size(self, path: str) -> int:
        return int(self._ask(path, 0, -1))  # type: ignore[arg-type]

    def pread(self, path: str, offset: int, length: int) -> bytes:
        return self._ask(path, offset, length)  # type: ignore[return-value]

    def close(self) -> None:
        try:
            self._proc.stdin.close()  # type: ignore[union-attr]
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()  # type: ignore[union-attr]
        self._err.close()


def _close_readers() -> None:
    """At exit: end the cached readers' JVMs, which would otherwise outlive this process."""
    with _lock:
        for rd in _readers.values():
            rd.close()
        _readers.clear()


atexit.register(_close_readers)


def reader(settings: dict[str, str]) -> HadoopReader:
    """This process's reader for these settings (started on first use, then reused)."""
    key = tuple(sorted(settings.items()))
    with _lock:
        got = _readers.get(key)
        if got is None or got._proc.poll() is not None:
            if got is not None:  # its JVM ended (a failed read): release its pipes
                got.close()
            got = _readers[key] = HadoopReader(settings)
        return got


class HadoopStream(PositionalStream):
    """A seekable read-only file over `HadoopReader.pread` (wrap it in a BufferedReader)."""

    def __init__(self, rd: HadoopReader, path: str, size: int | None = None) -> None:
        self._rd, self._path = rd, path
        super().__init__(rd.size(path) if size is None else size)

    def _pread(self, pos: int, n: int) -> bytes:
        return self._rd.pread(self._path, pos, n)


def open_stream(settings: dict[str, str], path: str) -> IO[bytes]:
    """A buffered, seekable binary file over `path` (any Hadoop URI)."""
    return io.BufferedReader(HadoopStream(reader(settings), path), BLOCK)


__all__ = ["BLOCK", "HadoopReader", "HadoopStream", "hadoop_settings", "open_stream", "reader"]
