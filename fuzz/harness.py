"""The atheris entry point shared by every `fuzz/fuzz_<name>.py` script.

    python fuzz/fuzz_schema.py [libFuzzer flags] [corpus dirs]

kanalyze and dissectors are imported under atheris instrumentation so that
libFuzzer sees their branch coverage.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(name: str) -> None:
    import atheris

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    with atheris.instrument_imports(include=["kanalyze", "dissectors"]):
        import dissectors.compression  # noqa: F401 -- instrument lazily imported modules too
        import dissectors.embedded  # noqa: F401
        import dissectors.jsonify  # noqa: F401
        from fuzz.targets import TARGETS

    target = TARGETS[name]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()
