"""The work planner: which shard does which connection's work, balanced by estimated CPU.

One planner for `--jobs N` and, later, the Spark pipeline (issue 19), so both split alike.
The interface:

* input: `{ConnKey: Load}` (payload bytes, packets, packets with payload per connection:
  `kanalyze.parallel.scan.scan` makes it in one light pass), a shard count, whether bodies
  are decoded, and each shard's start-up cost;
* `make_plan(...) -> Plan`; `Plan.pieces(key)` says which shards work on a connection, each
  as a `Piece(shard, lo, hi)`: every piece runs the connection's engine over all of its
  packets (framing and correlation are cheap next to bodies) and decodes the bodies of the
  exchanges whose 64 KiB block of frame bytes hashes into slots [lo, hi) (`piece_owns`), so
  the pieces of one connection partition its exchanges, without any hand-over between them;
* connections missing from the loads go whole to `stable_shard` (crc32 of the key, the same
  in every process, never Python's salted `hash`): a wrong estimate costs speed, never
  correctness.

A piece repeats its connection's engine work, so a connection whose engine work alone
exceeds a shard's share (many small exchanges, or every header-only run) still bounds the
speed-up; cutting those needs byte ranges with a stitch step in the engine
(docs/performance.md, "What limits the scaling").
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kanalyze.flows import Segment

# a connection regardless of direction: the two (address, port) ends, smaller first
ConnKey = tuple[tuple[bytes, int], tuple[bytes, int]]


def conn_key(seg: Segment) -> ConnKey:
    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
    return (a, b) if a <= b else (b, a)


def stable_shard(key: ConnKey, shards: int) -> int:
    """A shard for a connection the plan does not list: the same in every process and run."""
    (a, ap), (b, bp) = key
    return zlib.crc32(a + ap.to_bytes(2, "big") + b + bp.to_bytes(2, "big")) % shards


@dataclass(slots=True)
class Load:
    """What the scan saw of one connection: TCP payload bytes and packets."""

    bytes: int = 0
    packets: int = 0
    data_packets: int = 0  # packets carrying payload (about one exchange side each, small ones)


# CPU cost model, in microseconds (measured on the benchmark capture, docs/performance.md):
# the engine's header-level work per packet, and the body decoding and encoding per payload
# byte and per packet carrying payload. The byte weight refitted on the byte ranges (was
# 0.0067, when the range engine took the general path: the two ranges of the 250 MB capture
# took 1.037 and 0.975 s, range 0 holding twice the packets in fewer bytes; now 1.05, 1.045)
ENGINE_US_PER_PACKET = 16.0
BODY_US_PER_BYTE = 0.0059
BODY_US_PER_DATA_PACKET = 17.0


def engine_cost(load: Load) -> float:
    return load.packets * ENGINE_US_PER_PACKET


def body_cost(load: Load) -> float:
    return load.bytes * BODY_US_PER_BYTE + load.data_packets * BODY_US_PER_DATA_PACKET


SLOTS = 1 << 16  # a split connection's bodies are shared out in 1/SLOTS steps
BLOCK_BYTES = 64 * 1024  # ... by blocks of this many frame bytes, spread over the slots


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a connection's work on one shard: the engine over the whole connection, and
    the bodies of the exchanges whose block falls in slots [lo, hi)."""

    shard: int
    lo: int = 0
    hi: int = SLOTS


@dataclass(slots=True)
class Plan:
    """Where each connection's work goes. A connection is one piece on one shard or, when a
    shard's share ends inside it, pieces on consecutive shards: each runs the connection's
    engine (cheap, header level) and decodes the bodies of its slots (`piece_owns`).
    Connections the plan does not list (the scan missed them) go whole to `stable_shard`."""

    shards: int
    placed: dict[ConnKey, tuple[Piece, ...]] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)  # planned CPU µs per shard

    def pieces(self, key: ConnKey) -> tuple[Piece, ...]:
        got = self.placed.get(key)
        return (Piece(stable_shard(key, self.shards)),) if got is None else got

    def balance(self) -> float:
        """Largest planned shard over the mean: 1.0 is perfect, `shards` is one shard doing all."""
        total = sum(self.loads)
        return max(self.loads) * len(self.loads) / total if total else 1.0


def piece_owns(frame_bytes_before: int, piece: Piece) -> bool:
    """Whether `piece` decodes the exchange that starts after this many frame bytes of its
    connection (both directions, counted in completion order: the same on every piece)."""
    if piece.lo == 0 and piece.hi == SLOTS:
        return True
    block = frame_bytes_before // BLOCK_BYTES
    slot = ((block * 2654435761) & 0xFFFFFFFF) * SLOTS >> 32  # blocks spread evenly
    return piece.lo <= slot < piece.hi


# a spawned worker starts Python and imports the decoders (~90 ms of CPU) while the calling
# process scans the input; what is left of it delays the worker's first packet
WORKER_START_US = 40_000.0


def make_plan(loads: Mapping[ConnKey, Load], shards: int, bodies: bool = True,
              start: Sequence[float] = ()) -> Plan:
    """Bodies: McNaughton's wrap-around rule (fill each shard to the mean, the connection that
    crosses the line continues on the next shard), the mean raised until the last shard
    fits, as every extra piece repeats its connection's engine work. Header level (nothing
    to share out): largest first onto the lightest shard (LPT). Ties by key, so every
    process computes the same plan. `start`: work each shard has before its first connection
    (`--jobs`: the spawned workers' start-up; shard 0 is the calling process)."""
    begin = [start[i] if i < len(start) else 0.0 for i in range(shards)]
    costs = sorted(
        ((engine_cost(v), body_cost(v) if bodies else 0.0, k) for k, v in loads.items()),
        key=lambda c: (-(c[0] + c[1]), c[2]),
    )
    if not bodies or shards == 1:
        return _lpt(costs, shards, begin)
    target = (sum(e + b for e, b, _k in costs) + sum(begin)) / shards
    for _ in range(8):
        plan = _wrap(costs, shards, target, begin)
        over = plan.loads[-1] - target
        if over <= target * 0.01:
            return plan
        target += over / shards
    return plan


def _lpt(costs: list[tuple[float, float, ConnKey]], shards: int, begin: list[float]) -> Plan:
    plan = Plan(shards, loads=list(begin))
    for e, b, key in costs:
        i = min(range(shards), key=lambda i: (plan.loads[i], i))
        plan.placed[key] = (Piece(i),)
        plan.loads[i] += e + b
    return plan


def _wrap(costs: list[tuple[float, float, ConnKey]], shards: int, target: float,
          begin: list[float]) -> Plan:
    plan = Plan(shards, loads=list(begin))
    i = 0
    for e, b, key in costs:
        pieces: list[Piece] = []
        lo = 0
        while True:
            room = target - plan.loads[i] - e
            if i == shards - 1 or b * (SLOTS - lo) / SLOTS <= room:
                plan.loads[i] += e + b * (SLOTS - lo) / SLOTS
                pieces.append(Piece(i, lo, SLOTS))
                break
            take = int(SLOTS * room / b) if b and room > 0 else 0
            if take > 0:
                plan.loads[i] += e + b * take / SLOTS
                pieces.append(Piece(i, lo, lo + take))
                lo += take
            i += 1
        plan.placed[key] = tuple(pieces)
        if plan.loads[i] >= target and i < shards - 1:
            i += 1
    return plan
