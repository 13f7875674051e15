"""The range reader's view path (`range_plan._pcap_views`, used by `--jobs` range runs) reads
exactly what the split walker reads: the same packets, numbers and times, the same errors on
a file that changed after the plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kanalyze.capture import CaptureError
from kanalyze.parallel.range_plan import Range, plan_ranges, read_range

CAPTURES = Path(__file__).resolve().parents[3] / "captures"


def packets(rng: Range, views: bool) -> list[tuple]:
    out: list[tuple] = []
    try:
        out.extend((p.no, p.ts_ns, p.linktype, bytes(p.data), p.file_index, p.file_no)
                   for p in read_range(rng, views=views))
    except CaptureError as e:
        out.append(("error", str(e)))
    return out


@pytest.mark.parametrize("name", ["aio_group.pcap", "kp_codecs.pcap", "lib_group_rebalance.pcap"])
def test_views_read_what_the_walker_reads(name: str) -> None:
    ranges = plan_ranges([str(CAPTURES / name)], 3, 3000)
    assert ranges is not None and len(ranges) > 3
    for rng in ranges:
        got = packets(rng, True)
        assert got == packets(rng, False)
        assert len(got) == rng.count


@pytest.mark.parametrize("cut", [3, 16, 20, 400])
def test_a_file_cut_after_the_plan_gives_the_walker_errors(cut: int, tmp_path: Path) -> None:
    data = (CAPTURES / "aio_group.pcap").read_bytes()
    ranges = plan_ranges([str(CAPTURES / "aio_group.pcap")], 3, 3000)
    assert ranges is not None
    short = tmp_path / "cut.pcap"
    short.write_bytes(data[: len(data) - cut])
    rng = replace(ranges[-1], path=str(short))
    got = packets(rng, True)
    assert got == packets(rng, False)
    assert got[-1][0] == "error" and "truncated record" in got[-1][1]
