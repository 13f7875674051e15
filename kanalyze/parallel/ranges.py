"""Byte ranges: one capture cut into contiguous ranges at record boundaries, each decoded by
its own engine, stitched back into exactly what one process outputs. The one planner of
`--jobs N` and of the Spark pipeline (issues 18 and 19).

Interface (stable; everything crossing a process is picklable plain data):

* `plan_ranges(paths, n, range_bytes=None, bodies=True) -> list[Range] | None`: a single
  regular pcap or pcapng file cut into `n` ranges of about equal estimated CPU (a pcap: every
  record header walked; a pcapng: equal bytes at verified sync points,
  `kanalyze.capture.split`), or into ranges of `range_bytes`, each knowing the run's number of
  its first packet;
  None when the input cannot be cut (several files, stdin, gzip, damage, a pcapng section or
  interface block after the first packet): the caller runs one process.
* `run_range(rng, opts, on_exchange) -> RangeResult`: the normal `Engine` over the range's
  packets, then on past its end (the *overlap*, only the packets of the connections still
  open at the range's end) until each of them closed or was seen quiescent a few times.
  Every exchange goes to `on_exchange` (the caller encodes it: an NDJSON line, a Spark row)
  and gets an index in `RangeResult.done`, in call order.
* `stitch(results) -> Stitched` (in `kanalyze.parallel.stitch`, ordered by range index):
  which exchanges stand (`Stitched.sequence`: (range, index) in the one-process output
  order) with which connection id (`Stitched.ids`), plus the closing note's byte counts; it
  raises `Unstitchable` (the message says why) when it cannot prove the result equal to one
  process, and the caller runs one process.

**Edge state** (`ConnEdge`, per connection a range saw): its 4-tuple, the packet it opened
at, whether by a SYN, and *marks*: after packets of the connection where it was quiescent
(`range_engine.signature`: in sync at a frame boundary on both sides, nothing buffered, no
held orphan), the packet number, a 16-byte digest of the state that decides its future
(raw next sequence numbers and acks, pending requests by correlation id and packet, roles)
and the byte counts so far; `head` marks for a connection found mid-stream, `tail` marks
for one continuing into the overlap. A connection open at the end of range k is handed to
range k+1 at the first packet where both runs have a mark with the same digest: exchanges
completed up to that packet are range k's, later ones range k+1's (whose run is from then on
the same as one process's). Requests pending across the edge, frames straddling it and
responses without their request in range k+1 are thereby all answered by range k's run.

Per exchange, `done` holds (completion packet, rank within that packet and connection,
start time, local connection id); `pending` logs each connection's oldest awaited message
(packet, connection, start time or None, held for its roles); with them the stitch replays
the engine's output orderer over the exchanges that stand.
"""

from __future__ import annotations

from collections.abc import Callable

from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.parallel.range_engine import run
from kanalyze.parallel.range_plan import (
    ConnEdge,
    Layout,
    Mark,
    MsgKey,
    Range,
    RangeResult,
    plan_ranges,
    read_range,
)
from kanalyze.parallel.stitch import Stitched, Unstitchable, stitch

__all__ = ["ConnEdge", "Layout", "Mark", "MsgKey", "Range", "RangeResult", "Stitched",
           "Unstitchable", "plan_ranges", "read_range", "run_range", "stitch"]


def run_range(rng: Range, opts: EngineOptions,
              on_exchange: Callable[[Exchange], None]) -> RangeResult:
    """See the module docstring."""
    return run(rng, opts, on_exchange)
