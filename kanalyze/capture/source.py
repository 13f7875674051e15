"""Where a capture's bytes come from: a local file, or a URI (`hdfs://`, `s3a://`, ...) read
through the remote reader a caller installed (`set_remote`). The byte-range planner and the
range reader (`kanalyze.parallel.range_plan`) open every input here, so one code path serves
local and remote captures; only local files get `mmap`.

The Spark layer installs the reader: Spark's Hadoop FileSystem over py4j on the driver, a
worker's own Hadoop reader JVM in the tasks (`kanalyze.spark.hadoop_read`). Without one, a URI
is not a readable source (`readable` is False), and the callers take another path.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import IO, BinaryIO, cast

from kanalyze.capture.packets import CaptureError

Opener = Callable[[str], IO[bytes]]
Sizer = Callable[[str], int]
_REMOTE: dict[str, tuple[Opener, Sizer]] = {}


def is_remote(path: str) -> bool:
    """A URI other than `file:` (`file:` URIs are local paths)."""
    return "://" in path and not path.startswith("file:")


def local_name(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def set_remote(opener: Opener | None, sizer: Sizer | None = None) -> None:
    """Install (or, with None, remove) this process's reader of URIs."""
    _REMOTE.clear()
    if opener is not None and sizer is not None:
        _REMOTE["reader"] = (opener, sizer)


def readable(path: str) -> bool:
    """A local regular file, or a URI while a remote reader is installed."""
    if is_remote(path):
        return bool(_REMOTE)
    return os.path.isfile(local_name(path))


def source_size(path: str) -> int:
    if is_remote(path):
        if not _REMOTE:
            raise CaptureError(f"{path}: no reader for this URI")
        return _REMOTE["reader"][1](path)
    return os.path.getsize(local_name(path))


class PositionalStream(io.RawIOBase):
    """A seekable read-only file over positional reads (`_pread`) of a source of known size:
    remote readers need only say how to read n bytes at an offset; wrap it in a
    BufferedReader."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._pos = 0

    def _pread(self, pos: int, n: int) -> bytes:
        raise NotImplementedError

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b) -> int:  # noqa: ANN001 - a writable buffer
        n = min(len(b), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._pread(self._pos, n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


def open_source(path: str) -> BinaryIO:
    """A seekable binary file (the caller closes it). Raises CaptureError."""
    if is_remote(path):
        if not _REMOTE:
            raise CaptureError(f"{path}: no reader for this URI")
        return cast(BinaryIO, _REMOTE["reader"][0](path))
    try:
        return open(local_name(path), "rb")  # noqa: SIM115 - the caller closes it
    except OSError as e:
        raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None


__all__ = [
    "PositionalStream", "is_remote", "local_name", "open_source", "readable", "set_remote",
    "source_size",
]
