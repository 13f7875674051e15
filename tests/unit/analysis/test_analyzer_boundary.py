"""Issue 20: the analysis never raises on a decoded exchange (one exception boundary per analyzer
event), and the Produce-with-a-cut-second-batch crash of `kanalyze report` stays fixed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from dissectors.context import DecodeContext
from kanalyze.analysis import report as report_mod
from kanalyze.analysis.report import analyze
from kanalyze.engine import EngineOptions
from kanalyze.session import Session
from tests.support import adversarial

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "bounded"
CRASH = DATA / "produce_partial_second_batch.pcap"
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((ROOT / "docs" / "report.schema.json").read_text())
)


def test_committed_inputs_are_what_the_script_makes() -> None:
    fresh = adversarial.build_all()
    assert sorted(fresh) == sorted(p.name for p in DATA.iterdir())
    for name, data in fresh.items():
        assert (DATA / name).read_bytes() == data, (
            f"{name} is stale: python -m tests.support.adversarial"
        )
    assert len(fresh["produce_partial_second_batch.pcap"]) == 563  # the size the audit reported


def _report(path: Path, strict: bool) -> dict:
    return analyze(Session([str(path)], EngineOptions()).exchanges(), DecodeContext(strict=strict))


def test_produce_with_partial_second_batch_acked_at_zero() -> None:
    """One valid batch plus 20 bytes of a second, answered error 0 base offset 0: the cut batch has
    no producer id (None); the replication analyzer used to compare None >= 0 (TypeError)."""
    doc = _report(CRASH, strict=True)  # strict: an analyzer bug would raise here
    assert not list(VALIDATOR.iter_errors(doc))
    (part,) = doc["replication"]
    assert (part["topic"], part["partition"]) == ("t", 0)
    assert part["timeline"][-1]["leader_leo"] == 1  # the one whole record; the cut batch counts 0
    assert not [f for f in doc["findings"] if f["kind"] == "analyzer_error"]


def test_report_cli_on_the_crash_capture() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", "--json", str(CRASH)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert not list(VALIDATOR.iter_errors(json.loads(r.stdout)))


class _Boom:
    """An analyzer with a bug: raises on every event."""

    def __init__(self, *args: object, **kw: object) -> None:
        pass

    def feed(self, ev: object) -> None:
        raise KeyError("secret-password")

    def to_json(self, *args: object) -> list:
        return []


def test_an_analyzer_bug_is_a_finding_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_mod, "TransactionAnalyzer", _Boom)
    doc = _report(ROOT / "captures" / "lib_idempotent.pcap", strict=False)
    errors = [f for f in doc["findings"] if f["kind"] == "analyzer_error"]
    assert errors and all(f["severity"] == "error" and f["analyzer"] == "_Boom" for f in errors)
    assert all(
        f["error"] == "KeyError" and "test_analyzer_boundary.py:" in f["where"] for f in errors
    )
    assert "secret-password" not in json.dumps(doc)  # the exception's text is never quoted
    assert doc["producers"]  # the other analyzers went on
    assert not list(VALIDATOR.iter_errors(doc))
    with pytest.raises(KeyError):  # strict (tests) re-raises, as the dissectors do
        _report(ROOT / "captures" / "lib_idempotent.pcap", strict=True)
