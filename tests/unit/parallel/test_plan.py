"""The planner: balanced by bytes, the same plan in every process, stable for unseen keys."""

from __future__ import annotations

from kanalyze.parallel.plan import make_plan, scan_loads, stable_shard


def key(n: int) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
    return ((b"\x0a\x00\x00\x01", 40000 + n), (b"\x0a\x00\x00\x02", 9092))


def test_largest_first_onto_the_lightest_shard() -> None:
    loads = {key(0): 50, key(1): 49, key(2): 30, key(3): 20, key(4): 1}
    plan = make_plan(loads, 2)
    assert sorted(plan.loads) == [71, 79]  # LPT: within 4/3 of the best split
    assert plan.shard_of(key(0)) != plan.shard_of(key(1))
    assert plan.balance() == 79 * 2 / 150


def test_one_connection_cannot_be_split_yet() -> None:
    plan = make_plan({key(0): 90, key(1): 10}, 4)
    assert plan.balance() == 90 * 4 / 100  # the largest connection caps the gain (ranges: later)


def test_plan_is_deterministic_and_unseen_keys_stable() -> None:
    loads = {key(i): 10 for i in range(12)}  # all ties: the key order decides
    assert make_plan(loads, 3).placed == make_plan(dict(reversed(loads.items())), 3).placed
    assert make_plan(loads, 3).shard_of(key(99)) == stable_shard(key(99), 3)
    assert {stable_shard(key(i), 3) for i in range(50)} == {0, 1, 2}


def test_scan_counts_both_directions_of_a_connection(monkeypatch) -> None:  # noqa: ANN001
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    loads = scan_loads(["captures/lib_acks.pcap"])
    assert loads and all(a <= b for a, b in loads)  # one key per connection, smaller end first
    assert sum(loads.values()) > 5000
