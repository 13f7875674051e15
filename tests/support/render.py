"""Render every committed capture under every golden output mode, in one process, as digests.

Run as `python -m tests.support.render` from the repo root; prints one JSON object:
{"modules": {listed hot module: the file it was loaded from}, "encoder": whether the Cython
record encoder runs, "outputs": {capture and mode: sha256 of stdout, of stderr, and the exit
code}}. `test_compiled.py` runs it once on the
compiled modules and once with KANALYZE_PURE=1 and compares the two byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

from dissectors import native
from dissectors.record_fragments import ENCODE
from kanalyze.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from golden import DEFAULT_DIRS, MODES, captures  # noqa: E402

# beyond the golden modes: the paths that hand packet data to the engine as memoryviews
EXTRA: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("export-jobs2", ("export", "--jobs", "2")),
    ("export-write-pcap", ("export", "--header-only", "-w")),
)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(capture: str, argv: tuple[str, ...], scratch: Path) -> list[object]:
    """[stdout digest, stderr digest, exit code] (and the written pcap's digest for -w)."""
    args = [argv[0], capture, *argv[1:]]
    written = scratch / "out.pcap"
    if args[-1] == "-w":
        args.append(str(written))
    out, err = io.BytesIO(), io.StringIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
        try:
            code: object = main(args)
        except SystemExit as e:  # argparse
            code = e.code
        text.flush()
    # the scratch directory's random name appears in messages about the written pcap
    said = err.getvalue().replace(str(scratch), "SCRATCH")
    got: list[object] = [_digest(out.getvalue()), _digest(said.encode()), code]
    if written.exists():
        got.append(_digest(written.read_bytes()))
        written.unlink()
    return got


def render() -> dict[str, object]:
    outputs: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="kanalyze-render-") as scratch:
        for cap in captures(list(DEFAULT_DIRS)):
            rel = str(cap.relative_to(ROOT))
            for mode, argv in (*MODES, *EXTRA):
                outputs[f"{rel} {mode}"] = run(rel, argv, Path(scratch))
    modules = {name: str(Path(sys.modules[name].__file__ or "").name) for name in native.COMPILED}
    return {"modules": modules, "encoder": ENCODE is not None, "outputs": outputs}


if __name__ == "__main__":
    json.dump(render(), sys.stdout)
