"""The shards' results back into the one-process run: connection ids renumbered in order of
appearance, exchanges released by the engine's own rule (start time, once no request that
completed earlier is still pending anywhere) replayed over every shard's log in packet order,
and the checks that say when the shards were not independent (then the run is redone in one
process, so the output never differs from `--jobs 1`).
"""

from __future__ import annotations

import heapq
import mmap
from collections.abc import Iterable, Iterator, Sequence

from kanalyze.engine import EngineOptions
from kanalyze.parallel.plan import ConnKey, Plan
from kanalyze.parallel.worker import FINAL, LINE_PREFIX, ShardResult


class Coupled(Exception):
    """The shards influenced each other in this run: merge refused (the message says how)."""


def global_ids(results: Sequence[ShardResult]) -> list[dict[int, int]]:
    """Per shard, local connection id -> the id one engine would have given: the rank of the
    packet that opened it (a packet opens at most one connection; the pieces of a split
    connection open it at the same packet)."""
    rank = {pkt: gid for gid, pkt in enumerate(sorted({p for r in results for p, _ in r.opens}), 1)}
    return [{lid: rank[pkt] for pkt, lid in r.opens} for r in results]


def check_shared(results: Sequence[ShardResult], plan: Plan, keys: Sequence[ConnKey]) -> None:
    """Raise `Coupled` when a shard did what depends on every connection's packets (an orphan
    response's api from what they sent, a connection held until its roles were known, which
    holds back every connection's output) without a piece of every connection."""
    for r in results:
        if r.shared and not all(any(p.shard == r.index for p in plan.pieces(k)) for k in keys):
            raise Coupled(r.shared[0])


def check(results: Sequence[ShardResult], opts: EngineOptions, clock: Sequence[int]) -> None:
    """Raise `Coupled` when a shard saw a cross-shard effect or a global bound may have bitten,
    or when a request was pending for longer than the order window (then one engine releases
    by the clock of every connection's packets: `clock` is it, after each packet)."""
    for r in results:
        if r.coupled:
            raise Coupled(r.coupled[0])
    if not any(r.kafka_connections for r in results):
        raise Coupled("no Kafka connection: one engine says what the capture is")
    window, last = opts.order_window_ns, len(clock)
    for r in results:
        marks = r.pending
        for k, (_pkt, oldest) in enumerate(marks):
            until = marks[k + 1][0] - 1 if k + 1 < len(marks) else last
            if oldest is not None and until > 0 and clock[until - 1] - window > oldest:
                raise Coupled("a request pending longer than the order window")
    if sum(r.open_peak for r in results) >= opts.max_connections:
        raise Coupled("the open connections may have reached --max-connections")
    if sum(r.buffered_peak for r in results) > opts.max_buffered:
        raise Coupled("the bytes held may have exceeded --max-buffered")


def order(results: Sequence[ShardResult], ids: list[dict[int, int]]) -> Iterator[tuple[int, int]]:
    """(shard, index in its `done`) in the order one engine releases them: replay of
    `Engine._complete` / `_release` with the completions and oldest-pending changes of every
    shard merged by packet number."""
    events: list[tuple[int, int, int, int, int]] = []  # (packet, tie, shard, kind, index)
    for r in results:
        s = r.index
        for i, (pkt, _final, rank, _ts, cid, _o, _n) in enumerate(r.done):
            # within a packet (port reuse: the old connection closes, then the new one) and at
            # the end of input, the connections' completions come in connection id order
            events.append((pkt, ids[s][cid] * (1 << 32) + rank, s, 0, i))
        for i, (pkt, _first) in enumerate(r.pending):
            events.append((pkt, 1 << 62, s, 1, i))  # after the packet's completions
    events.sort()
    oldest: list[int | None] = [None] * len(results)
    done: list[tuple[int, int, int, int, int]] = []  # (start_ts, packet, tie, shard, index)
    n = len(events)
    k = 0
    while k < n:
        pkt = events[k][0]
        while k < n and events[k][0] == pkt:
            _p, tie, s, kind, i = events[k]
            if kind == 0:
                heapq.heappush(done, (results[s].done[i][3], pkt, tie, s, i))
            else:
                oldest[s] = results[s].pending[i][1]
            k += 1
        if pkt == FINAL:
            break
        if done:
            firsts = [t for t in oldest if t is not None]
            limit = min(firsts) if firsts else None
            while done and (limit is None or done[0][0] <= limit):
                e = heapq.heappop(done)
                yield e[3], e[4]
    while done:
        e = heapq.heappop(done)
        yield e[3], e[4]


NameNotes = dict[int, tuple[dict[str, str | None], dict[str, str]]]  # exchange -> (read, taught)


def names_agree(notes: Sequence[NameNotes], sequence: Sequence[tuple[int, int]],
                preloaded: dict[str, str]) -> bool:
    """Whether every topic-id name a part's decode read (`notes[part][index]`) is the one the
    whole run had learned by then, walking the exchanges in output order (`preloaded`: the
    names the run started with, `--topic-ids`). Shared by connection shards and byte ranges."""
    if not any(notes):
        return True
    known = dict(preloaded)
    for part, i in sequence:
        got = notes[part].get(i)
        if got is None:
            continue
        reads, writes = got
        if any(known.get(tid) != name for tid, name in reads.items()):
            return False
        known.update(writes)
    return True


def check_names(results: Sequence[ShardResult], sequence: list[tuple[int, int]],
                preloaded: dict[str, str]) -> None:
    """Every topic-id name a shard's decode read must be the one the run had learned by then."""
    if not names_agree([r.names for r in results], sequence, preloaded):
        raise Coupled("a topic name taught on another shard")


def write(out, results: Sequence[ShardResult], paths: Sequence[str],  # noqa: ANN001
          ids: list[dict[int, int]], sequence: list[tuple[int, int]]) -> None:
    """The lines in `sequence`, from the shards' scratch files, with the run's connection ids."""
    items = []
    for s, i in sequence:
        _pkt, _f, _seq, _ts, lid, off, size = results[s].done[i]
        items.append((s, off, size, lid, ids[s][lid]))
    write_spliced(out, paths, items)


def write_spliced(out, paths: Sequence[str],  # noqa: ANN001
                  items: Iterable[tuple[int, int, int, int, int]]) -> None:
    """Lines copied from the scratch files in `paths`, each given as (file, offset, size, its
    connection id there, the run's), with the run's connection id written in (mapped: a read
    per line costs twice the copying; the mapped pages are page cache, counted in RSS)."""
    maps: list[mmap.mmap | None] = []
    for p in paths:
        with open(p, "rb") as f:
            size = f.seek(0, 2)
            maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None)
    views = [memoryview(m if m is not None else b"") for m in maps]
    try:
        cut = len(LINE_PREFIX)
        w = out.write
        for s, off, size, lid, cid in items:
            w(LINE_PREFIX)
            w(b"%d" % cid)
            w(views[s][off + cut + len(b"%d" % lid) : off + size])
    finally:
        for v in views:
            v.release()
        for m in maps:
            if m is not None:
                m.close()
