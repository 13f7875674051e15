"""`export --jobs N -o FILE` writes range 0 straight into the file and places the other lines
at their final offsets (`kanalyze/parallel/place.py`): the file equals one process's output,
after a stitch, after a refusal (range 0's lines taken back), behind what the file already
held, and with forked workers placing their own lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dissectors.context import DecodeContext
from kanalyze import held
from kanalyze.cli import main
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.parallel import place, range_engine, range_export
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.worker import LINE_PREFIX

ROOT = Path(__file__).resolve().parents[2]
STITCHED = ["captures/kp_codecs.pcap", "captures/admin.pcap", "captures/kp_v25.pcap"]


def export_file(tmp_path: Path, capture: str, jobs: int, name: str) -> bytes:
    out = tmp_path / name
    assert main(["export", str(ROOT / capture), "--jobs", str(jobs), "-o", str(out)]) == 0
    return out.read_bytes()


@pytest.fixture
def tiny_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    monkeypatch.setattr(range_engine, "MAX_TAIL", 8)  # handovers, not whole connections


@pytest.mark.usefixtures("tiny_ranges")
@pytest.mark.parametrize("capture", STITCHED)
def test_file_output_placed(capture: str, tmp_path: Path) -> None:
    want = export_file(tmp_path, capture, 1, "one.ndjson")
    got = export_file(tmp_path, capture, 2, "two.ndjson")
    assert parallel_run.last_fallback is None
    assert parallel_run.last_timings["ranges"] > 5
    assert "in_place" in parallel_run.last_timings  # the file took the placement path
    assert got == want


@pytest.mark.usefixtures("tiny_ranges")
def test_refusal_takes_range_0_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    want = export_file(tmp_path, "captures/kp_codecs.pcap", 1, "one.ndjson")
    got = export_file(tmp_path, "captures/kp_codecs.pcap", 2, "two.ndjson")
    assert "no common quiescent packet" in (parallel_run.last_fallback or "")
    assert got == want


@pytest.mark.usefixtures("tiny_ranges")
@pytest.mark.parametrize("processes", [False, True], ids=["inline", "forked"])
def test_placed_behind_existing_content(tmp_path: Path, processes: bool) -> None:
    """The export starts where the file's position is; forked workers place their lines."""
    want = export_file(tmp_path, "captures/kp_v25.pcap", 1, "one.ndjson")
    path = tmp_path / "two.ndjson"
    with open(path, "wb") as out:
        out.write(b"kept\n")
        got = parallel_run.run_export([str(ROOT / "captures/kp_v25.pcap")], 3,
                                      EngineOptions(), DecodeContext(), False, out,
                                      processes=processes)
        out.write(b"after\n")
    assert got is not None, parallel_run.last_fallback
    assert parallel_run.last_timings["workers"] == ("fork" if processes else "inline")
    assert path.read_bytes() == b"kept\n" + want + b"after\n"


def test_only_regular_files_in_place(tmp_path: Path) -> None:
    path = tmp_path / "x"
    with open(path, "ab") as appending:
        assert place.open_target(appending) is None  # positional writes would append
    with open(os.devnull, "wb") as null:
        assert place.open_target(null) is None
    r, w = os.pipe()
    with os.fdopen(r, "rb") as _r, os.fdopen(w, "wb") as pipe:
        assert place.open_target(pipe) is None
    with open(path, "wb") as out:
        target = place.open_target(out)
        assert target is not None
        target.close()


def test_place_rewrites_ids_and_copies_runs(tmp_path: Path) -> None:
    lines = [LINE_PREFIX + b"%d,rest-%d}\n" % (lid, i) for i, lid in enumerate([1, 1, 7, 1])]
    src = tmp_path / "src"
    src.write_bytes(b"".join(lines))
    offs = [sum(map(len, lines[:i])) for i in range(len(lines))]
    # final order: line 3, 0, 1 (adjacent in both files: one copy), 2 with id 7 -> 12
    sizes = [len(x) for x in lines]
    grow = len(lines[2]) + 1
    want = lines[3] + lines[0] + lines[1] + lines[2].replace(b":7,", b":12,")
    places = [(offs[3], sizes[3], 1, 1, 0), (offs[0], sizes[0], 1, 1, sizes[3]),
              (offs[1], sizes[1], 1, 1, sizes[3] + sizes[0]),
              (offs[2], grow, 7, 12, sizes[3] + sizes[0] + sizes[1])]
    dst = tmp_path / "dst"
    dst.write_bytes(b"#")
    s, d = os.open(src, os.O_RDONLY), os.open(dst, os.O_RDWR)
    try:
        place.place(s, d, 1, places)
    finally:
        os.close(s)
        os.close(d)
    assert dst.read_bytes() == b"#" + want


def test_split_shares_copying_by_bytes() -> None:
    """The calling process takes about the last 1/N of a worker's bytes, cut at the line
    boundary nearest that; nothing is lost or doubled."""
    places = [(i * 10, size, 1, 1, i * 10) for i, size in enumerate([10, 35, 20, 35])]
    assert place.split(places, 2) == (places[:2], places[2:])  # 45 | 55 (target 50)
    assert place.split(places, 3) == (places[:3], places[3:])  # 65 | 35 (target 66.7)
    assert place.split(places, 6) == (places, [])  # 100 | 0 (target 83.3): nearer
    assert place.split(places, 1) == (places, [])
    assert place.split([], 2) == ([], [])
    for parts in range(2, 9):
        kept, helped = place.split(places, parts)
        assert kept + helped == places


@pytest.mark.usefixtures("tiny_ranges")
@pytest.mark.parametrize("mode", [[], ["--header-only"]], ids=["full", "header-only"])
def test_ranges_park_held_frames(mode: list[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every held frame parked (full) or dropped (header-only) in the ranges, as one
    process's Session does: the same file."""
    monkeypatch.setattr(held, "KEEP_BYTES", 0)
    monkeypatch.setattr(held, "MIN_BYTES", 1)
    calls = []

    class Counting(held.HeldFrames):
        def park(self, ex: Exchange) -> None:
            calls.append(1)
            super().park(ex)

    monkeypatch.setattr(range_export, "HeldFrames", Counting)
    capture = "captures/kp_codecs.pcap"
    one, two = tmp_path / "one.ndjson", tmp_path / "two.ndjson"
    assert main(["export", str(ROOT / capture), *mode, "--jobs", "1", "-o", str(one)]) == 0
    with open(two, "wb") as out:
        got = parallel_run.run_export([str(ROOT / capture)], 2, EngineOptions(),
                                      DecodeContext(), bool(mode), out, processes=False)
    assert got is not None, parallel_run.last_fallback
    assert calls  # the ranges held exchanges back and parked their frames
    assert two.read_bytes() == one.read_bytes()
