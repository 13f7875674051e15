"""The core never imports the heavy front ends (textual, pyspark, scapy): an import contract
over every module of `dissectors/` and of kanalyze's engine, capture, live, analysis, bodies
and export (the TUI and Spark packages, and their commands, are the front ends)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONT_ENDS = (
    "kanalyze/tui/",
    "kanalyze/spark/",
    "kanalyze/commands/tui.py",
    "kanalyze/commands/spark.py",
)


def core_modules() -> list[str]:
    out = []
    for top in ("dissectors", "kanalyze"):
        for p in sorted((ROOT / top).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if not rel.startswith(FRONT_ENDS):
                out.append(rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
    return out


def test_the_contract_covers_the_engine_and_the_dissectors():
    mods = core_modules()
    for m in (
        "kanalyze.engine",
        "kanalyze.headers",
        "kanalyze.capture.split",
        "kanalyze.live",
        "dissectors.decoder",
        "dissectors.records",
    ):
        assert m in mods
    assert not any(m.startswith(("kanalyze.tui", "kanalyze.spark")) for m in mods)


def test_core_imports_are_headless():
    code = (
        "import importlib, sys\n"
        f"for m in {core_modules()!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'pyspark', 'scapy'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""
