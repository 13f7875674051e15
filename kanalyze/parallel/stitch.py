"""The stitch: the ranges' results (`kanalyze.parallel.ranges`) back into one process's output.

Walked in range order, it follows every connection across the edges: a connection open at
the end of range k is handed to range k+1's first incarnation of its 4-tuple at the first
packet both runs marked with the same state digest (from there on both runs are the same);
a connection range k saw end in its overlap is all range k's, and range k+1's view of it is
dropped; connections range k first saw in its overlap are range k+1's. Each connection then
has its owners, each owning the exchanges completed in a packet interval (lo, hi]. The
engine's output orderer is replayed over the exchanges that stand: released by start time
once no connection has an older awaited message, with every connection's log taken from its
owner at that packet.

Whatever one process would do differently is refused (`Unstitchable`, and the caller runs one
process): no common quiescent packet; a connection idle for a whole range, or one whose end
a later range cannot know; an exchange inferred from evidence a range did not have (a
response without its request outside range 0); a bound shared by all connections that the
ranges together may have reached; a message awaited longer than the order window; a flow
that is not Kafka (one process's closing note judges the whole capture).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from kanalyze.engine import EngineOptions
from kanalyze.parallel.range_engine import FINAL
from kanalyze.parallel.ranges import ConnEdge, RangeResult

INF = FINAL + 1


class Unstitchable(Exception):
    """The ranges cannot be proved equal to one process (the message says why)."""


@dataclass(slots=True)
class Stitched:
    """(range, index in its `done`) in output order; per range, local -> run connection id."""

    sequence: list[tuple[int, int]] = field(default_factory=list)
    ids: list[dict[int, int]] = field(default_factory=list)
    skipped: int = 0
    gaps: int = 0
    handovers: int = 0  # connections handed from one range to the next


def _common(prev: ConnEdge, nxt: ConnEdge) -> tuple[int, int, int, int, int] | None:
    """(packet, skipped and gaps of the earlier run there, of the later run there)."""
    later = {(p, d): (s, g) for p, d, s, g in nxt.head}
    for p, d, s, g in prev.tail:
        got = later.get((p, d))
        if got is not None:
            return p, s, g, got[0], got[1]
    return None


def stitch(results: Sequence[RangeResult], opts: EngineOptions) -> Stitched:
    results = sorted(results, key=lambda r: r.index)
    for one in results:
        if one.error or one.coupled:
            raise Unstitchable(one.error or one.coupled[0])
    if sum(r.open_peak for r in results) >= opts.max_connections:
        raise Unstitchable("the open connections may have reached --max-connections")
    if sum(r.buffered_peak for r in results) > opts.max_buffered:
        raise Unstitchable("the buffered bytes may have exceeded --max-buffered")
    n = len(results)
    # per range: local id -> [lo, hi, root (range, lid), bytes skipped/gaps at lo, at hi]
    own: list[dict[int, list]] = [{} for _ in range(n)]
    # 4-tuple -> (range, lid) open at a range's end and not yet seen by a later range (one
    # never seen again is its range's to the end of input)
    live: dict[tuple, tuple[int, int]] = {}
    out = Stitched()
    for r, res in enumerate(results):
        claimed: set[int] = set()
        for lid, e in sorted(res.conns.items(), key=lambda kv: (kv[1].opened, kv[0])):
            if e.opened > res.end_pkt or e.key not in live:
                continue  # first seen in the overlap (the next range's), or new
            pr, plid = live[e.key]
            pe = results[pr].conns[plid]
            ended = pe.closed if pe.closed is not None and pe.closed != FINAL else None
            if ended is not None:
                if e.opened <= ended and not e.syn:
                    claimed.add(lid)  # the earlier run saw its end: this view is dropped
                    continue
                if e.opened < ended:
                    raise Unstitchable("a connection reopened before its end")
                del live[e.key]
                continue  # a new connection on the same 4-tuple
            if e.syn:
                raise Unstitchable("a connection reopened before its handover")
            got = _common(pe, e)
            if got is None:
                raise Unstitchable(f"no common quiescent packet across a range edge (ranges "
                                   f"{pr} and {r}, ports {e.key[1]}/{e.key[3]})")
            del live[e.key]
            q, ps, pg, ns, ng = got
            prev = own[pr][plid]
            prev[1], prev[5] = q, (ps, pg)
            own[r][lid] = [q, INF, prev[2], (ns, ng), None, None]
            claimed.add(lid)
            out.handovers += 1
        for lid, e in res.conns.items():
            if e.opened > res.end_pkt or lid in claimed and lid not in own[r]:
                continue
            if lid not in own[r]:
                own[r][lid] = [0, INF, (r, lid), (0, 0), None, None]
            if e.ignored:
                raise Unstitchable("a flow that is not Kafka (one process writes the note)")
            open_at_end = e.closed is not None and e.closed > res.end_pkt  # FINAL too
            if open_at_end and r + 1 < n:
                live[e.key] = (r, lid)
    roots = sorted({tuple(v[2]) for d in own for v in d.values()},
                   key=lambda rl: (results[rl[0]].conns[rl[1]].opened, rl[0], rl[1]))
    gid = {rl: i for i, rl in enumerate(roots, 1)}
    out.ids = [{lid: gid[tuple(v[2])] for lid, v in d.items()} for d in own]
    if not any(results[r].conns[lid].kafka for r, lid in roots):
        raise Unstitchable("no Kafka connection: one process says what the capture is")
    for r, d in enumerate(own):
        for lid, (_lo, hi, _root, at_lo, _x, at_hi) in d.items():
            e = results[r].conns[lid]
            end = at_hi if hi != INF else (e.skipped, e.gaps)
            out.skipped += end[0] - at_lo[0]
            out.gaps += end[1] - at_lo[1]
    out.sequence = _order(results, own, out.ids, opts)
    return out


def _order(results: Sequence[RangeResult], own: list[dict[int, list]],
           ids: list[dict[int, int]], opts: EngineOptions) -> list[tuple[int, int]]:
    """The engine's release rule replayed over the exchanges and logs that stand."""
    events: list[tuple[int, int, int, int, int, int]] = []  # (pkt, kind, gid, rank, range, i)
    logs: dict[int, list[tuple[int, int | None, bool]]] = {}
    for r, res in enumerate(results):
        d = own[r]
        for i, (pkt, rank, _ts, lid) in enumerate(res.done):
            o = d.get(lid)
            if o is not None and o[0] < pkt <= o[1]:
                if r > 0 and i in res.orphans:
                    raise Unstitchable("a response without its request after range 0 (its api "
                                       "is inferred from evidence of the whole run)")
                events.append((pkt, 0, ids[r][lid], rank, r, i))
        for i, (pkt, lid, first, und) in enumerate(res.pending):
            o = d.get(lid)
            if o is not None and o[0] < pkt <= o[1]:
                events.append((pkt, 1, ids[r][lid], 0, r, i))
                logs.setdefault(ids[r][lid], []).append((pkt, first, und))
    _check_window(results, logs, opts)
    events.sort()
    oldest: dict[int, int] = {}
    done: list[tuple[int, int, int, int, int, int]] = []
    seq: list[tuple[int, int]] = []
    k, m = 0, len(events)
    while k < m:
        pkt = events[k][0]
        while k < m and events[k][0] == pkt:
            _p, kind, g, rank, r, i = events[k]
            if kind == 0:
                heapq.heappush(done, (results[r].done[i][2], pkt, g, rank, r, i))
            else:
                ts = results[r].pending[i][2]
                if ts is None:
                    oldest.pop(g, None)
                else:
                    oldest[g] = ts
            k += 1
        if pkt >= FINAL:
            break
        limit = min(oldest.values()) if oldest else None
        while done and (limit is None or done[0][0] <= limit):
            e = heapq.heappop(done)
            seq.append((e[4], e[5]))
    while done:
        e = heapq.heappop(done)
        seq.append((e[4], e[5]))
    return seq


def _check_window(results: Sequence[RangeResult], logs: dict[int, list],
                  opts: EngineOptions) -> None:
    """One process releases by the clock when a message waits longer than the order window;
    refused here, judged with the latest time of the range the wait ends in (an upper bound)."""
    window = opts.order_window_ns
    ends = [r.end_pkt for r in results]
    top, acc = [], 0
    for r in results:
        acc = max(acc, r.max_ts)
        top.append(acc)
    for entries in logs.values():
        entries.sort()
        for j, (_pkt, ts, und) in enumerate(entries):
            if ts is None or und:
                continue
            until = entries[j + 1][0] if j + 1 < len(entries) else FINAL
            k = next((x for x, e in enumerate(ends) if until <= e), len(ends) - 1)
            if top[k] - window > ts:
                raise Unstitchable("a message awaited longer than the order window")
