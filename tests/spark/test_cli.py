"""`kanalyze spark`: clear messages without Java or pyspark; a run writes the tables."""

from __future__ import annotations

import json
import sys

import pytest

from kanalyze.cli import main
from tests.spark.support import LONG_CAPTURE

pytestmark = pytest.mark.spark


def test_missing_java_is_a_clear_message(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["spark", str(LONG_CAPTURE), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "needs Java" in err and "openjdk-17-jre-headless" in err and "Traceback" not in err


def test_missing_pyspark_is_a_clear_message(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert main(["spark", str(LONG_CAPTURE), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'kanalyze[spark]'" in err and "Traceback" not in err


def test_cli_run_writes_tables(spark, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "spark",
            str(LONG_CAPTURE),
            "--out",
            str(out),
            "--master",
            "local[2]",
            "--json",
            "--split-mb",
            "1",
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"]["exchanges"] == 93
    assert (out / "aggregates" / "api_latency").is_dir()
    assert spark.sparkContext._jsc is not None  # the shared session was left running


def test_cli_tells_which_group_left_the_range_path(spark, tmp_path, capsys, monkeypatch):
    """A capture group the stitch refused is named on stderr (and in --json), not only
    counted in `balance`."""
    from kanalyze.spark import pipeline

    real = pipeline.run_pipeline

    def run(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - the pipeline, with one refusal noted
        res = real(*a, **kw)
        res.notes.append("/cap/a.pcap: why: the range path's stitch refused this group")
        return res

    monkeypatch.setattr(pipeline, "run_pipeline", run)
    rc = main(["spark", str(LONG_CAPTURE), "--out", str(tmp_path / "o"), "--json"])
    assert rc == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["notes"] == [
        "/cap/a.pcap: why: the range path's stitch refused this group"]
    assert "kanalyze: note: /cap/a.pcap: why: the range path's stitch refused" in got.err
