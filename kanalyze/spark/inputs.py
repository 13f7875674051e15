"""Where Spark's inputs come from, and what identifies them.

* **Resolving** (`resolve_inputs`, on the driver): paths, globs, directories and URIs become a
  sorted list of absolute file names. With a SparkSession the listing goes through Spark's own
  Hadoop filesystem layer (`FileSystem.globStatus`/`listFiles` over py4j), the same layer and
  the same configuration Spark uses to write the tables, so `hdfs://`, `s3a://`, `gs://`,
  `file://` and plain (even relative) paths are handled alike. A path that does not exist, a
  glob or directory with no file, or an unreadable file raises `InputError` at once: a run over
  a mistyped path must fail, not write empty tables.
* **Reading** (`open_input`): local files directly. Remote files through the driver's Hadoop
  stream when one is registered (probes, content ids; the range planner's long walks use the
  Hadoop reader JVM, `kanalyze.spark.hadoop_read`, on the driver too), in the Python
  workers through their own Hadoop reader JVM (`kanalyze.spark.hadoop_read`, installed by
  `use_worker_hadoop` with the settings the driver shipped), else through `pyarrow.fs`
  (`s3a://` is read as `s3://`, `hdfs://` needs libhdfs). Either reader is also installed as
  the byte-range planner's and range reader's (`kanalyze.capture.source`).
* **Identity** (`content_id`): the file's size and a hash of its first and last KiB, so a
  relative, an absolute or a copied spelling of the same capture gives the same connection ids.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from typing import TYPE_CHECKING, Any, BinaryIO

from kanalyze.capture import CaptureError, source
from kanalyze.inputs import is_pattern, named_files

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

ID_PROBE = 1024  # bytes hashed at each end of a file for its content identity
_HADOOP: dict[str, Any] = {}  # the driver's Hadoop FS handles ("jvm", "conf"), when registered
_WORKER: dict[str, Any] = {}  # a task's Hadoop settings ("settings"), when shipped


class InputError(ValueError):
    """An input that cannot be read: missing, unreadable, or a pattern matching nothing. The
    message is one line naming the path."""


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file:")


def local_path(path: str) -> str:
    """A plain local path from `file:///x`, `file:/x` or `x`."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


# --------------------------------------------------------------------------- the driver's FS
def use_hadoop(spark: SparkSession | None) -> bool:
    """Route remote listing and reading on this (driver) process through Spark's Hadoop FS;
    False on Spark Connect (no JVM here) or without a session."""
    if spark is None:
        return False
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - Spark Connect and stopped sessions raise varied types
        return False
    if jvm is None:
        return False
    _HADOOP["jvm"], _HADOOP["conf"] = jvm, conf
    # the planner's long reads (every pcap record header) through the Hadoop reader JVM the
    # tasks use: 50+ MB/s where py4j moves about 11 (100 MB through viewfs:// here)
    from kanalyze.spark.hadoop_read import hadoop_settings, open_stream

    # asked for at the first remote read, not here: one JVM call (0.05 s) a local run never needs
    settings = functools.cache(lambda: hadoop_settings(spark))
    source.set_remote(lambda path: open_stream(settings(), path), file_size)
    return True


def use_worker_hadoop(settings: dict[str, str] | None) -> None:
    """In a task: read URIs through this worker's Hadoop reader JVM with the driver's
    `spark.hadoop.*` settings (`kanalyze.spark.hadoop_read`); None leaves pyarrow.fs."""
    if settings is None or _HADOOP:
        return
    from kanalyze.spark import hadoop_read

    _WORKER["settings"] = settings
    source.set_remote(open_input, file_size)
    hadoop_read.reader(settings)  # started now: a missing Java fails the task at once


def _hpath(path: str) -> tuple[Any, Any]:
    jvm = _HADOOP["jvm"]
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p, p.getFileSystem(_HADOOP["conf"])


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    for line in text:
        line = line.strip()
        if line and not line.startswith(("py4j", "An error occurred")):
            return line.split(": ", 1)[-1] if "Exception: " in line else line
    return type(e).__name__


class _HadoopStream(source.PositionalStream):
    """A seekable read-only stream over a Hadoop `FSDataInputStream` (driver only: py4j)."""

    def __init__(self, path: str) -> None:
        p, fs = _hpath(path)
        super().__init__(int(fs.getFileStatus(p).getLen()))
        self._in = fs.open(p)

    def _pread(self, pos: int, n: int) -> bytes:
        # py4j passes byte arrays by value: a Java array filled in place is never seen here, so
        # the JVM returns the bytes (readNBytes) instead
        self._in.seek(pos)
        return bytes(self._in.readNBytes(n))

    def close(self) -> None:
        if not self.closed:
            self._in.close()
        super().close()


def _pyarrow_fs(path: str) -> tuple[Any, str]:
    try:
        from pyarrow import fs as pafs
    except ImportError:  # pragma: no cover - pyarrow comes with the spark extra
        raise CaptureError(f"{path}: reading URIs needs pyarrow") from None
    uri = "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path
    return pafs.FileSystem.from_uri(uri)


def open_input(path: str) -> BinaryIO:
    """A seekable binary stream: local paths directly, URIs through the driver's Hadoop FS when
    registered (`use_hadoop`), else through pyarrow.fs."""
    if is_uri(path):
        try:
            if _HADOOP:
                return io.BufferedReader(_HadoopStream(path), 1 << 20)  # type: ignore[return-value]
            if _WORKER:
                from kanalyze.spark.hadoop_read import open_stream

                return open_stream(_WORKER["settings"], path)
            filesystem, inner = _pyarrow_fs(path)
            return filesystem.open_input_file(inner)  # type: ignore[return-value]
        except (OSError, ValueError) as e:
            raise CaptureError(f"{path}: cannot open: {e}") from None
        except Exception as e:  # noqa: BLE001 - py4j errors
            raise CaptureError(f"{path}: cannot open: {_first_line(e)}") from None
    try:
        return open(local_path(path), "rb", buffering=0)  # noqa: SIM115 - caller closes
    except OSError as e:
        raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None


def file_size(path: str) -> int:
    """Raises CaptureError for a URI that cannot be read (no connector, no such file)."""
    if is_uri(path):
        if _HADOOP:
            try:
                p, fs = _hpath(path)
                return int(fs.getFileStatus(p).getLen())
            except Exception as e:  # noqa: BLE001 - py4j wraps the JVM's exceptions
                raise CaptureError(f"{path}: cannot read: {_first_line(e)}") from None
        if _WORKER:
            from kanalyze.spark.hadoop_read import reader

            return reader(_WORKER["settings"]).size(path)
        filesystem, inner = _pyarrow_fs(path)
        return int(filesystem.get_file_info(inner).size or 0)
    return os.path.getsize(local_path(path))


def content_id(f: BinaryIO, size: int) -> str:
    """The file's identity whatever its name: size + SHA-1 of its first and last KiB."""
    h = hashlib.sha1(str(size).encode())
    f.seek(0)
    h.update(f.read(ID_PROBE))
    if size > ID_PROBE:
        f.seek(max(ID_PROBE, size - ID_PROBE))
        h.update(f.read(ID_PROBE))
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- listing
def _list_local(p: str) -> list[str]:
    p = os.path.abspath(local_path(p))
    if os.path.isdir(p) and not os.access(p, os.R_OK | os.X_OK):
        raise InputError(f"{p}: cannot read the directory (permission denied)")
    found = named_files(p)
    if found is not None:
        if not found:
            raise InputError(f"{p}: no files in this directory" if os.path.isdir(p)
                             else f"{p}: no file matches")
        return found
    if not os.path.exists(p):
        raise InputError(f"{p}: no such file or directory")
    if not os.access(p, os.R_OK):
        raise InputError(f"{p}: cannot read the file (permission denied)")
    return [p]


def _list_hadoop(p: str) -> list[str]:
    path, fs = _hpath(p)
    try:
        statuses = fs.globStatus(path) if is_pattern(p) else None
        if statuses is None:
            if not fs.exists(path):
                raise InputError(f"{p}: no such file or directory")
            statuses = [fs.getFileStatus(path)]
        out: list[str] = []
        for st in statuses:
            if st.isDirectory():
                it = fs.listFiles(st.getPath(), True)
                while it.hasNext():
                    f = it.next()
                    if not f.getPath().getName().startswith("."):
                        out.append(f.getPath().toString())
            else:
                out.append(st.getPath().toString())
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - py4j wraps the JVM's IOExceptions
        raise InputError(f"{p}: cannot list: {_first_line(e)}") from None
    if not out:
        raise InputError(f"{p}: no file matches" if is_pattern(p) else f"{p}: no files")
    return out


def _list_pyarrow(p: str) -> list[str]:
    from pyarrow import fs as pafs

    try:
        filesystem, inner = _pyarrow_fs(p)
        info = filesystem.get_file_info(inner)
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: cannot list: {e}") from None
    scheme = p.split("://", 1)[0]
    if info.type == pafs.FileType.Directory:
        sel = pafs.FileSelector(inner, recursive=True)
        out = [
            f"{scheme}://{i.path}"
            for i in filesystem.get_file_info(sel)
            if i.type == pafs.FileType.File
        ]
        if not out:
            raise InputError(f"{p}: no files")
        return out
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"{p}: no such file or directory")
    return [p]


def resolve_inputs(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Expand directories (recursively) and globs into absolute file names (local) or qualified
    URIs; raise InputError for anything missing or unreadable. Sorted, deduplicated."""
    if not paths:
        raise InputError("no input given")
    out: list[str] = []
    for p in paths:
        if not is_uri(p):
            out.extend(_list_local(p))
        elif _HADOOP:
            out.extend(_list_hadoop(p))
        else:
            out.extend(_list_pyarrow(p))
    return sorted(dict.fromkeys(out))


def list_inputs(paths: list[str] | tuple[str, ...]) -> list[str]:
    """`resolve_inputs` (kept under its old name for the planner and the Data Source)."""
    return resolve_inputs(paths)


def qualify_output(path: str) -> str:
    """An output directory as Spark must see it: a relative local path is taken from this
    process's working directory (the JVM's may differ: notebooks, tests, `os.chdir`)."""
    path = path.rstrip("/") or "/"
    return path if is_uri(path) else os.path.abspath(local_path(path))


def default_capture_id(path: str) -> str:
    """The capture group: the parent directory (files captured at one point live together)."""
    return os.path.dirname(path.rstrip("/")) or "."
