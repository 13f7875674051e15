"""A committed golden set: any change to what kanalyze prints for these captures is on purpose.

The outputs in tests/golden/ are the contract a refactor must keep byte for byte. A change
that alters them on purpose regenerates them with `KANALYZE_UPDATE_GOLDEN=1 python -m pytest
tests/functional/test_golden.py` and commits the new files with its reason; the diff then
shows every line that changed.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from kanalyze.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

# (capture, argv after the file, golden file): real clients, crafted damage, replication traffic
CASES = [
    ("captures/lib_codecs.pcap", ("export",), "lib_codecs.ndjson"),
    ("captures/lib_codecs.pcap", ("export", "--header-only"), "lib_codecs.header-only.ndjson"),
    ("captures/kp_legacy.pcap", ("export",), "kp_legacy.ndjson"),
    ("captures/sasl_scram_rejected.pcap", ("export",), "sasl_scram_rejected.ndjson"),
    ("captures/crafted/gap.pcap", ("export",), "crafted_gap.ndjson"),
    ("captures/crafted/midstream.pcap", ("export",), "crafted_midstream.ndjson"),
    ("captures/replication/textbook.pcap", ("export",), "textbook.ndjson"),
    ("captures/replication/textbook.pcap", ("summary", "--json"), "textbook.summary.json"),
    ("captures/replication/textbook.pcap", ("report", "--json"), "textbook.report.json"),
]


def run(capture: str, argv: tuple[str, ...]) -> bytes:
    """kanalyze's stdout for one command, in process (stderr is not part of the contract); the
    capture is named relative to the repo root, as outputs that name their input print it."""
    out = io.BytesIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        code = main([argv[0], capture, *argv[1:]])
        text.flush()
    assert code == 0
    return out.getvalue()


@pytest.mark.parametrize(("capture", "argv", "golden"), CASES, ids=[c[2] for c in CASES])
def test_output_matches_golden(
    capture: str, argv: tuple[str, ...], golden: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    got = run(capture, argv)
    path = GOLDEN / golden
    if os.environ.get("KANALYZE_UPDATE_GOLDEN") == "1":
        path.write_bytes(got)
    assert path.exists(), f"{golden} missing: run with KANALYZE_UPDATE_GOLDEN=1"
    want = path.read_bytes()
    if got != want:
        got_lines, want_lines = got.splitlines(), want.splitlines()
        first = next(
            (i for i, (a, b) in enumerate(zip(got_lines, want_lines, strict=False)) if a != b),
            min(len(got_lines), len(want_lines)),
        )
        pytest.fail(
            f"{golden}: output changed at line {first + 1} "
            f"({len(got_lines)} lines now, {len(want_lines)} golden); if on purpose, regenerate "
            "with KANALYZE_UPDATE_GOLDEN=1 and commit the diff"
        )
