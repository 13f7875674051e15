"""`summary`, `report` and `stats` with `--jobs N` print exactly what one process prints: every
capture cut into ranges of a few hundred bytes (connections handed from range to range), the
ranges run in this process (`kanalyze.parallel.range_session`), every output format; the
rebuilt engine statistics equal one engine's; once through forked workers; a filtered run,
`summary --json` and a refused stitch run one process."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.commands import summary
from kanalyze.parallel import range_engine, range_session
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.session import Session
from tests.functional.test_ranges import CAPTURES, ROOT, cli

# captures the stitch must succeed on when cut into tiny ranges (not a fallback)
STITCHED = ["captures/kp_codecs.pcap", "captures/admin.pcap", "captures/replication/isr.pcap",
            "captures/crafted/port_reuse.pcap"]
MODES = {"summary": ["summary"], "report": ["report"], "report-json": ["report", "--json"],
         "stats": ["stats"], "stats-json": ["stats", "--json"]}


@functools.cache
def one_process(argv: tuple[str, ...]) -> tuple[int, bytes, str]:
    """`--jobs 1` rendered once per capture and mode (shared by the range sizes)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return cli([*argv, "--jobs", "1"])
    finally:
        os.chdir(cwd)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges run one after the other in this process (no workers)."""
    monkeypatch.chdir(ROOT)
    real = range_session.run_tasks
    monkeypatch.setattr(range_session, "run_tasks",
                        lambda tasks, _workers, fn: real(tasks, None, fn))


# every format with ranges of 600 bytes; the documents again with connections handed over
# (their text forms render the same documents; `test_same_exchanges` checks every field)
CASES = [pytest.param(mode, 600, range_engine.MAX_TAIL, id=f"{mode}-600B") for mode in MODES] + [
    pytest.param(mode, 1500, 8, id=f"{mode}-1500B-handover")
    for mode in ("summary", "report-json", "stats-json")
]


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(("mode", "size", "tail"), CASES)
@pytest.mark.parametrize("capture", CAPTURES)
def test_tiny_ranges_same_output(capture: str, mode: str, size: int, tail: int,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    want = one_process((*MODES[mode], capture))
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
    got = cli([*MODES[mode], capture, "--jobs", "2"])
    assert got == want
    if capture in STITCHED:
        assert range_session.last_fallback is None
        assert range_session.last_ranges > 3


@pytest.mark.usefixtures("in_process")
def test_html_report_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report --html` (with `--json` on stdout) from ranges: the same page and document."""
    pytest.importorskip("plotly")
    capture = "captures/kp_codecs.pcap"
    one, two = tmp_path / "one.html", tmp_path / "two.html"
    want = cli(["report", capture, "--html", str(one), "--json", "--jobs", "1"])
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    got = cli(["report", capture, "--html", str(two), "--json", "--jobs", "2"])
    assert range_session.last_fallback is None
    assert got == want
    assert two.read_bytes() == one.read_bytes()


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(("size", "tail"), [(300, 4), (1500, 8)])
def test_engine_statistics_rebuilt(size: int, tail: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every number of `summary --json` but the peaks (connections, bytes per direction,
    packets that are not TCP, stream events with their offsets, limits) from the ranges equals
    one engine's, on every capture the stitch accepts; most captures are stitched."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    stitched = 0
    for capture in CAPTURES:
        want = summary.build(Session([capture]))
        monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
        got = summary.build(range_session.RangeSession([capture], jobs=2, processes=False))
        monkeypatch.delenv(RANGE_BYTES_ENV)
        if range_session.last_fallback is not None:
            continue
        stitched += 1
        assert want.pop("peaks") != got.pop("peaks")
        assert got == want, capture
    assert stitched > len(CAPTURES) * 2 // 3


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(("size", "tail"), [(600, 32), (1500, 8)])
def test_same_exchanges(size: int, tail: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session yields the exchanges one engine yields, field for field: connection ids,
    headers, diagnostics, packet numbers and the frames' stream offsets (moved to the run's
    where a later range joined a connection: `range_stats.offset_shifts`)."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    stitched = 0
    for capture in CAPTURES:
        want = list(Session([capture]).exchanges())
        monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
        got = list(range_session.RangeSession([capture], jobs=2, processes=False).exchanges())
        monkeypatch.delenv(RANGE_BYTES_ENV)
        stitched += range_session.last_fallback is None
        assert got == want, capture
    assert stitched > len(CAPTURES) * 2 // 3


@pytest.mark.usefixtures("in_process")
def test_unsplittable_input_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RANGE_BYTES_ENV, "600")
    capture = "captures/crafted/gzip.pcap.gz"
    for mode in ("summary", "report", "stats"):
        got = cli([mode, capture, "--jobs", "3"])
        assert "cannot be cut" in (range_session.last_fallback or "")
        assert got == one_process((mode, capture))


@pytest.mark.usefixtures("in_process")
def test_summary_json_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`summary --json` prints the engine's peaks, which the ranges cannot rebuild."""
    monkeypatch.setenv(RANGE_BYTES_ENV, "600")
    range_session.last_ranges = -1
    got = cli(["summary", "captures/kp_codecs.pcap", "--json", "--jobs", "2"])
    assert range_session.last_ranges == -1  # never ran
    assert got == one_process(("summary", "captures/kp_codecs.pcap", "--json"))


@pytest.mark.usefixtures("in_process")
def test_refused_stitch_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    got = cli(["stats", "captures/kp_codecs.pcap", "--jobs", "2"])
    assert "no common quiescent packet" in (range_session.last_fallback or "")
    assert got == one_process(("stats", "captures/kp_codecs.pcap"))


@pytest.mark.usefixtures("in_process")
def test_filtered_run_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RANGE_BYTES_ENV, "600")
    range_session.last_ranges = -1
    argv = ["stats", "captures/kp_codecs.pcap", "-Y", 'api == "Produce"', "-z", "errors"]
    got = cli([*argv, "--jobs", "2"])
    assert range_session.last_ranges == -1  # never ran
    assert got == cli([*argv, "--jobs", "1"])


@pytest.mark.parametrize("capture", ["bad_empty.pcap", "bad_garbage.bin", "bad_text.txt"])
def test_not_a_capture_same_error(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input that is not a capture: the one-process error line and exit status (the
    planner's own error is not shown), `export` too."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(RANGE_BYTES_ENV, "600")
    path = f"captures/crafted/{capture}"
    for mode in ("summary", "report", "stats", "export"):
        got = cli([mode, path, "--jobs", "2"])
        assert got[0] == 2 and f"error: {path}: " in got[2]
        assert got == one_process((mode, path))


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_bad_jobs_value(bad: str) -> None:
    for mode in ("summary", "report", "stats"):
        with pytest.raises(SystemExit) as e:
            cli([mode, "captures/kp_codecs.pcap", "--jobs", bad])
        assert e.value.code == 2


def test_forked_workers_same_output() -> None:
    """The CLI's own path (forked workers), ranges of 800 bytes: stdout and stderr equal."""
    env = {**os.environ, RANGE_BYTES_ENV: "800", "PYTHONPATH": str(ROOT)}
    for mode in ("summary", "report", "stats"):
        cmd = [sys.executable, "-m", "kanalyze.cli", mode, "captures/lib_group_rebalance.pcap"]
        one = subprocess.run([*cmd, "--jobs", "1"], cwd=ROOT, env=env, capture_output=True,
                             check=True)
        two = subprocess.run([*cmd, "--jobs", "3"], cwd=ROOT, env=env, capture_output=True,
                             check=True)
        assert one.stdout and two.stdout == one.stdout
        assert two.stderr == one.stderr
