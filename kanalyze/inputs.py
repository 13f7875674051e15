"""Input paths checked before any work: a path that does not exist is one line and exit 2 at
once, not a run that reads nothing (a Spark job used to spend 49 s on a typo and exit 0)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

GLOB_CHARS = frozenset("*?[")


def missing_input(paths: Iterable[str]) -> str | None:
    """The first input that cannot be found, as an error message; None when all are there.

    `-` (stdin) and URIs (`s3://...`, `hdfs://...`, read by Spark through pyarrow) are not
    checked here; a glob must match at least one path.
    """
    for p in paths:
        if p == "-" or "://" in p:
            continue
        if GLOB_CHARS & set(p):
            if not glob.glob(p):
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
