"""Which hot modules may run compiled, and the switch back to their pure-Python source.

`tools/compile.py` compiles the modules in `COMPILED` with mypyc, in place: each gets an
extension module beside its `.py` (plus one shared library for the group inside the
`kanalyze` package).
Python's import system prefers an extension module to a source file of the same name, so
once they are built they are used, with no change to any import. They are optional: an
install without a compiler has none and runs the same `.py` files.

The pure-Python path is taken instead of the compiled one when

* `KANALYZE_PURE=1` is set (tests compare both paths this way), or
* any compiled module is older than its source (an edit, a checkout or a rebase after the
  build): compiled code that no longer matches its source must never run, and the modules
  of a group call each other natively, so one stale module sends all of them back to pure.

Importing this module runs `install()`, and both packages' `__init__` import it first:
before any listed module is imported, it puts a finder ahead of the path finder that loads
each listed module from its `.py`. This module must itself stay pure Python (it is the
switch).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# A compiled class is pickled (Spark streaming keeps engines in its state) like a plain one only
# with help: unpickling calls its __init__ (mypyc classes cannot be made without it; its
# `serializable` option does not call __init__ on ordinary construction either), so each
# pickled class's `__reduce__` names a function that makes a blank instance, and its state
# (`__getstate__`: slots here, mypyc's attribute dict there) is set on it afterwards.

# the modules tools/compile.py compiles (one mypyc group), by import name. Not the pcap reader:
# compiled, it kept read blocks alive longer (test_memory_bounds' 5,000 partial frames: 2.0 GB
# peak RSS against 1.1 GB) for no measurable gain (its cost is copying and the kernel's reads).
COMPILED: tuple[str, ...] = (
    "dissectors.batch_header",
    "dissectors.record_reader",
    "dissectors.records_json",
    "kanalyze.bodies.batches",
    "kanalyze.bodies.facts",
    "kanalyze.connection",
    "kanalyze.correlation",
    "kanalyze.engine",
    "kanalyze.engine_types",
    "kanalyze.export.header_text",
    "kanalyze.flows",
    "kanalyze.framing",
    "kanalyze.headers",
    "kanalyze.jsontext",
    "kanalyze.parallel.range_engine",
    "kanalyze.reassembly",
    "kanalyze.resync",
)

# the Cython extensions tools/compile.py builds (optional too), by import name; each has a
# `.pyx` source and no `.py` of the same name: its user imports it only when
# `cython_usable` says so, and runs its pure-Python path otherwise
CYTHON: tuple[str, ...] = ("dissectors.record_text",)

ROOT = Path(__file__).resolve().parent.parent  # the directory holding both packages
EXT = importlib.machinery.EXTENSION_SUFFIXES[0]  # e.g. .cpython-311-x86_64-linux-gnu.so


def source(name: str) -> Path:
    """The `.py` file of a listed module."""
    return ROOT / (name.replace(".", "/") + ".py")


def extension(name: str) -> Path:
    """Where the compiled extension of a listed module is built."""
    return ROOT / (name.replace(".", "/") + EXT)


def pyx_source(name: str) -> Path:
    """The `.pyx` file of a listed Cython module."""
    return ROOT / (name.replace(".", "/") + ".pyx")


def cython_usable(name: str) -> bool:
    """Whether the Cython module `name` is built, not older than its `.pyx` and not switched
    off by KANALYZE_PURE (a user imports it only then)."""
    if pure_forced():
        return False
    try:
        return extension(name).stat().st_mtime >= pyx_source(name).stat().st_mtime
    except OSError:
        return False


def pure_forced() -> bool:
    """KANALYZE_PURE set to anything but empty or 0."""
    return os.environ.get("KANALYZE_PURE", "") not in ("", "0")


def stale() -> list[str]:
    """The listed modules whose extension exists and is older than their source."""
    out = []
    for name in COMPILED:
        try:
            built = extension(name).stat().st_mtime
        except OSError:
            continue
        try:
            if built < source(name).stat().st_mtime:
                out.append(name)
        except OSError:
            continue
    return out


def built() -> list[str]:
    """The listed modules that have a compiled extension beside their source."""
    return [name for name in COMPILED if extension(name).exists()]


class _PureFinder:
    """Finds each listed module's `.py` source, ahead of its compiled extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _NAMES:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


_NAMES = frozenset(COMPILED)
_installed = False


def install() -> None:
    """Take the pure-Python path when forced or when the build is stale; idempotent."""
    global _installed
    if _installed or not built():
        return
    if pure_forced() or stale():
        sys.meta_path.insert(0, _PureFinder())
        _installed = True


install()
