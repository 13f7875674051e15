"""`--jobs N` over byte ranges prints exactly what one process prints: every capture cut into
ranges of a few hundred bytes (frames and request/response pairs straddle the edges, most
connections are handed from range to range), full and header-only, the ranges run in this
process; once through real workers; and the stitch's refusals fall back to one process."""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.commands import export as export_command
from kanalyze.engine import EngineOptions
from kanalyze.parallel import range_engine
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.ranges import plan_ranges, run_range
from kanalyze.parallel.stitch import Unstitchable, stitch

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    str(p.relative_to(ROOT))
    for pattern in ("captures/*.pcap", "captures/crafted/*.pcap*", "captures/replication/*.pcap*")
    for p in ROOT.glob(pattern)
    if not p.name.startswith("bad_")
)
# captures whose connections outlive many tiny ranges: the stitch must succeed on them (with
# bodies, lib_group_rebalance reads topic names taught in another range: refused, one process)
STITCHED = ["captures/kp_codecs.pcap", "captures/admin.pcap", "captures/kp_v25.pcap"]


def cli(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
        code = main(argv)
        text.flush()
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(
        export_command, "run_export", functools.partial(parallel_run.run_export, processes=False)
    )


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(
    ("size", "tail"), [(600, range_engine.MAX_TAIL), (1500, 8)], ids=["600B", "1500B-handover"]
)
@pytest.mark.parametrize("mode", [[], ["--header-only"]], ids=["full", "header-only"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_tiny_ranges_same_output(capture: str, mode: list[str], size: int, tail: int,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Few tail marks (8) make the earlier run stop early, so connections are handed over
    rather than seen to their end by the earlier run."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
    want = cli(["export", capture, *mode, "--jobs", "1"])
    got = cli(["export", capture, *mode, "--jobs", "2"])
    assert got == want
    if capture in STITCHED:
        assert parallel_run.last_fallback is None
        assert parallel_run.last_timings["ranges"] > 5


@pytest.mark.parametrize(("capture", "size", "tail"), [
    ("captures/kp_codecs.pcap", 1500, 8),
    ("captures/kp_v25.pcap", 1500, 8),
    ("captures/lib_group_rebalance.pcap", 600, 32),
])
def test_handovers_happen(capture: str, size: int, tail: int,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The stitch really hands connections from range to range (not only whole ones)."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    ranges = plan_ranges([str(ROOT / capture)], 2, size)
    assert ranges is not None and len(ranges) > 5
    assert ranges[0].base == 0 and all(
        b.base == a.base + a.count and b.start == a.end for a, b in itertools.pairwise(ranges)
    )
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    got = stitch(results, EngineOptions())
    assert got.handovers > 0
    assert sorted(i for ids in got.ids for i in ids.values())[0] == 1


def test_no_common_point_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tail marks no connection can be handed over: the stitch refuses, and the CLI
    writes one process's output."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    ranges = plan_ranges([str(ROOT / "captures/kp_codecs.pcap")], 2, 1500)
    assert ranges is not None
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    with pytest.raises(Unstitchable, match="no common quiescent packet"):
        stitch(results, EngineOptions())


@pytest.mark.usefixtures("in_process")
def test_refusal_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    want = cli(["export", "captures/kp_codecs.pcap", "--jobs", "1"])
    got = cli(["export", "captures/kp_codecs.pcap", "--jobs", "2"])
    assert "no common quiescent packet" in (parallel_run.last_fallback or "")
    assert got == want


def test_unsplittable_inputs_are_not_planned(tmp_path: Path) -> None:
    assert plan_ranges(["-"], 2) is None
    assert plan_ranges([str(ROOT / "captures/admin.pcap")] * 2, 2) is None
    gz = ROOT / "captures/crafted/gzip.pcap.gz"
    if gz.exists():
        assert plan_ranges([str(gz)], 2, 600) is None
    assert plan_ranges([str(ROOT / "captures/admin.pcap")], 2) is None  # under 1 MB: one range


def test_real_workers_same_output() -> None:
    """Spawned workers (the CLI's own path), ranges of 800 bytes: stdout and stderr equal."""
    env = {**os.environ, RANGE_BYTES_ENV: "800", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kanalyze.cli", "export", "captures/lib_group_rebalance.pcap"]
    one = subprocess.run([*cmd, "--jobs", "1"], cwd=ROOT, env=env, capture_output=True,
                         check=True)
    two = subprocess.run([*cmd, "--jobs", "2"], cwd=ROOT, env=env, capture_output=True,
                         check=True)
    assert one.stdout and two.stdout == one.stdout
    assert two.stderr == one.stderr
