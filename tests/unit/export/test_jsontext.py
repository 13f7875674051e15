"""The JSON spelling of times: `ts_text` is `repr(ts_seconds(...))`, whatever the route."""

from __future__ import annotations

import random

import pytest

from kanalyze.jsontext import ts_seconds, ts_text

EDGES = [
    0,
    999,
    1_000_000_000,  # 1 s: the first of the integer route
    1_000_000_001_000,
    1_795_503_228_301_440_000,
    1_795_503_228_000_000_000,  # whole seconds: "….0"
    1_795_503_228_000_001_000,
    1_795_503_228_999_999_000,
    1_795_503_228_500_000_000,
    1_795_503_228_301_440_500,  # not whole microseconds: the float route
    3_999_999_999_999_999_000,
    4_000_000_000_000_000_000,  # past the integer route's range
    2**62,
]


@pytest.mark.parametrize("ts", EDGES)
def test_edges(ts):
    assert ts_text(ts) == repr(ts_seconds(ts))


def test_random_microsecond_times():
    rnd = random.Random(18)
    for _ in range(20_000):
        sec = rnd.choice([rnd.randrange(1, 10**9), rnd.randrange(10**9, 4 * 10**9)])
        us = rnd.choice([rnd.randrange(10**6), 0, 1, 10, 500_000, 999_999])
        ts = (sec * 10**6 + us) * 1000
        assert ts_text(ts) == repr(ts_seconds(ts)), ts
