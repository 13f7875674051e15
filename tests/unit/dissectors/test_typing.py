"""`mypy` (configured in pyproject.toml) stays clean on the dissectors package."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_mypy_is_clean() -> None:
    if importlib.util.find_spec("mypy") is None:  # not imported here: it warns at import
        pytest.skip("mypy is not installed")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir=/dev/null"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "dissectors" in (ROOT / "pyproject.toml").read_text().split("[tool.mypy]")[1]
