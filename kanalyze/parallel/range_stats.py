"""The engine statistics of a stitched run (`EngineStats`), as one engine would have counted
them, from the ranges' notes (`range_engine.counters`, `ConnEdge.counts`, `.final`,
`.events`, `RangeResult.flows`).

One engine adds a connection's numbers when it closes it: its byte counts per direction
(`DirectionTotals.add`), its framers' stream events (kept up to the engine-wide
`max_events`, in close order) and their counts by code. A connection is owned by one run per
packet interval (`replay.Own`: (lo, hi]); each owner contributes its counters at hi minus
those at lo (the handover packets, where both runs were in the same state), its stream
events in between (their stream offsets moved to the run's: a later run counts from where it
joined), so the sums are one process's. Close order: the packet the last owner closed it at,
and at the end of input the order connections entered the engine (`ConnEdge.inserted` of the
first view). Packets that are not TCP are counted per range, the overlap left out.

Not rebuilt: the peaks (`open_peak`, `buffered_peak`, `held_peak`: the most held at once
across connections and the output orderer, which no range sees whole), left at 0: a caller
that prints them (`summary --json`) runs one process. Engine-wide bounds hit and snaplen cuts
are refused by the stitch; a flow that is not Kafka is counted by the view that saw it whole
(`_others`); a framer that dropped stream events past
its cap refuses here (its kept events depend on where the run began).
"""

from __future__ import annotations

from collections.abc import Sequence

from kanalyze.engine import DirectionTotals, EngineStats
from kanalyze.framing import MAX_EVENTS, StreamEvent
from kanalyze.parallel.range_plan import FINAL, RangeResult
from kanalyze.parallel.replay import INF, Unstitchable
from kanalyze.parallel.stitch import Stitched

_TOTALS = ("stream", "frames", "skipped", "gaps", "gap_count", "retransmitted",
           "overlap_conflicts", "pdus", "limit_gaps", "uncaptured")
_ZERO: tuple[tuple, ...] = tuple((0,) * 12 + ({},) for _ in range(2))


def engine_stats(results: Sequence[RangeResult], st: Stitched,
                 max_events: int = EngineStats().max_events) -> EngineStats:
    """See the module docstring; raises `Unstitchable` when the numbers cannot be had."""
    stats = EngineStats(max_events=max_events)
    fl = stats.flows
    for res in results:
        got = res.flows
        if got is None:
            raise Unstitchable("a range without its packet counts")
        for name in ("tcp", "not_ip", "not_tcp", "fragments", "malformed"):
            setattr(fl, name, getattr(fl, name) + getattr(got, name))
        for lt, n in got.unsupported_linktypes.items():
            fl.unsupported_linktypes[lt] = fl.unsupported_linktypes.get(lt, 0) + n
    closing = []
    for gid, chain in _chains(st).items():
        _lo, r0, l0 = chain[0]
        root = results[r0].conns[l0]
        last = results[chain[-1][1]].conns[chain[-1][2]]
        closed = FINAL if last.closed is None else last.closed
        closing.append((closed, root.inserted if closed >= FINAL else 0, gid, chain))
    closing.sort(key=lambda c: c[:3])
    stats.connections = len(closing)
    for _closed, _ins, gid, chain in closing:
        last = results[chain[-1][1]].conns[chain[-1][2]]
        if not last.kafka:
            if last.judged is None:  # (not Kafka: `_others`)
                stats.empty_connections += 1
            continue
        stats.kafka_connections += 1
        sides = _sides(results, st, gid, chain)
        for totals, (nums, events, counts, dropped) in zip((stats.client, stats.broker), sides,
                                                           strict=True):
            _add(totals, nums)
            for code, n in counts.items():
                stats.event_counts[code] = stats.event_counts.get(code, 0) + n
            stats.events_dropped += dropped
            room = max(stats.max_events - len(stats.events), 0)
            stats.events.extend(events[:room])
            stats.events_dropped += max(len(events) - room, 0)
    _others(results, st, stats)
    return stats


def other_flows(results: Sequence[RangeResult], st: Stitched) -> EngineStats:
    """One engine's numbers of the flows that are not Kafka alone (the export's closing note
    on TLS); raises `Unstitchable` as `engine_stats`."""
    stats = EngineStats()
    _others(results, st, stats)
    return stats


def _others(results: Sequence[RangeResult], st: Stitched, stats: EngineStats) -> None:
    """The flows that are not Kafka, each counted by the one view that owns it (the stitch
    checked it saw the flow whole), in the order one engine judged them: by packet, and in a
    run's own order at the same packet (one packet decides one flow; at the end of input one
    engine's order across runs is not known: refused when two runs judged a flow there)."""
    judged = []
    for r, own in enumerate(st.own):
        for lid in own:
            edge = results[r].conns[lid]
            stats.non_kafka_bytes += edge.other_bytes
            if edge.judged is not None and edge.flow is not None:
                judged.append((edge.judged[0], r, edge.judged[1], edge.flow))
    if len({r for pkt, r, _n, _f in judged if pkt >= FINAL}) > 1:
        raise Unstitchable("flows that are not Kafka judged at the end of input in two ranges")
    for *_at, (client, broker, tls) in sorted(judged, key=lambda j: j[:3]):
        stats.not_kafka(client, broker, tls)


def _sides(results: Sequence[RangeResult], st: Stitched, gid: int,
           chain: list[tuple[int, int, int]]) -> list[tuple[list[int], list, dict, int]]:
    """Per direction of one connection: its totals (in `_TOTALS` order), stream events, event
    counts by code and events dropped, summed over its owners."""
    out: list[tuple[list[int], list, dict, int]] = []
    for side in (0, 1):
        nums = [0] * len(_TOTALS)
        events: list[StreamEvent] = []
        counts: dict[str, int] = {}
        for _lo, r, lid in chain:
            edge = results[r].conns[lid]
            at_lo, at_hi = _bounds(results, st, r, lid)
            if edge.events is None:
                raise Unstitchable("a connection without its stream events")
            a, b = at_lo[side], at_hi[side]
            if b[11] != a[11]:
                raise Unstitchable("stream events past a framer's cap")
            shift = nums[0] - a[0]  # the run's stream offset where this owner began
            for k in range(len(_TOTALS)):
                nums[k] += b[k] - a[k]
            events.extend(e._replace(connection=gid, stream_offset=e.stream_offset + shift)
                          for e in edge.events[side][a[10] : b[10]])
            for code, n in b[12].items():
                n -= a[12].get(code, 0)
                if n:
                    counts[code] = counts.get(code, 0) + n
        dropped = max(len(events) - MAX_EVENTS, 0)
        out.append((nums, events[:MAX_EVENTS], counts, dropped))
    return out


def offset_shifts(results: Sequence[RangeResult], st: Stitched) -> dict[tuple[int, int],
                                                                      tuple[int, int]]:
    """Per owning view (range, local id) of a connection handed over, what to add to its
    stream offsets (client side, broker side) to make them the run's: a later run counts from
    where it joined. Views not listed need nothing."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for chain in _chains(st).values():
        if len(chain) < 2:
            continue
        run = [0, 0]  # the run's stream offsets where the current owner began
        for _lo, r, lid in chain:
            at_lo, at_hi = _bounds(results, st, r, lid)
            shift = (run[0] - at_lo[0][0], run[1] - at_lo[1][0])
            if shift != (0, 0):
                out[(r, lid)] = shift
            for side in (0, 1):
                run[side] += at_hi[side][0] - at_lo[side][0]
    return out


def _chains(st: Stitched) -> dict[int, list[tuple[int, int, int]]]:
    """Run connection id -> its owners as (lo, range, local id), in packet order."""
    chains: dict[int, list[tuple[int, int, int]]] = {}
    for r, own in enumerate(st.own):
        for lid, o in own.items():
            chains.setdefault(st.ids[r][lid], []).append((o.lo, r, lid))
    for chain in chains.values():
        chain.sort()
    return chains


def _bounds(results: Sequence[RangeResult], st: Stitched, r: int, lid: int) -> tuple[tuple, tuple]:
    """A view's counters where its part of the connection begins and ends."""
    edge = results[r].conns[lid]
    o = st.own[r][lid]
    at_lo = edge.counts.get(o.lo) if o.lo else _ZERO
    at_hi = edge.final if o.hi == INF else edge.counts.get(o.hi)
    if at_lo is None or at_hi is None:
        raise Unstitchable("a handover without the engine's counts")
    return at_lo, at_hi


def _add(totals: DirectionTotals, nums: list[int]) -> None:
    for name, n in zip(_TOTALS, nums, strict=True):
        setattr(totals, name, getattr(totals, name) + n)
