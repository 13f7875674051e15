"""Byte ranges, the data and the reading: the plan (`plan_ranges`: where to cut), a range
(`Range`), what a range's run reports (`RangeResult`, `ConnEdge` and its marks), and reading a
range's packets and its overlap. The interface and the design: `kanalyze.parallel.ranges`.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kanalyze.capture.packets import MAX_RECORD, CaptureError, Packet
from kanalyze.capture.source import is_remote, open_source, readable, source_size
from kanalyze.capture.split import RangeResult as WalkResult
from kanalyze.capture.split import iter_range, probe_layout, sync
from kanalyze.flows import FlowStats
from kanalyze.parallel.plan import BODY_US_PER_BYTE, BODY_US_PER_DATA_PACKET, ENGINE_US_PER_PACKET

ConnKey = tuple[bytes, int, bytes, int]
FINAL = 1 << 62  # the "packet number" of what happens at the end of input
INF = FINAL + 1  # the end of a run's part of a connection that it keeps to its end


def conn_key(k: ConnKey) -> ConnKey:
    """A connection's 4-tuple regardless of direction (smaller end first)."""
    a, b = (k[0], k[1]), (k[2], k[3])
    return (a[0], a[1], b[0], b[1]) if a <= b else (b[0], b[1], a[0], a[1])
MsgKey = tuple[int, int, int]  # a request: (first packet, last packet, correlation id)
# (packet no, digest of the state, bytes skipped so far, bytes lost in gaps so far, resyncs so
# far, the requests awaited)
Mark = tuple[int, bytes, int, int, int, tuple[MsgKey, ...]]
MIN_RANGE = 1 << 20  # a range smaller than this is not worth a worker (tests force smaller)


@dataclass(slots=True)
class Layout:
    """What the split walker needs to know about the file (`kanalyze.capture.split.Layout`)."""

    size: int = 0
    format: str = ""
    endian: str = "<"
    ns_mult: int = 1000
    linktype: int = -1
    snaplen: int = 0
    data_start: int = 0
    first_ts_ns: int = 0
    ifaces: list[list[int]] = field(default_factory=list)
    rank: int = 0


@dataclass(frozen=True, slots=True)
class Range:
    """[start, end) of the file, packets numbered base+1..; the run may read on to `stop` for
    the overlap. `last_ts`: the run's latest packet time (the end of
    input is dated by it)."""

    index: int
    path: str
    layout: Layout
    start: int
    end: int
    stop: int
    base: int
    count: int  # packets in [start, end); UNCOUNTED: the run counts them (`plan_chain`)
    last_ts: int
    last: bool
    # the files after this range's file in a rotated set (`plan_chain`), each as a range of
    # no packets at its first record: the overlap reads on into them
    then: tuple[Range, ...] = ()
    # its packets as the plan knows them (`count`, or an estimate where it did not walk the
    # file): the costly ranges are started first (packets weigh most: `_record_cost`)
    packets: int = 0
    # a file that ends later than the next one begins (tcpdump's clock can step back a
    # microsecond across a rotation): its last range also reads the next file's leading
    # packets, merged by time as one process merges them (`range_edges`), and the next file's
    # first range skips its leading packets earlier than `head_before` (ns; 0: none), this
    # file's latest time as the plan found it
    merges: bool = False
    head_before: int = 0

    @property
    def counted(self) -> bool:
        """False for a file's only range that the plan did not walk (`plan_chain`): its run
        counts its packets, rejects what the walk would have, and checks its latest time
        against the next file's first (`chain_ordered`)."""
        return self.count != UNCOUNTED


UNCOUNTED = -1


@dataclass(slots=True)
class ConnEdge:
    """One connection as a range saw it (see the module docstring)."""

    key: ConnKey
    opened: int
    syn: bool
    head: list[Mark] = field(default_factory=list)
    tail: list[Mark] = field(default_factory=list)
    closed: int | None = None  # packet it was closed at (FINAL: end of this run)
    skipped: int = 0  # at close
    gaps: int = 0
    resyncs: int = 0
    kafka: bool = False
    ignored: bool = False  # judged not Kafka (or TLS)
    syn_seen: int | None = None  # packet of a SYN on it when it was found mid-stream
    # what the engine's statistics add up (`range_engine.counters`, per direction), at each
    # mark's packet and at close; the packet it entered the engine's open set; its stream
    # events per direction, at close (`range_session` rebuilds the summary's numbers)
    counts: dict[int, tuple] = field(default_factory=dict)
    final: tuple | None = None
    inserted: int = 0
    events: tuple[list, list] | None = None
    # what one engine's statistics count for it as a flow that is not Kafka
    # (`range_engine.RangeEngine._other`): its bytes, and when it was judged so (packet, the
    # run's count of such verdicts before it) with its (client, broker, TLS) names
    other_bytes: int = 0
    judged: tuple[int, int] | None = None
    flow: tuple[str, str, bool] | None = None
    # (client, broker) as the engine opened it (roles never change after): the Spark
    # connections table names a connection without exchanges by them, as the shuffle path does
    roles: tuple[str, str] | None = None


@dataclass(slots=True)
class RangeResult:
    index: int
    base: int
    end_pkt: int  # last packet of the range proper
    # per exchange: (completion packet, rank, start time, local connection, its request as
    # first packet, last packet, correlation id (-1s: none), flags: 1 answered, 2 duplicate id)
    done: list[tuple[int, int, int, int, int, int, int, int]] = field(default_factory=list)
    # per message the output waited for: (local connection, packet it began waiting, packet it
    # was done, start time, first packet, last packet, correlation id, 1 if a held connection)
    waits: list[tuple[int, int, int, int, int, int, int, int]] = field(default_factory=list)
    conns: dict[int, ConnEdge] = field(default_factory=dict)
    coupled: list[str] = field(default_factory=list)  # engine-wide effects: no stitch
    orphans: set[int] = field(default_factory=set)  # indices of responses without a request
    max_ts: int = 0
    open_peak: int = 0
    buffered_peak: int = 0
    error: str = ""
    overlap_end: int = 0  # last packet fed after the range's end
    cpu_s: float = 0.0
    # (local connection, packet of a mark, or -1 at its close) -> its counters then
    # (`range_engine.table_counters`: the connections table's byte counts, summed over the owners)
    counters: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    flows: FlowStats | None = None  # the packets of the range proper (not the overlap)
    # a merging range (`Range.merges`): the next file's packets it read as its own, the first
    # packet of its own file it read after one of them (0: none), the 4-tuples with packets
    # in that edge and from which files; a range with `head_before`: the leading packets it
    # left to the previous file's last range
    merged: int = 0
    merged_from: int = 0
    head_skipped: int = 0
    edge_seen: dict[ConnKey, int] = field(default_factory=dict)  # 4-tuple -> files (bits 1, 2)
    # per exchange of `done`: the packet its engine released it at (FINAL: at the end of input)
    # (the stitch takes range 0's release up to its end as it is: `replay.order`)
    emitted: list[int] = field(default_factory=list)
    # id(exchange) -> done entry, while running (not shipped)
    done_keys: dict[int, tuple[int, int, int, int, int, int, int, int]] = field(
        default_factory=dict)

    def edge(self, cid: int, key: ConnKey, pkt: int, syn: bool) -> None:
        self.conns[cid] = ConnEdge(key, pkt, syn)


# --------------------------------------------------------------------------- planning
def plan_ranges(paths: Sequence[str], n: int, range_bytes: int | None = None,
                bodies: bool = True, lead_us: float = 0.0) -> list[Range] | None:
    """See the module docstring (`bodies`: whether the ranges' work includes decoding the
    bodies, which weighs bytes more than packets; `lead_us`: the estimated CPU the other
    ranges' workers spend starting up, so range 0, run at once, gets that much more). Raises
    CaptureError when the file is not a capture."""
    if len(paths) != 1 or paths[0] == "-" or not os.path.isfile(paths[0]):
        return None
    path = paths[0]
    lay = Layout(size=os.path.getsize(path))
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            return None
        f.seek(0)
        probe_layout(lay, f)
        n = max(1, min(n, (lay.size - lay.data_start) // MIN_RANGE))
        if lay.format == "pcap":
            cuts = _pcap_cuts(path, lay, n, range_bytes, bodies, lead_us)
        else:
            span = range_bytes or -(-(lay.size - lay.data_start) // n)
            cuts = _pcapng_cuts(f, lay, span)
    if cuts is None or len(cuts) < 2:
        return None
    last_ts = max(ts for _s, _c, ts in cuts)
    out: list[Range] = []
    base = 0
    for i, (start, count, _ts) in enumerate(cuts):
        end = cuts[i + 1][0] if i + 1 < len(cuts) else lay.size
        stop = lay.size  # the overlap may go on to the end (a connection idle for long)
        out.append(Range(i, path, lay, start, end, stop, base, count, last_ts, i == len(cuts) - 1))
        base += count
    return out


RANK_BITS = 40  # plan_chain numbers file r's frame f as r << RANK_BITS | f (Spark's pointer)


Costs = tuple[array, array, array, float]  # per record: offset, cumulative cost, time; total


class WalkedHeaders(Protocol):
    """A classic pcap's record headers walked elsewhere (`kanalyze.parallel.pcap_slices`:
    by Spark tasks, chained exactly): what `walk_costs` makes of `_pcap_headers`' stream."""

    def costs(self, mult: int, bodies: bool, span: int | None) -> Costs | None: ...


def plan_chain(paths: Sequence[str], n: int, range_bytes: int | None = None,
               bodies: bool = True, ranks: Sequence[int] | None = None,
               walked: Mapping[str, WalkedHeaders] | None = None,
               walker: RangeWalks | None = None,
               merge_edges: bool = False) -> list[Range] | None:
    """A rotated capture set (`tcpdump -C/-G`, `editcap -c`), `paths` in capture order, cut
    into about `n` ranges of equal estimated CPU over all files (every file at least one):
    the ranges of one run over the files read one after the other, which is what one process
    reads (`read_captures` merges by time) when no file has a packet later than the next
    file's first. Packets are numbered `rank << RANK_BITS | frame` (file `paths[i]` has rank
    `ranks[i]`, by default i); each range's overlap reads on into the later files
    (`Range.then`). None when a file is not a regular uncompressed capture, is damaged or
    cannot be walked, or the files overlap in time (for a file this plan does not walk, see
    below: its run fails on damage, `chain_ordered` finds the overlap). `walked`: the record
    headers of some classic pcaps, already walked (the same stream this walk would read);
    `walker`: walks a pcapng's ranges elsewhere (`_pcapng_cuts`). Raises CaptureError when a
    file is not a capture.

    A local classic pcap that gets one range and is not the last file is not walked (its
    range is `UNCOUNTED`): a walk would only count its records, check them and date its last,
    which its run does as it reads them (`range_engine.run`, `chain_ordered`), and the walk
    was the driver's largest serial step before the tasks (0.09 of 0.3 s on the 1 GB bench
    set of 8 files; docs/spark.md). The last file is walked: its latest time is the run's.

    `merge_edges`: a local classic pcap whose latest time (walked, or read from its last
    records: `tail_latest`) is later than the next file's first packet has its last range
    merge the next file's leading packets (`Range.merges`, `head_before`) instead of the set
    being refused; the runs then show whether they agree (`chain_ordered`). Not for ranges
    whose exchanges must come out in one process's order (`--jobs N`): within such an edge
    the packet numbers do not follow the order the engine reads them in."""
    if not paths or any(p == "-" or not readable(p) for p in paths):
        return None
    sizes = [source_size(p) for p in paths]
    total = sum(sizes) or 1
    files: list[tuple[Layout, list[tuple[int, int, int]]]] = []
    guess: dict[int, int] = {}  # file -> its packets, estimated (not walked)
    for rank, (path, size) in enumerate(zip(paths, sizes, strict=True)):
        lay = Layout(size=size, rank=rank if ranks is None else ranks[rank])
        with open_source(path) as f:
            if f.read(2) == b"\x1f\x8b":
                return None
            f.seek(0)
            probe_layout(lay, f)
            k = max(1, min(round(n * size / total), (size - lay.data_start) // MIN_RANGE))
            if (k == 1 and range_bytes is None and rank < len(paths) - 1
                    and lay.format == "pcap" and lay.size > lay.data_start
                    and not is_remote(path) and path not in (walked or {})):
                files.append((lay, [(lay.data_start, UNCOUNTED, -1)]))
                guess[rank] = _packets_guess(f, lay)
                continue
            if lay.format == "pcap":
                cuts = _pcap_cuts(path, lay, k, range_bytes, bodies,
                                  walked=(walked or {}).get(path))
            else:
                cuts = _pcapng_cuts(f, lay, range_bytes or -(-(size - lay.data_start) // k),
                                    path, walker)
        if cuts is None:
            return None
        files.append((lay, cuts))
    merging: dict[int, int] = {}  # file -> its latest time, merged with the next file's head
    for at, ((lay, cuts), (nxt, _b)) in enumerate(zip(files, files[1:], strict=False)):
        if max(ts for _s, _c, ts in cuts[:-1] or [(0, 0, -1)]) > nxt.first_ts_ns:
            return None  # a range before the file's last overlaps the next file
        latest = cuts[-1][2]
        if latest < 0 and merge_edges:  # not walked: its last records tell (its run checks)
            latest = tail_latest(paths[at], lay, nxt.first_ts_ns)
        if latest <= nxt.first_ts_ns:
            continue  # in order (a file not walked has -1 here: `chain_ordered` checks its run)
        later = [f.first_ts_ns for f, _c in files[at + 2 :]]
        if not merge_edges or latest > min(later, default=latest) or any(
                f.format != "pcap" or is_remote(p) for f, p in ((lay, paths[at]),
                                                                (nxt, paths[at + 1]))):
            return None  # overlapping in time: one process interleaves them
        merging[at] = latest
    last_ts = max(ts for _lay, cuts in files for _s, _c, ts in cuts)
    heads = [Range(-1, p, lay, lay.data_start, lay.data_start, lay.size, lay.rank << RANK_BITS,
                   0, last_ts, False) for p, (lay, _c) in zip(paths, files, strict=True)]
    out: list[Range] = []
    for at, (path, (lay, cuts)) in enumerate(zip(paths, files, strict=True)):
        base = lay.rank << RANK_BITS
        for i, (start, count, _ts) in enumerate(cuts):
            end = cuts[i + 1][0] if i + 1 < len(cuts) else lay.size
            last = at == len(paths) - 1 and i == len(cuts) - 1
            out.append(Range(len(out), path, lay, start, end, lay.size, base, count, last_ts,
                             last, tuple(heads[at + 1:]), guess.get(at, count),
                             at in merging and i == len(cuts) - 1,
                             merging.get(at - 1, 0) if i == 0 else 0))
            base += count
    return out


GUESS_BYTES = 1 << 20  # the head of a file whose packets `_packets_guess` estimates


def _packets_guess(f, lay: Layout) -> int:  # noqa: ANN001
    """A pcap's packets estimated from the records in its first `GUESS_BYTES` (the order the
    ranges start in: a producer's file holds 4 times the packets of a consumer's of the same
    size, and costs 3 times as much CPU)."""
    f.seek(lay.data_start)
    head = f.read(GUESS_BYTES)
    unpack = struct.Struct(lay.endian + "I").unpack_from
    pos = n = 0
    while pos + 16 <= len(head):
        end = pos + 16 + unpack(head, pos + 8)[0]
        if end > len(head):
            break
        pos, n = end, n + 1
    if not n:
        return 1
    return max(1, round(n * (lay.size - lay.data_start) / pos))


TAIL_BYTES = 256 << 10  # the end of a file whose latest time `tail_latest` reads


def tail_latest(path: str, lay: Layout, after_ns: int) -> int:
    """The latest time of a classic pcap's last records, from the first record in its last
    `TAIL_BYTES` dated in the second of `after_ns` or the two after it (the next file's first
    packet: an earlier end is no overlap), found by its seconds field and checked by the
    records chaining from it exactly to the end of the file; -1 when there is none (a file
    whose end is later than that is refused as before). The file's latest as a rotation's last
    packets date it: a run that finds otherwise makes the runs disagree (`chain_ordered`).
    (The split walker's byte-by-byte sync took 28 ms a file on the 1 GB bench set.)"""
    if lay.format != "pcap" or is_remote(path) or lay.size <= lay.data_start:
        return -1
    start = max(lay.data_start, lay.size - TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        tail = f.read(lay.size - start)
    second = after_ns // 1_000_000_000
    found = []
    for sec in range(second, second + 3):
        pattern = struct.pack(lay.endian + "I", sec)
        at = tail.find(pattern)
        while at >= 0:
            found.append(at)
            at = tail.find(pattern, at + 1)
    unpack = struct.Struct(lay.endian + "IIII").unpack_from
    frac_max = 1_000_000_000 // lay.ns_mult
    for at in sorted(found):
        latest = -1
        while at + 16 <= len(tail):
            sec, frac, incl, orig = unpack(tail, at)
            if incl > orig or incl > MAX_RECORD or frac >= frac_max:
                break
            latest = max(latest, sec * 1_000_000_000 + frac * lay.ns_mult)
            at += 16 + incl
        if at == len(tail):
            return latest
    return -1


def chain_ordered(ranges: Sequence[Range], results: Sequence[RangeResult]) -> bool:
    """Whether the runs of a chain's `ranges` read its files as one process merges them: no
    file that `plan_chain` did not walk has a packet later than the next file's first
    (`plan_chain`'s check of the files it walked); where a range merged the next file's head
    (`Range.merges`), it read as many of its packets as the next file's first range left to
    it, and none later than a third file's first packet."""
    for k, (rng, res) in enumerate(zip(ranges, results, strict=True)):
        if rng.merges:
            if k + 1 >= len(results) or res.merged != results[k + 1].head_skipped \
                    or any(res.max_ts > t.layout.first_ts_ns for t in rng.then[1:]):
                return False
        elif not (rng.counted or not rng.then or res.max_ts <= rng.then[0].layout.first_ts_ns):
            return False
    return True


# the CPU cost model of a record (µs), to cut ranges of equal work: the engine per packet, and
# for bodies per packet carrying payload and per byte (kanalyze.parallel.plan's measurements)
HEADERS_ONLY = 66  # a record this long or shorter carries no TCP payload (Ethernet, IP, TCP)
# header-only work per payload byte: almost none (was 0.002, fitted on the two header-only
# ranges of the 250 MB capture: they took 0.33 and 0.21 s, the packet-heavy one longer)
HEADER_US_PER_BYTE = 0.0003


def _record_cost(incl: int, bodies: bool) -> float:
    cost = ENGINE_US_PER_PACKET
    if incl > HEADERS_ONLY:
        if bodies:
            cost += BODY_US_PER_DATA_PACKET + BODY_US_PER_BYTE * incl
        else:
            cost += HEADER_US_PER_BYTE * incl
    return cost


def _pcap_cuts(path: str, lay: Layout, n: int, span: int | None, bodies: bool,
               lead: float = 0.0, walked: WalkedHeaders | None = None,
               ) -> list[tuple[int, int, int]] | None:
    """(start, packets, latest time) per range, every record header walked (exact cuts):
    `n` ranges of about equal estimated CPU, or ranges of `span` bytes. `walked`: the walk,
    when it was done elsewhere (`WalkedHeaders`)."""
    if lay.size <= lay.data_start:
        return None
    if walked is None:
        got = walk_costs(_pcap_headers(path, lay), lay.ns_mult, bodies, span)
    else:
        got = walked.costs(lay.ns_mult, bodies, span)
    if got is None or not got[0]:
        return None  # damaged (one process reports it), or no record
    offs, costs, times, total = got
    if span is None:  # range 0 takes `lead` more than each other range
        lead = min(lead, total / n / 2)
        first = (total + (n - 1) * lead) / n
        targets = [first + k * (first - lead) for k in range(n - 1)]
    else:
        targets = [k * float(span) for k in range(1, int(total // span) + 1)]
    firsts = [0]
    for target in targets:
        i = bisect.bisect_left(costs, target, firsts[-1] + 1)
        if i < len(offs) and i > firsts[-1]:
            firsts.append(i)
    ends = [*firsts[1:], len(offs)]
    return [(offs[a], b - a, max(times[a:b])) for a, b in zip(firsts, ends, strict=True)]


def walk_costs(headers: Iterable[tuple[int, int, int, int]], mult: int, bodies: bool,
               span: int | None) -> Costs | None:
    """The cut's inputs from a header walk (`_pcap_headers`'s stream): per record its offset,
    the cost of the records up to it (`_record_cost`, or bytes with a `span`) and its time;
    and the total. None at a damaged record."""
    offs, costs, times = array("q"), array("d"), array("q")
    total = 0.0
    for pos, sec, frac, incl in headers:
        if incl < 0:
            return None
        offs.append(pos)
        total += _record_cost(incl, bodies) if span is None else 16 + incl
        costs.append(total)
        times.append(sec * 1_000_000_000 + frac * mult)
    return offs, costs, times, total


def _pcap_headers(path: str, lay: Layout) -> Iterator[tuple[int, int, int, int]]:
    """(offset, seconds, fraction, captured length) per record, from the first record to the
    end; a damaged record ends it with a length of -1. Local files through mmap; a remote one
    read in blocks through its stream (`kanalyze.capture.source`), its bodies skipped."""
    unpack = struct.Struct(lay.endian + "IIII").unpack_from
    size = lay.size
    if not is_remote(path):
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            pos = dropped = lay.data_start
            while pos < size:
                if size - pos < 16:
                    yield pos, 0, 0, -1
                    return
                sec, frac, incl, _o = unpack(m, pos)
                if incl > MAX_RECORD or pos + 16 + incl > size:
                    yield pos, 0, 0, -1
                    return
                if pos - dropped > UNMAP_EVERY:
                    dropped = _unmap(m, dropped, pos)
                yield pos, sec, frac, incl
                pos += 16 + incl
        finally:
            m.close()
        return
    with open_source(path) as f:
        buf, at, pos = b"", lay.data_start, lay.data_start  # buf[0] is at file offset `at`
        while pos < size:
            if pos + 16 > at + len(buf):
                keep = buf[pos - at :] if pos < at + len(buf) else b""
                f.seek(pos + len(keep))
                buf, at = keep + f.read(VIEW_BLOCK), pos
                if len(buf) < 16:
                    yield pos, 0, 0, -1
                    return
            sec, frac, incl, _o = unpack(buf, pos - at)
            if incl > MAX_RECORD or pos + 16 + incl > size:
                yield pos, 0, 0, -1
                return
            yield pos, sec, frac, incl
            pos += 16 + incl


RangeWalks = Callable[[str, Layout, Sequence[tuple[int, int]]],
                      Sequence[tuple[int, int, bool] | None] | None]


def _pcapng_cuts(f, lay: Layout, span: int, path: str = "",  # noqa: ANN001
                 walker: RangeWalks | None = None) -> list[tuple[int, int, int]] | None:
    """Sync points every `span` bytes, each range walked to count its packets and to check
    that it ends exactly where the next begins. `walker`: the ranges' walks done elsewhere
    (`walk_pcapng_range` in Spark tasks: `kanalyze.spark.remote_walk`), per range its result
    or None (walked here); None: every range walked here."""
    starts = [lay.data_start]
    x = lay.data_start + span
    while x < lay.size:
        s = sync(f, lay, x)
        if s >= lay.size:
            break
        if s > starts[-1]:
            starts.append(s)
        x = max(x + span, s + 1)
    pairs = list(zip(starts, [*starts[1:], lay.size], strict=True))
    done = walker(path, lay, pairs) if walker is not None else None
    cuts = []
    for k, (s, e) in enumerate(pairs):
        got = done[k] if done is not None else None
        count, latest, ok = walk_pcapng_range(f, lay, s, e) if got is None else got
        if not ok:
            return None
        cuts.append((s, count, latest))
    return cuts


def walk_pcapng_range(f, lay: Layout, start: int, end: int) -> tuple[int, int, bool]:  # noqa: ANN001
    """(packets, latest time, whether the range is cut as planned: no error, no section or
    interface inside it, and it ends exactly at `end`) of a pcapng range from a sync point."""
    res = WalkResult()
    latest = 0
    for pkt in iter_range(f, lay, start, end, res):
        latest = max(latest, pkt.ts_ns)
    return res.count, latest, not (res.error or res.whole_file_needed or res.stop != end)


def read_range(rng: Range, until: int | None = None, start: int | None = None,
               base: int | None = None, views: bool = False) -> Iterator[Packet]:
    """The packets of [start, until) (by default the range's own), numbered as one process
    numbers them; with `views`, a pcap's packet data are views of the read blocks, as the
    one-process reader's (`_pcap_views`)."""
    first = rng.start if start is None else start
    no = rng.base if base is None else base
    if views and rng.layout.format == "pcap":
        yield from _pcap_views(rng, first, until or rng.end, no)
        return
    res = WalkResult()
    with open_source(rng.path) as f:
        for pkt in iter_range(f, rng.layout, first, until or rng.end, res, no):
            pkt.no = pkt.file_no
            yield pkt
    if res.error:
        raise CaptureError(res.error)


VIEW_BLOCK = 4 << 20


def _pcap_views(rng: Range, start: int, end: int, no: int) -> Iterator[Packet]:
    """The pcap records starting in [start, end), as the split walker reads them (the same
    errors), in the one-process reader's loop (`capture.pcap.read_pcap`): blocks of
    `VIEW_BLOCK` bytes, each packet's data a view of its block (a block lives while a view of
    it does), a record cut by a block's end completed on its own. The general walker took
    0.1-0.2 s more per 100 MB (two reads and a copy per record); a loop with two header reads
    per record and a block joined to each leftover, 13 of 36 us per packet (profiled) of the
    second range's engine on the benchmark capture."""
    lay = rng.layout
    unpack = struct.Struct(lay.endian + "IIII").unpack_from
    mult, lt, rank = lay.ns_mult, lay.linktype, lay.rank
    buf = b""
    mv = memoryview(buf)
    n = pos = 0
    base = start  # the file offset of buf[0]
    with open_source(rng.path) as f:
        f.seek(start)
        while base + pos < end:
            if n - pos < 16:
                need = 16
            else:
                sec, frac, incl, _orig = unpack(buf, pos)
                if incl > MAX_RECORD:
                    raise CaptureError(f"offset {base + pos}: record claims {incl} bytes")
                stop = pos + 16 + incl
                if stop <= n:
                    no += 1
                    yield Packet(no, sec * 1_000_000_000 + frac * mult, lt,
                                 mv[pos + 16 : stop], rank, no)
                    pos = stop
                    continue
                need = 16 + incl
            # the block is used up: a new one, or the cut record's start and its rest
            base += pos
            want = need - (n - pos) if n > pos else max(VIEW_BLOCK, need)
            more = f.read(want)
            if len(more) < want and n - pos + len(more) < need:
                if need > 16 or not rng.counted and n - pos + len(more):
                    # (a file the plan did not walk: the walk refuses a partial header too)
                    raise CaptureError(f"offset {base}: truncated record")
                return  # a partial record header at the end of the file is ignored
            buf = buf[pos:] + more if n > pos else more
            mv = memoryview(buf)
            n = len(buf)
            pos = 0


# the mapped walks (plan, overlap) drop the pages behind them from this process every 32 MB:
# a walk of every record header maps in nearly every page of the file, which counted in the
# peak RSS (270 MB for the plan of the 250 MB benchmark capture; page cache, but counted)
UNMAP_EVERY = 32 << 20


def _unmap(m: mmap.mmap, start: int, pos: int) -> int:
    """Drop the mapped pages of [start, pos) from this process (they stay in the page cache);
    returns where the next drop starts."""
    lo = start & ~(mmap.PAGESIZE - 1)
    hi = pos & ~(mmap.PAGESIZE - 1)
    if hi > lo and hasattr(mmap, "MADV_DONTNEED"):
        m.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    return hi


class Wanted:
    """The connections the overlap still follows, as a search for their TCP port pairs (a
    pre-filter: a packet it finds is decoded and checked; one it misses is not theirs)."""

    HEAD = 512  # bytes of a record searched: link, IP (with options) and TCP headers

    def __init__(self) -> None:
        self.pattern: re.Pattern[bytes] | None = None
        self.pairs: frozenset[bytes] = frozenset()  # (source port, destination port), raw

    def follow(self, keys: Collection[ConnKey]) -> None:
        pairs = set()
        for _a, pa, _b, pb in keys:
            pairs.add(pa.to_bytes(2, "big") + pb.to_bytes(2, "big"))
            pairs.add(pb.to_bytes(2, "big") + pa.to_bytes(2, "big"))
        self.pairs = frozenset(pairs)
        self.pattern = re.compile(b"|".join(map(re.escape, sorted(pairs)))) if pairs else None


# untagged Ethernet, IPv4: (ethertype, version and header length, flags and fragment offset,
# protocol, TCP source and destination port where the header has no options)
ETHERNET = 1
_ETH_IP4_TCP = struct.Struct(">12xHB5xHxB10x4s")


def read_overlap(rng: Range, wanted: Wanted) -> Iterator[Packet]:
    """The packets after the range that `wanted` may want, numbered on from its last, then
    those of the files that follow it (`Range.then`); stops when it wants nothing more."""
    yield from _overlap_in(rng, wanted)
    for nxt in rng.then:
        if wanted.pattern is None:
            return
        yield from _overlap_in(nxt, wanted)


def _overlap_in(rng: Range, wanted: Wanted) -> Iterator[Packet]:
    """`read_overlap` within the range's own file. A classic pcap is walked through mmap (the
    others skipped without a copy); a remote pcap through the block reader, a pcapng through
    the split walker."""
    if is_remote(rng.path) and rng.layout.format == "pcap":
        for pkt in _pcap_views(rng, rng.end, rng.stop, rng.base + rng.count):
            if wanted.pattern is None:
                return
            if wanted.pattern.search(pkt.data, 0, Wanted.HEAD):
                pkt.file_index = 0  # as the mmap walk numbers it
                yield pkt
        return
    if rng.layout.format != "pcap":
        for pkt in read_range(rng, rng.stop, rng.end, rng.base + rng.count):
            if wanted.pattern is None:
                return
            if wanted.pattern.search(pkt.data, 0, Wanted.HEAD):
                yield pkt
        return
    lay = rng.layout
    unpack = struct.Struct(lay.endian + "IIII").unpack_from
    head = _ETH_IP4_TCP.unpack_from
    eth = lay.linktype == ETHERNET
    with open(rng.path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        pos, no, size = rng.end, rng.base + rng.count, len(m)
        dropped = pos
        while pos < size and wanted.pattern is not None:
            if size - pos < 16:
                raise CaptureError(f"offset {pos}: truncated record")
            sec, frac, incl, _o = unpack(m, pos)
            end = pos + 16 + incl
            if incl > MAX_RECORD or end > size:
                raise CaptureError(f"offset {pos}: record claims {incl} bytes")
            no += 1
            if pos - dropped > UNMAP_EVERY:
                dropped = _unmap(m, dropped, pos)
            if eth and incl >= 54:
                # the common case read as `flows.decode_segment` reads it: its TCP ports are
                # these, so they alone decide (a search of every record's head for the port
                # pairs, 2 us a record, took half of the overlap that follows a connection
                # to the end of the capture)
                etype, vihl, frag, proto, ports = head(m, pos + 16)
                if etype == 0x0800 and vihl == 0x45 and proto == 6 and not frag & 0x3FFF:
                    hit = ports in wanted.pairs
                else:
                    hit = bool(wanted.pattern.search(m, pos + 16, min(end, pos + 16 + Wanted.HEAD)))
            else:
                hit = bool(wanted.pattern.search(m, pos + 16, min(end, pos + 16 + Wanted.HEAD)))
            if hit:
                ts = sec * 1_000_000_000 + frac * lay.ns_mult
                yield Packet(no, ts, lay.linktype, m[pos + 16 : end], 0, no)
            pos = end
    finally:
        m.close()


__all__ = ["RANK_BITS", "UNCOUNTED", "ConnEdge", "Layout", "Mark", "MsgKey", "Range",
           "RangeResult", "WalkedHeaders", "Wanted", "chain_ordered", "plan_chain", "plan_ranges",
           "read_overlap", "read_range", "walk_costs", "walk_pcapng_range"]
