#!/usr/bin/env python3
"""Compile kanalyze's hot modules with mypyc and Cython, in place (optional; needs a C compiler).

    python tools/compile.py            # build the extensions beside their .py files
    python tools/compile.py --check    # say which path this checkout runs: compiled or pure
    python tools/compile.py --clean    # remove the extensions (back to pure Python)

The modules are listed in `dissectors/native.py` (`COMPILED`); the same `.py` files are the
pure-Python path, used when nothing is built, when `KANALYZE_PURE=1` is set, and when a
source is newer than its build (rebuild after editing one). mypyc ships with mypy (a test
dependency); the generated C and object files go to a scratch directory, the extensions
(`*.so`, ignored by git) next to their sources plus one shared library for the group,
`kanalyze/native__mypyc*.so`, inside the package so that every install mode finds it (a
top-level library is found only when the repo root is on `sys.path`).

Then the Cython modules (`CYTHON` in `dissectors/native.py`, `.pyx` sources: the export's
record encoder), when Cython is installed (`pip install cython`; without it they are skipped
and their users run their pure-Python path). See docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dissectors import native  # noqa: E402

GROUP = "kanalyze.native"  # the shared library: kanalyze/native__mypyc<EXT>, inside the package

# run in a child so setuptools' and mypyc's state stay out of this process
_BUILD = """
import sys
from setuptools import setup
from mypyc.build import mypycify
paths, group, scratch = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
sys.argv = [sys.argv[0]]
setup(
    name="kanalyze-native",
    ext_modules=mypycify(paths, opt_level="3", group_name=group, target_dir=scratch + "/c"),
    script_args=["-q", "build_ext", "--inplace", "--build-temp", scratch + "/obj",
                 "--build-lib", scratch + "/lib"],
)
"""


def artifacts() -> list[Path]:
    """Every file a build leaves in the tree: each package's extension modules that sit beside
    a source of the same name, `.py` or `.pyx` (also those of a module since dropped from the
    list: it would load against a newer group library) and the group library."""
    out = [
        path
        for package in ("kanalyze", "dissectors")
        for path in sorted((ROOT / package).rglob(f"*{native.EXT}"))
        if any(
            path.with_name(path.name[: -len(native.EXT)] + suffix).exists()
            for suffix in (".py", ".pyx")
        )
    ]
    group = ROOT.joinpath(*GROUP.split("."))
    # the group library; also where builds before it moved into the package left it
    libs = group.parent.glob(f"{group.name}__mypyc*{native.EXT}")
    return out + sorted(libs) + sorted(ROOT.glob(f"kanalyze_native__mypyc*{native.EXT}"))


def clean() -> None:
    for path in artifacts():
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}")


def check() -> int:
    built, stale = native.built(), native.stale()
    if not built:
        print("pure Python: no compiled modules (python tools/compile.py builds them)")
    elif stale:
        print(f"pure Python: the build is older than {', '.join(stale)} (rebuild)")
    elif native.pure_forced():
        print(f"pure Python: KANALYZE_PURE is set ({len(built)} compiled modules present)")
    else:
        missing = sorted(set(native.COMPILED) - set(built))
        print(f"compiled: {len(built)} modules" + (f"; not built: {missing}" if missing else ""))
    return 0


def build() -> int:
    clean()  # a module dropped from the list must not keep an old extension
    paths = [str(native.source(name).relative_to(ROOT)) for name in native.COMPILED]
    with tempfile.TemporaryDirectory(prefix="kanalyze-mypyc-") as scratch:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(ROOT)
        done = subprocess.run(
            [sys.executable, "-c", _BUILD, ",".join(paths), GROUP, scratch],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        failed = f"compile failed (exit {done.returncode}); kanalyze runs pure Python"
        print(failed, file=sys.stderr)
        clean()
        return 1
    print(f"compiled {len(paths)} modules with mypyc: {', '.join(native.COMPILED)}")
    return build_cython()


# the Cython modules, each in a child (as above)
_CYTHON = """
import sys
from setuptools import Extension, setup
from Cython.Build import cythonize
name, path, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = [sys.argv[0]]
setup(
    name="kanalyze-cython",
    ext_modules=cythonize([Extension(name, [path])], build_dir=scratch + "/c", quiet=True),
    script_args=["-q", "build_ext", "--inplace", "--build-temp", scratch + "/obj",
                 "--build-lib", scratch + "/lib"],
)
"""


def build_cython() -> int:
    """Build `native.CYTHON`; skipped (exit 0) when Cython is not installed."""
    try:
        import Cython  # noqa: F401
    except ImportError:
        print("Cython not installed: the record encoder is not built (pip install cython)")
        return 0
    for name in native.CYTHON:
        with tempfile.TemporaryDirectory(prefix="kanalyze-cython-") as scratch:
            path = str(native.pyx_source(name).relative_to(ROOT))
            done = subprocess.run(
                [sys.executable, "-c", _CYTHON, name, path, scratch],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            print(f"Cython build of {name} failed; its pure-Python path runs", file=sys.stderr)
            native.extension(name).unlink(missing_ok=True)
            return 1
    print(f"compiled {len(native.CYTHON)} modules with Cython: {', '.join(native.CYTHON)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="say which path this checkout runs")
    mode.add_argument("--clean", action="store_true", help="remove the compiled extensions")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    if args.clean:
        clean()
        return 0
    return build()


if __name__ == "__main__":
    raise SystemExit(main())
