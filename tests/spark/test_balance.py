"""Work placed by bytes: no task holds more than 1/N + 10 % of the bytes unless one item alone
does; the placement is deterministic. No Spark needed."""

from __future__ import annotations

import random
import zlib

import pytest

from kanalyze.spark.balance import bucket_values, lpt, max_share, place
from kanalyze.spark.units import FileInfo, Unit, balanced_split, pack

pytestmark = pytest.mark.spark


def test_lpt_shares_within_one_nth_plus_ten_percent():
    rng = random.Random(7)
    for bins in (2, 3, 8):
        # skewed like real Kafka traffic: a few big connections, many small ones
        sizes = [int(rng.paretovariate(1.2) * 1000) for _ in range(400)]
        sizes = [min(s, sum(sizes) // (2 * bins)) for s in sizes]  # none alone above 1/(2N)
        loads = [0] * bins
        for s, b in zip(sizes, lpt(sizes, bins), strict=True):
            loads[b] += s
        assert max_share(loads) <= 1 / bins + 0.10, (bins, loads)


def test_hash_placement_of_the_same_sizes_is_worse():
    """What a plain hash did: the same skewed sizes spread by key hash."""
    rng = random.Random(3)
    sizes = [int(rng.paretovariate(1.1) * 1000) for _ in range(60)]
    hashed = [0, 0]
    for i, s in enumerate(sizes):
        hashed[zlib.crc32(f"conn{i}".encode()) % 2] += s
    where, loads = place(dict(enumerate(sizes)), 2)
    assert max_share(loads) <= max_share(hashed)
    assert where == place(dict(enumerate(sizes)), 2)[0]  # deterministic


def test_pack_balances_stage1_tasks_by_bytes():
    files = [FileInfo(f"f{i}", size=s, rank=i) for i, s in enumerate([90, 10, 40, 40, 20] * 8)]
    units = [Unit(f.rank) for f in files]
    parts = pack(units, files, parallelism=2, target_bytes=200)
    loads = [sum(files[units[i].rank].size for i in p) for p in parts]
    assert sorted(i for p in parts for i in p) == list(range(len(units)))  # each unit once
    assert max_share(loads) <= 1 / len(parts) + 0.10


def test_balanced_split_never_exceeds_the_users_split():
    assert balanced_split(10 << 30, 128 << 20, 2) == 128 << 20
    assert balanced_split(60 << 20, 128 << 20, 2) == 10 << 20  # 3 ranges per core
    assert balanced_split(60 << 20, 4096, 2) == 4096  # tests force tiny ranges


def test_bucket_values_cover_every_partition():
    assert bucket_values([(5, 1), (6, 0), (7, 1)], 2) == [6, 5]
    with pytest.raises(ValueError):
        bucket_values([(5, 1)], 2)
