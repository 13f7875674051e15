"""The sliced header walk (`kanalyze.parallel.pcap_slices`, what Spark tasks run for a large
remote pcap) chains into exactly the planner's single walk (`range_plan._pcap_headers`): the
same header stream, so the same plan, whatever the slices' resync found, including a resync
fooled by fake record headers inside a packet, a truncated file and a cut at a record."""

from __future__ import annotations

import os
import random
import struct
from array import array
from pathlib import Path

import pytest

from kanalyze.capture.split import probe_layout
from kanalyze.parallel import range_plan
from kanalyze.parallel.pcap_slices import (
    SLICE_BYTES,
    SLICE_ENV,
    PcapFacts,
    SliceWalk,
    chain,
    slice_bytes,
    slices,
    walk_slice,
)
from kanalyze.parallel.range_plan import Layout, _pcap_headers, plan_chain, walk_costs

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
REAL = ["aio_group.pcap", "kp_codecs.pcap", "lib_group_rebalance.pcap"]
T0 = 1_700_000_000


def layout(path: Path) -> Layout:
    lay = Layout(size=os.path.getsize(path))
    with open(path, "rb") as f:
        probe_layout(lay, f)
    return lay


def sliced(path: Path, bounds: list[int]) -> tuple[list[SliceWalk], PcapFacts]:
    """The slices [bounds[i], bounds[i+1]) walked as tasks walk them, then chained."""
    lay = layout(path)
    walks = [walk_slice(str(path), lay, s, e) for s, e in zip(bounds, bounds[1:], strict=False)]
    return walks, chain(str(path), lay, walks)


def single(path: Path) -> list[tuple[int, int, int, int]]:
    return list(_pcap_headers(str(path), layout(path)))


def record(payload: bytes, sec: int = T0, usec: int = 0) -> bytes:
    return struct.pack("<IIII", sec, usec, len(payload), len(payload)) + payload


def pcap(*records: bytes) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(records)


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("size", [97, 1000, 4096])
def test_slices_of_real_captures_chain_into_the_single_walk(name: str, size: int) -> None:
    path = CAPTURES / name
    lay = layout(path)
    cuts = slices(lay, size)
    assert len(cuts) > 5
    walks, facts = sliced(path, [s for s, _e in cuts] + [lay.size])
    assert list(facts.headers()) == single(path)
    if size == 4096:  # the resync found the exact record nearly everywhere: tasks did the work
        assert facts.gaps <= 1
        assert sum(w.first >= 0 for w in walks) == len(walks)


@pytest.mark.parametrize("name", REAL)
def test_the_plan_from_the_slices_is_the_driver_walks(name: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_plan, "MIN_RANGE", 1000)  # small captures cut by CPU too
    path = str(CAPTURES / name)
    lay = layout(CAPTURES / name)
    walks = [walk_slice(path, lay, s, e) for s, e in slices(lay, 1500)]
    walked = {path: chain(path, lay, walks)}
    for n, span in [(3, None), (5, None), (2, 3000), (4, 700)]:
        want = plan_chain([path], n, span)
        assert want is not None and len(want) > 1
        assert plan_chain([path], n, span, walked=walked) == want
        assert plan_chain([path], n, span, bodies=False, walked=walked) == plan_chain(
            [path], n, span, bodies=False)


def fake_chain(path: Path, boundary: int) -> int:
    """Writes a pcap where offset `boundary` (>= 100) lies inside a packet, 5 bytes before a
    plausible chain of 12 fake record headers in its payload; returns the chain's offset."""
    fake = b"".join(record(b"abcd", T0, k) for k in range(12))  # 12 fake 20-byte records
    real = [record((bytes(range(256)) * 40)[: boundary + 5 - 96], T0, 1)]  # to 16 + 40 before
    real.append(record(b"\x00" * 40 + fake + b"\xff" * 33, T0, 2))
    real += [record(bytes([k]) * (50 + k), T0, 3 + k) for k in range(20)]
    path.write_bytes(pcap(*real))
    return boundary + 5


def test_a_fake_header_chain_inside_a_packet_falls_back_to_the_driver(tmp_path: Path) -> None:
    """A slice starting inside a packet whose payload holds a plausible chain of record
    headers: its resync takes the fake chain, the driver sees the exact record is not among
    its offsets and walks the gap itself."""
    path = tmp_path / "fake.pcap"
    cut = 300
    fake_at = fake_chain(path, cut)
    lay = layout(path)
    walks, facts = sliced(path, [24, cut, cut + 400, lay.size])
    assert walks[1].first == fake_at  # fooled
    assert facts.gaps >= 1  # ... and the driver noticed
    assert list(facts.headers()) == single(path)
    assert plan_chain([str(path)], 2, 300, walked={str(path): facts}) == plan_chain(
        [str(path)], 2, 300)


def test_a_cut_at_a_record_start_needs_no_resync_search(tmp_path: Path) -> None:
    recs = [record(bytes([k]) * (30 + k), T0 + k, k) for k in range(30)]
    path = tmp_path / "at.pcap"
    path.write_bytes(pcap(*recs))
    at = 24 + sum(len(r) for r in recs[:10])
    walks, facts = sliced(path, [24, at, path.stat().st_size])
    assert walks[1].first == at and walks[0].next == at
    assert facts.gaps == 0
    assert list(facts.headers()) == single(path)


@pytest.mark.parametrize("cut", [3, 16, 20, 400])
def test_a_truncated_file_is_damaged_where_the_single_walk_says(cut: int,
                                                               tmp_path: Path) -> None:
    data = (CAPTURES / "aio_group.pcap").read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) - cut])
    lay = layout(path)
    walks, facts = sliced(path, [s for s, _e in slices(lay, 700)] + [lay.size])
    want = single(path)
    assert want[-1][3] == -1  # damaged: the planner refuses the file
    assert facts.damaged == want[-1][0]
    assert list(facts.headers()) == want
    assert plan_chain([str(path)], 3, 2000, walked={str(path): facts}) is None


def test_bad_bytes_never_raise_and_still_chain_exactly(tmp_path: Path) -> None:
    rnd = random.Random(19)
    recs = [record(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 300))), T0, k)
            for k in range(40)]
    blob = bytearray(pcap(*recs))
    for _ in range(30):  # damage some bytes (record headers among them)
        blob[rnd.randrange(24, len(blob))] = rnd.randrange(256)
    path = tmp_path / "bad.pcap"
    path.write_bytes(bytes(blob) + bytes(rnd.randrange(256) for _ in range(3000)))
    lay = layout(path)
    for size in (50, 333, 1024):
        _walks, facts = sliced(path, [s for s, _e in slices(lay, size)] + [lay.size])
        assert list(facts.headers()) == single(path)


def test_a_resync_searches_no_further_than_a_snap_length(tmp_path: Path) -> None:
    """Past a snap length plus a header from a slice's start some record must have begun; a
    slice whose search finds nothing by then is left to the driver (a record longer than the
    snap length here, with a fake chain in it that an unbounded search would take)."""
    fake = b"".join(record(b"abcd", T0, k) for k in range(12))
    big = record(bytes(3000) + fake + bytes(100), T0, 1)  # longer than the snap length
    blob = bytearray(pcap(big, *(record(b"x" * 70, T0, 2 + k) for k in range(10))))
    struct.pack_into("<I", blob, 16, 1000)  # snap length 1000
    path = tmp_path / "long.pcap"
    path.write_bytes(bytes(blob))
    walks, facts = sliced(path, [24, 60, len(blob)])
    assert walks[1].first == -1  # stopped at 60 + 16 + 1000
    assert list(facts.headers()) == single(path)


@pytest.mark.parametrize(("bodies", "span"), [(True, None), (False, None), (True, 4096)])
def test_the_vectorized_costs_are_the_loops_to_the_bit(bodies: bool, span: int | None) -> None:
    """The driver's numbers from chained facts (numpy) equal the planner's loop over the same
    headers: the cumulative costs, float by float, over 300 000 records."""
    pytest.importorskip("numpy")
    rnd = random.Random(7)
    incl = array("I", (rnd.choice([0, 54, 66, 67, 1500, rnd.randrange(65536)])
                       for _ in range(300_000)))
    sec = array("I", (T0 + k // 1000 for k in range(len(incl))))
    frac = array("I", (rnd.randrange(1_000_000) for _ in range(len(incl))))
    facts = PcapFacts(24, sec, frac, incl)
    want = walk_costs(facts.headers(), 1000, bodies, span)
    got = facts.costs(1000, bodies, span)
    assert want is not None and got is not None
    assert got[1].typecode == "d" and got[1] == want[1]  # every partial sum, exactly
    assert got[0] == want[0] and got[2] == want[2] and got[3] == want[3]
    assert PcapFacts(24, sec, frac, incl, damaged=99).costs(1000, bodies, span) is None


def test_the_slice_size_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SLICE_ENV, raising=False)
    assert slice_bytes() == SLICE_BYTES
    monkeypatch.setenv(SLICE_ENV, "4096")
    assert slice_bytes() == 4096
    monkeypatch.setenv(SLICE_ENV, "0")
    assert slice_bytes() == 0
    monkeypatch.setenv(SLICE_ENV, "lots")
    assert slice_bytes() == SLICE_BYTES
    lay = Layout(size=9_000, data_start=24)
    assert slices(lay, 4000) == [(24, 4024), (4024, 9_000)]  # no sliver of 976 at the end
    assert slices(lay, 0) == [(24, 9_000)]
