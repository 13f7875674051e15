"""The stitch takes range 0's own release up to its end (`replay._prefix`) instead of
replaying it: the same sequence and release packets as the replay of every event."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.engine import EngineOptions
from kanalyze.parallel import range_engine, replay
from kanalyze.parallel.ranges import Unstitchable, plan_ranges, run_range, stitch

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ["captures/kp_codecs.pcap", "captures/admin.pcap", "captures/kp_v25.pcap",
            "captures/aio_group.pcap", "captures/lib_group_rebalance.pcap",
            "captures/lib_transactions.pcap", "captures/crafted/midstream.pcap"]


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("size", [600, 4000, 20000])
def test_prefix_equals_the_full_replay(capture: str, size: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_engine, "MAX_TAIL", 8)
    ranges = plan_ranges([str(ROOT / capture)], 2, size)
    if ranges is None:
        pytest.skip("under two ranges at this size")
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    taken: list[int] = []
    real = replay._prefix

    def noted(*args, **kwargs) -> int:  # noqa: ANN002, ANN003
        taken.append(real(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(replay, "_prefix", noted)
    try:
        got = stitch(results, EngineOptions())
    except Unstitchable:
        pytest.skip("not stitched at this size")
    monkeypatch.setattr(replay, "_prefix", lambda *a, **k: 0)
    want = stitch(results, EngineOptions())
    assert (got.sequence, got.released) == (want.sequence, want.released)
    assert taken  # the prefix was looked for


def test_some_prefix_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a capture that range 0 releases as it goes, most of its exchanges are taken."""
    ranges = plan_ranges([str(ROOT / "captures/kp_codecs.pcap")], 2, 20000)
    assert ranges is not None
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    taken: list[int] = []
    real = replay._prefix
    monkeypatch.setattr(replay, "_prefix", lambda *a, **k: taken.append(real(*a, **k)) or
                        taken[-1])
    st = stitch(results, EngineOptions())
    first = sum(1 for p in results[0].emitted if p <= results[0].end_pkt)
    assert first > 0 and taken[0] > 0
    assert st.sequence[:first] == [(0, i) for i in range(first)]


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_unordered_stitch_keeps_the_same_exchanges(capture: str) -> None:
    """`stitch(ordered=False)` (Spark's tables, no topic-id names across exchanges): the
    exchanges that stand, in packet order, without the release replayed: the replay's set;
    and it refuses no set the replay takes (its refusals are a subset of the replay's). Where
    a held connection's roles were settled (crafted/midstream), the replay itself."""
    ranges = plan_ranges([str(ROOT / capture)], 2, 1500)
    assert ranges is not None and len(ranges) > 2
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    try:
        want = stitch(results, EngineOptions())
    except Unstitchable:
        want = None
    try:
        got = stitch(results, EngineOptions(), ordered=False)
    except Unstitchable:
        assert want is None
        return
    pkts = [results[r].done[i][0] for r, i in got.sequence]
    held = bool(replay._decides(results, got.own))  # roles settled late: the replay's order
    assert got.released == [] and (pkts == sorted(pkts)) is not held
    if want is not None:
        assert sorted(got.sequence) == sorted(want.sequence) and len(want.sequence) > 0
        assert (got.ids, got.owners) == (want.ids, want.owners)
