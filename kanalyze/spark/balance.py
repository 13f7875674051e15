"""Spreading work by bytes, not by a hash: stage-1 units and stage-2 connections are placed
largest first on the least loaded task (LPT), so no task holds much more than 1/N of the bytes
unless one item alone does (a single connection is still one stage-2 task: cutting it needs
the byte-range stitch of `kanalyze.parallel`). Pure Python (no pyspark).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence


def lpt(sizes: Sequence[int], bins: int) -> list[int]:
    """The bin of each item: largest first onto the currently lightest bin (ties: lowest
    bin). Deterministic."""
    bins = max(1, bins)
    heap = [(0, b) for b in range(bins)]
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, b = heapq.heappop(heap)
        out[i] = b
        heapq.heappush(heap, (load + sizes[i], b))
    return out


def loads(sizes: Sequence[int], placed: Sequence[int], bins: int) -> list[int]:
    total = [0] * max(1, bins)
    for s, b in zip(sizes, placed, strict=True):
        total[b] += s
    return total


def max_share(per_bin: Sequence[int]) -> float:
    """The largest bin's share of all bytes (1/N is perfect balance)."""
    total = sum(per_bin)
    return max(per_bin) / total if total else 0.0


def bucket_values(hashes: Sequence[tuple[int, int]], bins: int) -> list[int]:
    """For `repartition(bins, col)`: one value per target partition, from (value, pmod(hash,
    bins)) pairs Spark computed, so a column holding value v_b lands in partition b."""
    found: dict[int, int] = {}
    for v, b in hashes:
        found.setdefault(b, v)
    missing = [b for b in range(bins) if b not in found]
    if missing:
        raise ValueError(f"no value hashes to partitions {missing[:5]}")
    return [found[b] for b in range(bins)]


def place(items: dict[Hashable, int], bins: int) -> tuple[dict[Hashable, int], list[int]]:
    """LPT over a mapping item -> bytes: (item -> bin, bytes per bin)."""
    keys = list(items)
    sizes = [items[k] for k in keys]
    placed = lpt(sizes, bins)
    return dict(zip(keys, placed, strict=True)), loads(sizes, placed, bins)
