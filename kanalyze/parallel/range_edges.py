"""The edge of two rotated files that overlap in time (`Range.merges`): the earlier file's last
range reads the later file's leading packets merged with its own by time, as one process's
merge of the files does (`capture.files.read_captures`: the packet with the earlier time
first, the earlier file's on a tie), so its engine sees the packets in one process's order.

The packets keep their numbers (file rank and frame), so within the edge the numbers do not
follow the order the engine reads them in. The stitch orders a range's notes by packet number,
so the run marks itself unstitchable (`RangeResult.coupled`) where that order could differ
from the engine's: an engine note (an exchange, a wait, a release, a new connection) at one
of its own file's packets after one at a merged packet; a connection that sent (payload, SYN,
FIN, RST) on both sides of the edge. After the stitch, `edge_conflict` refuses what only the
stitch shows: a connection handed over inside the edge, followed through it by an earlier
range, or started in it with packets on both sides. What tcpdump leaves at a
rotation is a microsecond's step back of its clock: an ACK dated before the data segment read
ahead of it, say (which passes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from kanalyze.capture.packets import MAX_RECORD, Packet
from kanalyze.flows import FIN, RST, SYN, FlowStats, decode_segment
from kanalyze.parallel.range_plan import INF, ConnKey, Range, RangeResult, conn_key

NO_EDGE = 1 << 62  # a time no packet has: nothing to merge


class Part(Protocol):
    """A run's part of one connection as the stitch gives it (`replay.Own`, which imports the
    engine that imports this module)."""

    lo: int
    hi: int
    root: tuple[int, int]


class Noting(Protocol):
    """What the merge needs of the range's engine."""

    boundary: int
    pendings: int


def head_packets(nxt: Range) -> Iterator[tuple[Packet, int]]:
    """The records of the file `nxt` starts (a local classic pcap) from its first, numbered
    as its own run numbers them, each with the offset after it; ends at the first damaged or
    cut record, or where the file cannot be read (the file's own run reports it)."""
    lay = nxt.layout
    unpack = struct.Struct(lay.endian + "IIII").unpack
    no = nxt.base + nxt.count
    try:
        f = open(nxt.path, "rb")  # noqa: SIM115 - closed below, also when the reader stops
    except OSError:
        return
    try:
        f.seek(nxt.end)
        pos = nxt.end
        while True:
            head = f.read(16)
            if len(head) < 16:
                return
            sec, frac, incl, _o = unpack(head)
            data = f.read(incl) if incl <= MAX_RECORD else b""
            if len(data) < incl or incl > MAX_RECORD:
                return
            no += 1
            pos += 16 + incl
            yield (Packet(no, sec * 1_000_000_000 + frac * lay.ns_mult, lay.linktype, data,
                          lay.rank, no), pos)
    except OSError:
        return
    finally:
        f.close()


class EdgeMerge:
    """The next file's head fed into a merging range's engine, and the checks above."""

    def __init__(self, rng: Range, eng: Noting, res: RangeResult,
                 take: Callable[[Packet, bool], None]) -> None:
        self.nxt = rng.then[0]
        self.eng, self.res, self.take = eng, res, take
        self.heads = head_packets(self.nxt)
        self.head = next(self.heads, None)  # the next file's next packet, the offset after it
        self.offset = self.nxt.end  # after the last merged record
        self.last = 0  # number of the last merged packet
        self.foreign_notes = False
        # per 4-tuple, the files its packets in the edge came from (bits: 1 own, 2 the next:
        # `RangeResult.edge_seen`), and of those that sent (payload, SYN, FIN or RST)
        self.seen = res.edge_seen
        self.sent: dict[ConnKey, int] = {}

    @property
    def due(self) -> int:
        """The time of the next file's next packet (`NO_EDGE`: none)."""
        return NO_EDGE if self.head is None else self.head[0].ts_ns

    def before(self, ts: int) -> int:
        """Feed the next file's packets earlier than `ts` (a packet of the range's own file
        comes next); returns `due`."""
        while self.head is not None and self.head[0].ts_ns < ts:
            pkt, self.offset = self.head
            self.head = next(self.heads, None)
            self.last = pkt.no
            self.res.merged += 1
            if self.eng.boundary < pkt.no:
                self.eng.boundary = pkt.no  # still the range proper
            self._feed(pkt, True)
        return self.due

    def own(self, pkt: Packet) -> None:
        """A packet of the range's own file read after a merged one."""
        if not self.res.merged_from:
            self.res.merged_from = pkt.no
        self._feed(pkt, False)

    def _notes(self) -> int:
        res = self.res
        return len(res.done) + len(res.waits) + len(res.emitted) + len(res.conns) \
            + self.eng.pendings

    def _feed(self, pkt: Packet, foreign: bool) -> None:
        before = self._notes()
        self.take(pkt, foreign)
        noted = self._notes() != before
        if foreign:
            self.foreign_notes = self.foreign_notes or noted
        elif noted and self.foreign_notes:
            self._refuse("an engine note at a packet read after a later file's")
        seg = decode_segment(pkt.linktype, pkt.data, FlowStats())
        if seg is None:
            return
        key = conn_key((seg.src, seg.sport, seg.dst, seg.dport))
        bit = 2 if foreign else 1
        self.seen[key] = self.seen.get(key, 0) | bit
        if len(seg.payload) or seg.flags & (SYN | FIN | RST):
            if (self.sent.get(key, 0) | bit) == 3:
                self._refuse("a connection that sent on both sides of the edge")
            self.sent[key] = self.sent.get(key, 0) | bit

    def _refuse(self, why: str) -> None:
        msg = f"the merged edge of two files: {why}"
        if msg not in self.res.coupled:
            self.res.coupled.append(msg)

    def overlap(self, rng: Range) -> Range:
        """`rng` with its overlap starting after the merged packets of the next file."""
        if not self.res.merged:
            return rng
        nxt = replace(self.nxt, end=self.offset, count=self.last - self.nxt.base)
        return replace(rng, then=(nxt, *rng.then[1:]))


def edge_conflict(results: Sequence[RangeResult], own: Sequence[Mapping[int, Part]]
                  ) -> str | None:
    """Why the stitch (`own`: each range's part of each connection) cannot take a merging
    range's edge, where the packet numbers do not follow its engine's order, or None:
    a connection handed over to it inside the edge; one an earlier range followed through
    the edge (its overlap reads the files one after the other, not merged); one that starts
    in the edge (the connections table gives a 4-tuple's packets to its connections by packet
    number) with packets from both files there."""
    for r, res in enumerate(results):
        if not res.merged or not res.merged_from:
            continue
        lo_edge, hi_edge = res.merged_from, res.end_pkt  # every packet of the edge, numbered
        for lid, o in own[r].items():
            if lo_edge <= o.lo <= hi_edge:
                return "a connection handed over inside the merged edge of two files"
            key = res.conns[lid].key
            if o.root == (r, lid) and lo_edge <= res.conns[lid].opened <= hi_edge \
                    and res.edge_seen.get(key) == 3:
                return ("a connection that starts in the merged edge of two files, with "
                        "packets from both")
        for p in range(r):
            for lid, o in own[p].items():
                e = results[p].conns[lid]
                # where its view ends: its handover, or its close when it ran to its end
                last = o.hi if o.hi != INF or e.closed is None else e.closed
                if last >= lo_edge and o.lo < hi_edge and e.key in res.edge_seen:
                    return ("a connection an earlier range followed through the merged edge "
                            "of two files (in file order)")
    return None
