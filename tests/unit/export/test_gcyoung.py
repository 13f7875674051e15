"""`young_only`: the automatic collector paused while items are produced and consumed, young
cycles still collected by count, the collector back on however the loop ends."""

from __future__ import annotations

import gc
import weakref

import pytest

from kanalyze.gcyoung import young_only


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_paused_while_iterating_and_back_on_after() -> None:
    assert gc.isenabled()
    seen = [gc.isenabled() for _ in young_only(iter(range(5)))]
    assert seen == [False] * 5 and gc.isenabled()


def test_back_on_when_the_consumer_stops_or_raises() -> None:
    items = young_only(iter(range(10)))
    next(items)
    assert not gc.isenabled()
    items.close()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        for _ in young_only(iter(range(10))):
            raise RuntimeError
    assert gc.isenabled()


def test_young_cycles_are_collected_by_count() -> None:
    refs = []
    for i in young_only(iter(range(25)), every=10):
        node = _Node()
        refs.append(weakref.ref(node))
        del node
        if i == 14:  # collected at the 10th item: the first ten cycles are gone
            assert all(r() is None for r in refs[:10]) and refs[12]() is not None


def test_left_alone_when_the_collector_is_off() -> None:
    gc.disable()
    try:
        assert list(young_only(iter(range(3)))) == [0, 1, 2] and not gc.isenabled()
    finally:
        gc.enable()
