"""Loads tests/data/records/make_inputs.py (a script, not a package) once for the records tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "records"


def _load():
    name = "records_make_inputs"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DATA / "make_inputs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


MAKER = _load()
