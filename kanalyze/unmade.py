"""The shared stand-in for a queue not made yet (`Correlator`'s queues until first use).

A module of its own, not compiled (dissectors/native.py): it subclasses `deque`, which a
mypyc-compiled module cannot do.
"""

from __future__ import annotations

from collections import deque


class Unmade(deque):
    """Empty, and adding to it raises (a missed "make it first" fails loudly instead of filling
    a queue every connection shares)."""

    def append(self, item: object) -> None:
        raise TypeError("Correlator queue used before it was made")

    appendleft = append

    def __reduce__(self) -> str:  # type: ignore[override]
        return "EMPTY"  # pickled (Spark streaming keeps engines in its state) as the one stand-in


EMPTY: deque = Unmade()
