"""The planner: balanced by estimated CPU, the same plan in every process, stable for unseen
keys, connections split into pieces whose bodies partition the exchanges."""

from __future__ import annotations

from pathlib import Path

from kanalyze.parallel.plan import (
    SLOTS,
    Load,
    Piece,
    body_cost,
    engine_cost,
    make_plan,
    piece_owns,
    stable_shard,
)
from kanalyze.parallel.scan import scan

ROOT = Path(__file__).resolve().parents[3]


def key(n: int) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
    return ((b"\x0a\x00\x00\x01", 40000 + n), (b"\x0a\x00\x00\x02", 9092))


def cost(load: Load) -> float:
    return engine_cost(load) + body_cost(load)


def test_header_level_largest_first_onto_the_lightest_shard() -> None:
    loads = {key(i): Load(0, n, 0) for i, n in enumerate((50, 49, 30, 20, 1))}
    plan = make_plan(loads, 2, bodies=False)
    assert all(len(p) == 1 for p in plan.placed.values())  # whole connections
    assert sorted(round(x / 16) for x in plan.loads) == [71, 79]  # LPT


def test_one_big_connection_is_shared_out_by_slots() -> None:
    loads = {key(0): Load(100_000_000, 10_000, 5_000), key(1): Load(1_000_000, 100, 50)}
    plan = make_plan(loads, 4)
    pieces = plan.pieces(key(0))
    assert [p.shard for p in pieces] == [0, 1, 2, 3]
    assert pieces[0].lo == 0 and pieces[-1].hi == SLOTS
    assert all(a.hi == b.lo for a, b in zip(pieces, pieces[1:], strict=False))
    assert plan.balance() < 1.02
    assert sum(plan.loads) > cost(loads[key(0)]) + cost(loads[key(1)])  # engine work repeated


def test_pieces_own_every_exchange_exactly_once() -> None:
    cuts = [0, 1000, 30000, 47000, SLOTS]
    pieces = [Piece(i, lo, hi) for i, (lo, hi) in enumerate(zip(cuts, cuts[1:], strict=False))]
    owners = [[p.shard for p in pieces if piece_owns(b * 9000, p)] for b in range(20_000)]
    assert all(len(o) == 1 for o in owners)
    share = [sum(o == [i] for o in owners) / len(owners) for i in range(4)]
    assert abs(share[2] - 17000 / SLOTS) < 0.03  # blocks spread evenly over the slots


def test_worker_start_up_is_planned_for() -> None:
    loads = {key(i): Load(10_000_000, 1000, 500) for i in range(8)}
    plan = make_plan(loads, 2, start=[0.0, 200_000.0])
    assert plan.balance() < 1.05  # start-up included
    on_1 = sum(1 for p in plan.placed.values() for piece in p if piece.shard == 1)
    assert on_1 < len(loads) / 2  # the worker that starts late gets less


def test_plan_is_deterministic_and_unseen_keys_stable() -> None:
    loads = {key(i): Load(10, 1, 1) for i in range(12)}  # all ties: the key order decides
    assert make_plan(loads, 3).placed == make_plan(dict(reversed(loads.items())), 3).placed
    assert make_plan(loads, 3).pieces(key(99)) == (Piece(stable_shard(key(99), 3)),)
    assert {stable_shard(key(i), 3) for i in range(50)} == {0, 1, 2}


def test_scan_fast_and_general_paths_agree() -> None:
    path = str(ROOT / "captures" / "lib_acks.pcap")
    fast, general = scan([path]), scan([path, path])  # two files: the capture readers
    assert fast.layout is not None and general.layout is None
    assert len(fast.offsets) == len(fast.clock) == len(general.clock) // 2
    assert {k: v.bytes * 2 for k, v in fast.loads.items()} == {
        k: v.bytes for k, v in general.loads.items()
    }
    assert all(a <= b for a, b in fast.loads)  # one key per connection, smaller end first
