"""Byte ranges: one capture cut into contiguous ranges at record boundaries, each decoded by
its own engine, stitched back into exactly what one process outputs. The one planner of
`--jobs N` and of the Spark pipeline (issues 18 and 19); everything here is pure Python.

Interface (stable; everything crossing a process is picklable plain data: ints, bytes,
tuples, lists, dicts and small dataclasses, no engine objects):

* `plan_ranges(paths, n, range_bytes=None, bodies=True, lead_us=0.0) -> list[Range] | None`:
  a single regular pcap or pcapng file cut into `n` ranges of about equal estimated CPU (a
  pcap: every record header walked, through mmap, or in blocks for a URI read through
  `kanalyze.capture.source` (`plan_chain`); a pcapng: equal bytes at verified sync
  points, `kanalyze.capture.split`), or into ranges of `range_bytes`; range 0 gets `lead_us`
  more (the others' workers start meanwhile). Each `Range` knows the run's number of its
  first packet (`base`) and the latest packet time of the run (`last_ts`). None when the
  input cannot be cut (several files, stdin, gzip, damage, a pcapng section or interface
  block after the first packet, under 1 MB per range): the caller runs one process.
* `run_range(rng, opts, on_exchange) -> RangeResult`: the unmodified `Engine` over the
  range's packets, then on past its end (the *overlap*: only the packets of the connections
  still open at the range's end) until each of them closed or was seen quiescent a few
  times. Every exchange goes to `on_exchange` (the caller encodes it: an NDJSON line, a Spark
  row) and gets an index in `RangeResult.done`, in call order; key what you keep by
  (range index, that index).
* `stitch(results, opts, others=False) -> Stitched`: which exchanges stand
  (`Stitched.sequence`: (range, index) in the one-process output order) with which
  connection id (`Stitched.ids`: per range, local id -> the run's id), plus the closing
  note's byte counts. It raises
  `Unstitchable` (the message says why) when it cannot prove the result equal to one
  process: the caller then runs one process. It needs only the `RangeResult`s (a few
  hundred bytes per exchange, none of the payload), so a cluster ships those to one place,
  stitches, and joins the result back onto the rows it kept. `others=True`: the caller
  also rebuilds what one engine counts for flows that are not Kafka (`range_stats`), so the
  stitch accepts them where one view saw them whole.

**Edge state** (`ConnEdge`, per connection a range saw): its 4-tuple, the packet it opened
at, whether by a SYN, its close, and *marks*: after packets of the connection where it was
quiescent (`range_engine.signature`: in sync at a frame boundary on both sides, nothing
buffered, no held orphan), the packet number, a 16-byte digest of the state that decides its
future (roles, raw next sequence numbers, acks past them, FINs), the byte counts so far and
the requests it awaits as (first packet, last packet, correlation id); `head` marks for a
connection found mid-stream, `tail` marks past the range's end. A connection open at the
end of range k is handed to the next range that sees it at the first packet Q where both
runs marked the same digest and range k awaits nothing the later run does not: exchanges
completed up to Q are range k's, later ones the later range's, whose run is from Q on the
same as one process's. Requests pending across the edge, frames straddling it and responses
without their request at the later range's start are so answered by range k's run; what the
later run awaits beyond range k's set it read from a stream joined mid-frame (*stale*, never
answered, dropped). Design and limits: docs/architecture.md, "Every core, offline".

Per exchange, `done` holds (completion packet, rank within that packet and connection,
start time, local connection id, its request's first and last packet and correlation id,
flags); `waits` holds, per message the output waited for, the packets it began and ended
waiting and its start time; with them the stitch replays the engine's output orderer.
"""

from __future__ import annotations

from collections.abc import Callable

from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.held import HeldFrames
from kanalyze.parallel.range_engine import RangeTap, run
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

__all__ = ["ConnEdge", "Layout", "Mark", "MsgKey", "Range", "RangeResult", "RangeTap", "Stitched",
           "Unstitchable", "plan_ranges", "read_range", "run_range", "stitch"]


def run_range(rng: Range, opts: EngineOptions, on_exchange: Callable[[Exchange], None],
              held: HeldFrames | None = None, tap: RangeTap | None = None) -> RangeResult:
    """See the module docstring (`held`, `tap`: `range_engine.run`)."""
    return run(rng, opts, on_exchange, held, tap)
