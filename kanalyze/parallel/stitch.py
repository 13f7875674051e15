"""The stitch: the ranges' results (`kanalyze.parallel.ranges`) back into one process's output.

Walked in range order, it follows every connection across the edges. A connection open at
the end of range k is handed to the first later view of its 4-tuple at the first packet Q
where both runs marked it quiescent with the same state digest and the earlier run awaits
no request the later one does not (`_common`). The later run may await more: requests it
read from a stream it joined mid-frame (`stale`); they never get an answer there (else the
stitch refuses), so their exchanges are dropped and the output never waited for them. From
Q on, the later run is the same as one process on that connection. A connection the earlier
run saw end in its overlap is all the earlier run's, and later views of it are dropped;
connections first seen in a run's overlap are the next range's.

Each connection then has its owners, each owning the exchanges completed in a packet
interval (lo, hi]; `replay.order` replays the engine's output orderer over them.

Whatever one process would do differently is refused (`Unstitchable`, and the caller runs one
process): no common quiescent packet; a connection reopened before its handover; a SYN on a
connection after its handover (one process compares it with an ISN the later run never
saw); a stale request answered, or a resync after the handover on a connection with stale
requests; a response without its request outside range 0, or settled in range 0's overlap
or at its end after a later range's first request (its api, and when it is settled, are
inferred from evidence of the whole run); a connection whose roles were settled at the end of
input when exchanges complete there (one process releases while it replays its packets); a
bound shared by all connections that the ranges together may have
reached; a message awaited longer than the order window.

A flow that is not Kafka yields no exchange; one engine counts it (bytes, verdict, its names for
the closing notes) as the view that saw it whole does: range 0's, or a later range's that
opened it by its SYN. That view's run follows it through its overlap to the end of input (it
never marks a tail), so every later view of its 4-tuple is dropped. Refused (with `others`;
without it, any such flow): such a view handed over or found mid-stream after range 0 (a later
run judges a flow it joined with other rules, e.g. no detection budget), a later view of it
judged Kafka, a later connection on its 4-tuple in the same run, and flows judged at the end
of input in two ranges (`range_stats`: one engine's order of them is not known).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kanalyze.engine import EngineOptions
from kanalyze.parallel.range_plan import FINAL, ConnEdge, RangeResult
from kanalyze.parallel.replay import INF, Own, Unstitchable, order, standing

__all__ = ["Stitched", "Unstitchable", "stitch"]


@dataclass(slots=True)
class Stitched:
    """(range, index in its `done`) in output order (or packet order: `stitch(ordered=False)`);
    per range, local -> run connection id."""

    sequence: list[tuple[int, int]] = field(default_factory=list)
    ids: list[dict[int, int]] = field(default_factory=list)
    skipped: int = 0
    gaps: int = 0
    handovers: int = 0  # connections handed from one range to a later one
    stale: int = 0  # requests of a later run dropped at a handover
    # per range, local id -> the packets (lo, hi] of its part (lo 0: from its start; hi INF:
    # to its end)
    owners: list[dict[int, tuple[int, int]]] = field(default_factory=list)
    # per exchange of `sequence`: the packet after which one engine releases it (FINAL: at the
    # end of input); a consumer that also watches packets (stats' conv table) keeps in step
    released: list[int] = field(default_factory=list)
    own: list[dict[int, Own]] = field(default_factory=list)  # per range: local id -> its part


def _common(prev: ConnEdge, nxt: ConnEdge, mine: Own) -> tuple[int, tuple, tuple, frozenset] | None:
    """(Q, the earlier run's mark there, the later run's, the later run's stale requests);
    `mine`: the earlier run's part (Q must lie in it; its stale requests are not awaited)."""
    later = {m[0]: m for m in nxt.head}
    for m in prev.tail:
        if m[0] <= mine.lo:
            continue
        got = later.get(m[0])
        if got is not None and got[1] == m[1]:
            ours, theirs = set(m[5]) - mine.stale, set(got[5])
            if ours <= theirs:
                return m[0], m, got, frozenset(theirs - ours)
    return None


def stitch(results: Sequence[RangeResult], opts: EngineOptions,
           others: bool = False, ordered: bool = True) -> Stitched:
    """`others`: whether the caller rebuilds what one engine counts for flows that are not
    Kafka (`range_stats` for `--jobs N`; Spark's `range_stage` for its connections rows);
    without it any such flow is refused. `ordered` False: `sequence` holds the exchanges
    that stand in packet order, not one engine's release order (`replay.standing`), and
    `released` stays empty."""
    results = sorted(results, key=lambda r: r.index)
    for one in results:
        if one.error or one.coupled:
            raise Unstitchable(one.error or one.coupled[0])
    if sum(r.open_peak for r in results) >= opts.max_connections:
        raise Unstitchable("the open connections may have reached --max-connections")
    if sum(r.buffered_peak for r in results) > opts.max_buffered:
        raise Unstitchable("the bytes held may have exceeded --max-buffered")
    n = len(results)
    own: list[dict[int, Own]] = [{} for _ in range(n)]
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
            if ended is None and pe.judged is not None and others:
                # not Kafka and open at the end of its range: that run's overlap followed it
                # to the end of input (it never marks a tail), so every later view is its
                # (and stays so: the 4-tuple stays live for the ranges after)
                if e.kafka:
                    raise Unstitchable("a flow judged not Kafka in one range, Kafka in another")
                claimed.add(lid)
                continue
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
            got = _common(pe, e, own[pr][plid])
            if got is None:
                raise Unstitchable(f"no common quiescent packet across a range edge (ranges "
                                   f"{pr} and {r}, ports {e.key[1]}/{e.key[3]})")
            del live[e.key]
            q, mine, theirs, stale = got
            prev = own[pr][plid]
            prev.hi, prev.at_hi = q, (mine[2], mine[3])
            own[r][lid] = Own(q, INF, prev.root, (theirs[2], theirs[3]), stale, theirs[4])
            claimed.add(lid)
            out.handovers += 1
            out.stale += len(stale)
        for lid, e in res.conns.items():
            if e.opened > res.end_pkt or lid in claimed and lid not in own[r]:
                continue
            if lid not in own[r]:
                own[r][lid] = Own(0, INF, (r, lid))
            o = own[r][lid]
            if e.ignored or e.judged is not None:
                if not others:
                    raise Unstitchable("a flow that is not Kafka (one process counts it)")
                _check_other(res, r, lid, o)
            if o.lo and e.syn_seen is not None and e.syn_seen > o.lo:
                raise Unstitchable("a SYN on a connection handed over")
            open_at_end = e.closed is not None and e.closed > res.end_pkt  # FINAL too
            if open_at_end and r + 1 < n:
                live[e.key] = (r, lid)
    _check_stale(results, own)
    out.own = own
    roots = sorted({o.root for d in own for o in d.values()},
                   key=lambda rl: (results[rl[0]].conns[rl[1]].opened, rl[0], rl[1]))
    gid = {rl: i for i, rl in enumerate(roots, 1)}
    out.ids = [{lid: gid[o.root] for lid, o in d.items()} for d in own]
    if not any(results[r].conns[lid].kafka for r, lid in roots):
        raise Unstitchable("no Kafka connection: one process says what the capture is")
    for r, d in enumerate(own):
        for lid, o in d.items():
            e = results[r].conns[lid]
            if e.judged is not None:
                continue  # one process's closing note counts Kafka connections only
            end = o.at_hi if o.hi != INF and o.at_hi is not None else (e.skipped, e.gaps)
            out.skipped += end[0] - o.at_lo[0]
            out.gaps += end[1] - o.at_lo[1]
    out.owners = [{lid: (o.lo, o.hi) for lid, o in d.items()} for d in own]
    if ordered:
        out.sequence = order(results, own, out.ids, opts, out.released)
    else:
        out.sequence = standing(results, own, out.ids, opts)
    return out


def _check_other(res: RangeResult, r: int, lid: int, o: Own) -> None:
    """A flow that is not Kafka stands when its view saw it as one process does: from its
    first packet (range 0, or opened by a SYN in a later range: a later run judges a flow it
    joined mid-stream with other rules), not handed over, judged once, and the only view of
    its 4-tuple in its run after it (a later connection on the 4-tuple would be that run's
    from its overlap on, and the next range's too)."""
    e = res.conns[lid]
    if e.judged is None or not e.ignored or e.kafka:
        raise Unstitchable("a flow that is not Kafka counted where its verdict is not known")
    if o.lo or o.root != (r, lid):
        raise Unstitchable("a flow that is not Kafka handed over")
    if r and not e.syn:
        raise Unstitchable("a flow that is not Kafka found mid-stream after the first range")
    if any(x.key == e.key and x.opened >= e.opened and i != lid for i, x in res.conns.items()):
        raise Unstitchable("a flow that is not Kafka and a later connection on its 4-tuple")


def _check_stale(results: Sequence[RangeResult], own: list[dict[int, Own]]) -> None:
    """A later run with stale requests must not resync after the handover (its search would
    take the stale correlation ids into account)."""
    for r, d in enumerate(own):
        for lid, o in d.items():
            if not o.stale:
                continue
            e = results[r].conns[lid]
            marks = {m[0]: m for m in e.tail}
            at_hi = marks[o.hi][4] if o.hi in marks else e.resyncs
            if at_hi != o.resyncs_lo:
                raise Unstitchable("a resync after a handover with stale requests")

