"""A rotated set's files that get one range each are not walked by the plan (`plan_chain`,
`Range.counted`): their runs count their packets, reject a damaged end and date their last
packet themselves, and give exactly what the runs of a walked plan give."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from kanalyze.engine import EngineOptions
from kanalyze.parallel.range_plan import UNCOUNTED, RangeResult, chain_ordered, plan_chain
from kanalyze.parallel.ranges import Range, run_range, stitch

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
WHOLE = 1 << 40  # a span no capture reaches: one walked range per file


def rotated(src: Path, out: Path, pieces: int) -> list[str]:
    """`src` cut into `pieces` files of about as many records, in capture order."""
    data = src.read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    records, pos = [], 24
    while pos + 16 <= len(data):
        end = pos + 16 + struct.unpack_from(endian + "I", data, pos + 8)[0]
        records.append(data[pos:end])
        pos = end
    per = -(-len(records) // pieces)
    paths = []
    for i in range(pieces):
        p = out / f"piece{i}.pcap"
        p.write_bytes(data[:24] + b"".join(records[i * per : (i + 1) * per]))
        paths.append(str(p))
    return paths


def runs(ranges: list[Range]) -> list[RangeResult]:
    opts = EngineOptions()
    return [replace(run_range(r, opts, lambda _ex: None), cpu_s=0.0) for r in ranges]


@pytest.mark.parametrize("name", ["lib_group_rebalance.pcap", "kp_codecs.pcap"])
def test_unwalked_files_run_as_walked_ones(name: str, tmp_path: Path) -> None:
    paths = rotated(CAPTURES / name, tmp_path, 5)
    plan = plan_chain(paths, len(paths))
    walked = plan_chain(paths, len(paths), WHOLE)
    assert plan is not None and walked is not None and len(plan) == len(walked) == 5
    # every file but the last is left to its run; the last is walked (the run's latest time)
    assert [r.count == UNCOUNTED for r in plan] == [True] * 4 + [False]
    assert all(r.counted and r.count > 0 for r in walked)
    for a, b in zip(plan, walked, strict=True):
        assert (a.start, a.end, a.base, a.last_ts, a.last) == (b.start, b.end, b.base,
                                                               b.last_ts, b.last)
    got, want = runs(plan), runs(walked)
    assert got == want  # every note of every run, its last packet's number included
    assert [r.end_pkt for r in got] == [b.base + b.count for b in walked]
    assert chain_ordered(plan, got)
    st = stitch(got, EngineOptions())
    assert st == stitch(want, EngineOptions()) and st.handovers >= 1


def test_files_that_overlap_in_time_are_found_by_the_runs(tmp_path: Path) -> None:
    paths = []
    for name in ("a.pcap", "b.pcap"):  # the same capture twice: one process interleaves them
        (tmp_path / name).write_bytes((CAPTURES / "lib_group_rebalance.pcap").read_bytes())
        paths.append(str(tmp_path / name))
    assert plan_chain(paths, 2, WHOLE) is None  # a walk sees it at once
    plan = plan_chain(paths, 2)
    assert plan is not None and not plan[0].counted
    assert not chain_ordered(plan, runs(plan))  # the unwalked first file's run sees it


@pytest.mark.parametrize("tail", [1, 15])
def test_a_damaged_end_the_walk_refuses_fails_the_run(tail: int, tmp_path: Path) -> None:
    """A partial record header after an unwalked file's last record: the walk refuses the
    file (and one process reports it), so its run fails and the stitch refuses the set."""
    paths = rotated(CAPTURES / "kp_codecs.pcap", tmp_path, 2)
    Path(paths[0]).write_bytes(Path(paths[0]).read_bytes() + b"\x01" * tail)
    assert plan_chain(paths, 2, WHOLE) is None
    plan = plan_chain(paths, 2)
    assert plan is not None and not plan[0].counted
    first = runs(plan[:1])[0]
    assert "truncated record" in first.error
    (tmp_path / "intact").mkdir()
    clean = plan_chain(rotated(CAPTURES / "kp_codecs.pcap", tmp_path / "intact", 2), 2)
    assert clean is not None and runs(clean[:1])[0].error == ""
