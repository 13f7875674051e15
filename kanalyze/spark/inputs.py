"""Where Spark's inputs come from: local paths, globs, directories, or URIs (s3://, hdfs://,
gs://, ...) read through pyarrow.fs."""

from __future__ import annotations

import glob
import os
from typing import BinaryIO

from kanalyze.capture import CaptureError


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def open_input(path: str) -> BinaryIO:
    """A seekable binary stream: local paths directly, URIs (s3://, hdfs://, gs://, ...)
    through pyarrow.fs."""
    if is_uri(path):
        try:
            from pyarrow import fs as pafs
        except ImportError:  # pragma: no cover - pyarrow comes with the spark extra
            raise CaptureError(f"{path}: reading URIs needs pyarrow") from None
        try:
            filesystem, inner = pafs.FileSystem.from_uri(path)
            return filesystem.open_input_file(inner)  # type: ignore[return-value]
        except (OSError, ValueError) as e:
            raise CaptureError(f"{path}: cannot open: {e}") from None
    try:
        return open(local_path(path), "rb", buffering=0)  # noqa: SIM115 - caller closes
    except OSError as e:
        raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None


def file_size(path: str) -> int:
    if is_uri(path):
        from pyarrow import fs as pafs

        filesystem, inner = pafs.FileSystem.from_uri(path)
        return int(filesystem.get_file_info(inner).size or 0)
    return os.path.getsize(local_path(path))


def list_inputs(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Expand directories (recursively) and globs; URIs go through pyarrow.fs. Sorted,
    deduplicated."""
    out: list[str] = []
    for p in paths:
        if is_uri(p):
            from pyarrow import fs as pafs

            filesystem, inner = pafs.FileSystem.from_uri(p)
            info = filesystem.get_file_info(inner)
            if info.type == pafs.FileType.Directory:
                scheme = p.split("://", 1)[0]
                sel = pafs.FileSelector(inner, recursive=True)
                out.extend(
                    f"{scheme}://{i.path}"
                    for i in filesystem.get_file_info(sel)
                    if i.type == pafs.FileType.File
                )
            else:
                out.append(p)
            continue
        p = local_path(p)
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                out.extend(os.path.join(root, f) for f in files if not f.startswith("."))
        elif any(c in p for c in "*?["):
            out.extend(x for x in glob.glob(p, recursive=True) if os.path.isfile(x))
        else:
            out.append(p)
    return sorted(dict.fromkeys(out))


def default_capture_id(path: str) -> str:
    """The capture group: the parent directory (files captured at one point live together)."""
    return os.path.dirname(path.rstrip("/")) or "."
