"""The write job's tasks get the ranges by their kept rows (`direct_write.shares`)."""

from __future__ import annotations

from kanalyze.spark.direct_write import shares


def _keep(rows: list[int]) -> dict:
    return {k: (list(range(n)), ["c"] * n, [None] * n) for k, n in enumerate(rows) if n}


def test_alternating_large_and_small_ranges_are_split_evenly():
    rows = [900, 100, 900, 100, 900, 100, 900, 100, 50]  # producer / fetch files of a rotated set
    got = shares(_keep(rows), len(rows), 2)
    loads = [sum(rows[k] for k in s) for s in got]
    assert max(loads) - min(loads) <= 100  # round robin: 3650 against 400
    assert sorted(k for s in got for k in s) == list(range(len(rows)))  # each range once
    assert all(s == sorted(s) for s in got)


def test_ranges_without_rows_and_more_tasks_than_ranges():
    got = shares(_keep([0, 5, 0]), 3, 4)
    assert sorted(k for s in got for k in s) == [0, 1, 2]
    assert len(got) == 4 and [1] in got
