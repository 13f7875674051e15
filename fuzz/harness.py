"""The atheris entry point shared by every `fuzz/fuzz_<name>.py` script.

    python fuzz/fuzz_schema.py [libFuzzer flags] [corpus dirs]

Only the modules a harness targets are imported under atheris instrumentation
(`INSTRUMENT`): instrumented Python runs several times slower, and coverage
outside the target only steers the fuzzer away from it. The capture and
stream harnesses still decode what the engine produces, uninstrumented: a
crash there is still a finding, while guided coverage of the decoders is the
schema and records harnesses' job.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ENGINE = [
    "kanalyze.engine",
    "kanalyze.reassembly",
    "kanalyze.framing",
    "kanalyze.resync",
    "kanalyze.headers",
    "kanalyze.correlation",
]
_DECODERS = ["dissectors"]
INSTRUMENT: dict[str, list[str]] = {
    "capture": ["kanalyze.capture", "kanalyze.flows", *_ENGINE],
    "stream": _ENGINE,
    "schema": _DECODERS,
    "records": _DECODERS,
    "consumer": _DECODERS,
    "sasl": _DECODERS,
}


def _modules(package: str) -> list[str]:
    base = ROOT / package
    return [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(base.rglob("*.py"))
    ]


def instrumentation(name: str) -> tuple[list[str], list[str]]:
    """atheris's (include, exclude) for a harness: include takes top-level packages only,
    exclude exact module names, so every other module of those packages is excluded."""
    targets = INSTRUMENT[name]
    packages = sorted({t.split(".")[0] for t in targets})
    keep = {
        t.rsplit(".", k)[0] for t in targets for k in range(t.count(".") + 1)
    }  # targets and parents

    def wanted(mod: str) -> bool:
        return mod in keep or any(mod.startswith(t + ".") for t in targets)

    exclude = [m for pkg in packages for m in _modules(pkg) if not wanted(m)]
    return packages, exclude


def main(name: str) -> None:
    import atheris

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    include, exclude = instrumentation(name)
    with atheris.instrument_imports(include=include, exclude=exclude):
        import dissectors  # noqa: F401 -- its entry imports every module: none escapes
        from fuzz.targets import TARGETS

    target = TARGETS[name]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()
