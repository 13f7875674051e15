"""The cyclic garbage collector limited to young objects while a long run yields its items.

An export holds thousands of exchanges back in the engine's orderer (behind a waiting
request) and keeps connections, pending requests and caches for the whole run: the collector's
full passes traverse all of them again and again, a tenth of `export --header-only`'s CPU on
the bench captures. The engine's steady state makes no cyclic garbage (every exchange, frame
and message is freed by its reference count: `gc.collect()` every 5,000 exchanges of the
compressed bench capture found nothing), so the automatic collector is paused and the young
generations are collected by count instead: cycles made by the run are still freed, unless
they outlive a few thousand items first.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
EVERY = 10_000  # items between two collections of the young generations (0 and 1)


def young_only(items: Iterator[T], every: int = EVERY) -> Iterator[T]:
    """`items`, with the automatic collector paused while they are produced and consumed (as it
    was when they end, or the caller stops early)."""
    if not gc.isenabled():
        yield from items
        return
    gc.disable()
    try:
        n = 0
        for item in items:
            yield item
            n += 1
            if n == every:
                n = 0
                gc.collect(1)
    finally:
        gc.enable()
