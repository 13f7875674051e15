"""Stage-1 work units without Spark: verified byte ranges read exactly the packets of the file."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest

from kanalyze.capture import CaptureStats, read_capture
from kanalyze.spark.units import iter_unit, plan_local
from tests.spark.support import LONG_CAPTURE, offline_keys, rotate, to_pcapng

pytestmark = pytest.mark.spark


def _packets(path: Path) -> list[tuple]:
    return [(p.ts_ns, p.linktype, p.data, p.file_no) for p in read_capture(str(path))]


def _via_units(path: Path, split: int) -> tuple[list[tuple], int]:
    plan = plan_local([str(path)], split_bytes=split)
    got = []
    for u in plan.units:
        got.extend(
            (p.ts_ns, p.linktype, p.data, p.file_no) for p in iter_unit(plan, u, CaptureStats())
        )
    return got, sum(1 for u in plan.units if not u.whole)


@pytest.fixture(scope="module")
def pcapng(tmp_path_factory) -> Path:
    return to_pcapng(LONG_CAPTURE, tmp_path_factory.mktemp("ng") / "long.pcapng")


@pytest.mark.parametrize("split", [300, 1500, 4096, 20000, 10**9])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_ranges_read_exactly_the_file(fmt, split, pcapng):
    path = LONG_CAPTURE if fmt == "pcap" else pcapng
    got, ranges = _via_units(path, split)
    assert got == _packets(path)  # same packets, same order, same frame numbers
    if split < 20000:
        assert ranges > 1


def _pcap(records: list[tuple[int, bytes]], snaplen: int = 262144) -> bytes:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)]
    for sec, data in records:
        out.append(struct.pack("<IIII", sec, 0, len(data), len(data)) + data)
    return b"".join(out)


def test_payloads_that_look_like_pcap_records_never_misplace_a_cut(tmp_path):
    # every packet carries a whole inner pcap (same timestamps): sync may land inside a payload,
    # the walk of the previous range then misses the cut, and the file falls back to one unit
    inner = _pcap([(1_700_000_000 + i, b"\x00" * 60) for i in range(12)])[24:]
    outer = _pcap([(1_700_000_000 + i, b"\x00" * 14 + inner) for i in range(40)])
    path = tmp_path / "nested.pcap"
    path.write_bytes(outer)
    for split in (500, 1000, 3000, 7000):
        got, _ranges = _via_units(path, split)
        assert got == _packets(path), split


def test_truncated_tail_is_kept_like_offline(tmp_path):
    data = LONG_CAPTURE.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) - 37])
    got, _ranges = _via_units(path, 4096)
    assert got == _packets(path)


def test_decoding_each_rotated_file_alone_loses_exchanges(tmp_path):
    """Why stage 2 shuffles by connection: per-file decoding cuts the exchanges at boundaries."""
    pieces = rotate(LONG_CAPTURE, tmp_path, 40)
    whole = offline_keys(LONG_CAPTURE)
    per_file = Counter()
    for p in pieces:
        per_file.update(k[:6] for k in offline_keys(p))
    ok_whole = sum(n for k, n in whole.items() if k[5] == "ok")
    ok_pieces = sum(n for k, n in per_file.items() if k[5] == "ok")
    assert ok_pieces < ok_whole
