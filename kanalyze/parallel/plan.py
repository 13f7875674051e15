"""The work planner: which connection goes to which shard, balanced by bytes.

One planner for `--jobs N` and (later) the Spark pipeline, so both split the same way:

* `scan_loads(paths)` -> `{ConnKey: bytes}`: TCP payload bytes per connection (both
  directions), from one light pass over the inputs. The loads only steer the balance; which
  packet belongs to which shard is decided by `Plan.shard_of`, the same function in every
  process, so a wrong estimate costs speed, never correctness.
* `make_plan(loads, shards)` -> `Plan`: largest connection first onto the least loaded shard
  (LPT); `Plan.shard_of(key)` for connections the scan did not see is a stable hash (crc32,
  never Python's salted `hash`).
* `Range`: the unit a long connection will be cut into (a stream-offset interval per
  direction, starting at a Kafka frame boundary that the framer's resync finds), with the
  stitch contract below. `make_plan` does not cut connections yet: the execution of ranges
  waits for the engine to expose resync and state hand-over (docs/performance.md, "ranges").

Stitch contract for ranges (what a consumer of `Range` may rely on): a range's worker starts
its framers searching at `start` and stops at `end`; requests still pending at `end` and the
unmatched response frames at the next range's start are handed to the stitch step, which
pairs them by correlation id in stream order and carries the connection state (roles, SASL
mode, api versions seen) forward. The output order is then rebuilt by `merge.py` exactly as
for whole connections.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, read_captures
from kanalyze.flows import FlowStats, Segment, decode_segment

# a connection regardless of direction: the two (address, port) ends, smaller first
ConnKey = tuple[tuple[bytes, int], tuple[bytes, int]]


def conn_key(seg: Segment) -> ConnKey:
    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
    return (a, b) if a <= b else (b, a)


def stable_shard(key: ConnKey, shards: int) -> int:
    """A shard for a connection the plan does not list: the same in every process and run."""
    (a, ap), (b, bp) = key
    return zlib.crc32(a + ap.to_bytes(2, "big") + b + bp.to_bytes(2, "big")) % shards


@dataclass(frozen=True, slots=True)
class Range:
    """A piece of one connection: stream offsets [start, end) per direction (None: open end).
    Starts at a Kafka frame boundary; see the stitch contract in the module docstring."""

    key: ConnKey
    client_start: int
    client_end: int | None
    broker_start: int
    broker_end: int | None


@dataclass(slots=True)
class Plan:
    """Shard count and the connections placed by the balancer (the rest: `stable_shard`)."""

    shards: int
    placed: dict[ConnKey, int] = field(default_factory=dict)
    loads: list[int] = field(default_factory=list)  # planned bytes per shard

    def shard_of(self, key: ConnKey) -> int:
        s = self.placed.get(key)
        return stable_shard(key, self.shards) if s is None else s

    def balance(self) -> float:
        """Largest planned shard over the mean: 1.0 is perfect, `shards` is one shard doing all."""
        total = sum(self.loads)
        return max(self.loads) * len(self.loads) / total if total else 1.0


def scan_loads(paths: Iterable[str]) -> dict[ConnKey, int]:
    """Payload bytes per connection (the planner's weights). Raises CaptureError like a run."""
    loads: dict[ConnKey, int] = {}
    flows = FlowStats()
    get = loads.get
    for pkt in read_captures(list(paths), CaptureStats(), views=True):
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is not None:
            k = conn_key(seg)
            loads[k] = get(k, 0) + len(seg.payload) + 64  # + a packet's fixed cost
    return loads


def make_plan(loads: Mapping[ConnKey, int], shards: int) -> Plan:
    """Longest processing time first: each connection, largest first, onto the lightest shard;
    ties by key so every process computes the same plan."""
    plan = Plan(shards, loads=[0] * shards)
    heap = [(0, i) for i in range(shards)]
    for key, size in sorted(loads.items(), key=lambda kv: (-kv[1], kv[0])):
        load, i = heapq.heappop(heap)
        plan.placed[key] = i
        plan.loads[i] = load + size
        heapq.heappush(heap, (load + size, i))
    return plan
