"""Input paths checked before any work: a path that does not exist is one line and exit 2 at
once, not a run that reads nothing (a Spark job used to spend 49 s on a typo and exit 0)."""

from __future__ import annotations

import glob
import gzip
import os
import re
import zlib
from collections.abc import Iterable

from kanalyze.capture import GZIP_MAGIC, PCAP_MAGICS, PCAPNG_SHB

GLOB_CHARS = frozenset("*?[")


def missing_input(paths: Iterable[str]) -> str | None:
    """The first input that cannot be found, as an error message; None when all are there.

    `-` (stdin) and URIs (`s3://...`, `hdfs://...`, read by Spark through pyarrow) are not
    checked here; a glob must match at least one path.
    """
    for p in paths:
        if p == "-" or "://" in p:
            continue
        if is_pattern(p):
            if not glob.glob(p, recursive=True):
                return f"{p}: cannot open: no file matches this pattern"
        elif not os.path.exists(p):
            return f"{p}: cannot open: No such file or directory"
    return None


def unopenable_input(paths: Iterable[str]) -> str | None:
    """The first local input that exists but cannot be opened for reading (a directory, no
    permission), as an error message; None when every one opens. `export -o FILE` asks before
    it opens FILE for writing: the capture readers would say the same, but only after FILE
    had been emptied (an earlier export overwritten by a run that wrote nothing)."""
    for p in paths:
        if p == "-" or "://" in p:
            continue
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            return f"{p}: cannot open: {e.strerror or e}"
    return None


def is_pattern(path: str) -> bool:
    return bool(GLOB_CHARS & set(path))


def named_files(path: str) -> list[str] | None:
    """The files a local directory (recursively, hidden files left out) or a glob pattern
    names, in no particular order; None when `path` is neither. The offline commands and
    `kanalyze spark` list their inputs with it."""
    if os.path.isdir(path):
        return [os.path.join(root, f) for root, _d, files in os.walk(path)
                for f in files if not f.startswith(".")]
    if is_pattern(path):
        return [f for f in glob.glob(path, recursive=True) if os.path.isfile(f)]
    return None


def expand_inputs(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """Directories and glob patterns as the files they name, as `kanalyze spark` takes them:
    a directory's captures (recursively, hidden files left out), a pattern's files, each in
    name order with numbers compared as numbers (`k.pcap`, `k.pcap1`, ..., `k.pcap10`: the
    order tcpdump -C wrote them; the files are merged by time anyway); any other path as
    given. Also, the files of directories that are not captures (left out: a capture
    directory often holds notes or an index; a file named on its own still must be one)."""
    out: list[str] = []
    left: list[str] = []
    for p in paths:
        found = None if p == "-" or "://" in p or os.path.isfile(p) else named_files(p)
        if found is None:
            out.append(p)
        elif os.path.isdir(p):
            caps: list[str] = []
            for f in sorted(found, key=_numbered):
                (caps if _looks_like_capture(f) else left).append(f)
            out.extend(caps or [p])  # none: the command line says so
        else:
            out.extend(sorted(found, key=_numbered) or [p])  # none: `missing_input` says so
    return out, left


def _numbered(path: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def _looks_like_capture(path: str) -> bool:
    """Whether the file starts as a pcap or pcapng does, itself or gzip-compressed (a
    directory of rotated captures may hold compressed logs too)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == GZIP_MAGIC:
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as gz:
                    head = gz.read(4)
    except (OSError, EOFError, zlib.error):
        return True  # the reader reports it
    return head in PCAP_MAGICS or head == PCAPNG_SHB
