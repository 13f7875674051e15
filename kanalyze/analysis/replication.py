"""Replication progress per partition: leader LEO, HW, follower LEOs and HWs, inferred ISR.

Rules (../shared/notes/replication-and-delivery.md), applied to what the wire shows:

* leader LEO: + record count when a Produce request arrives (taken back if the response
  reports an error or a deduplicated batch); at least base offset + count from a Produce
  response; at least the end of any batch the leader returns in a Fetch response, any
  follower's fetch offset, and the HW;
* a follower (Fetch with `replica_id` >= 0, or `replica_state.replica_id` from v15) sets
  its remote LEO to its `fetch_offset`; its own LEO is that offset, then the end of what the
  response returned; its HW = min(its LEO, the HW in the response);
* the leader's HW, when follower traffic is seen, = max(HW, min(leader LEO, remote LEO of every
  in-sync follower)) after a produce or a follower fetch; any HW a Fetch response reports is
  taken as is (and a lower one than reported before is an HW regression);
* ISR: a follower is in sync when first seen; it is out once the leader reports an HW above its
  remote LEO (the leader stopped waiting for it); it is back once it fetches at or above the HW;
* an acks=all Produce response means the HW passed the batch.

One timeline entry per wire message that touches the partition, in wire order, capped
(the newest `cap` entries are kept).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dissectors import ApiKey
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.summary import percentile
from kanalyze.analysis.wire import (
    batch_count,
    batch_end,
    batches,
    fetch_replica,
    fetch_requests,
    fetch_responses,
    produce_partitions,
    produce_results,
    topic_of,
    tp,
)


@dataclass(slots=True)
class Follower:
    leo: int | None = None
    remote_leo: int | None = None
    hw: int | None = None
    caught_up_ts: int | None = None  # last time its fetch offset reached the leader LEO
    last_frame: int | None = None

    def to_json(self, leader_leo: int | None, now: int) -> dict[str, object]:
        lag = None if leader_leo is None or self.leo is None else max(0, leader_leo - self.leo)
        lag_ms = None
        if self.caught_up_ts is not None:
            lag_ms = 0.0 if lag == 0 else round((now - self.caught_up_ts) / 1e6, 3)
        return {"leo": self.leo, "remote_leo": self.remote_leo, "hw": self.hw, "lag_records": lag, "lag_ms": lag_ms}


@dataclass(slots=True)
class Pending:
    """A produced batch waiting for the HW: its offsets (tentative until the response)."""

    start: int | None
    end: int | None
    count: int
    req_ts: int
    frame: int
    acks: int | None
    first_copy_ts: int | None = None
    hw_ts: int | None = None
    answered: bool = False


@dataclass
class PartitionState:
    topic: str
    partition: int
    cap: int
    leo: int | None = None
    hw: int | None = None
    reported_hw: int | None = None
    reported_hw_frame: int | None = None
    log_start: int | None = None
    lso: int | None = None
    leader_epoch: int | None = None
    followers: dict[int, Follower] = field(default_factory=dict)
    isr: set[int] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    timeline: deque = field(default_factory=deque)
    entries: int = 0
    tentative: dict[int, tuple[int, int | None, list[tuple[int, int, int]]]] = field(default_factory=dict)
    acked_seq: dict[tuple[int, int, int], int] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    hw_latency_ms: list[float] = field(default_factory=list)
    acks_all_total_ms: list[float] = field(default_factory=list)
    acks_all_append_ms: list[float] = field(default_factory=list)
    acks_all_replication_ms: list[float] = field(default_factory=list)
    hw_changed_ts: int | None = None
    leo_changed_ts: int | None = None
    behind_since: int | None = None
    stalled: bool = False

    def __post_init__(self) -> None:
        self.timeline = deque(maxlen=self.cap)

    # ------------------------------------------------------------------ helpers
    def set_leo(self, value: int | None, ts: int) -> None:
        if value is None:
            return
        if self.leo is None or value > self.leo:
            self.leo = value
            self.leo_changed_ts = ts

    def set_hw(self, value: int, ts: int, frame: int) -> None:
        if self.hw != value:
            self.hw = value
            self.hw_changed_ts = ts
            self.stalled = False
        for p in self.pending:
            if p.hw_ts is None and p.end is not None and p.end <= value:
                p.hw_ts = ts
                self.hw_latency_ms.append((ts - p.req_ts) / 1e6)
        self.pending = [p for p in self.pending if not (p.hw_ts is not None and (p.answered or p.acks != -1))]
        if len(self.pending) > 10_000:
            del self.pending[: len(self.pending) - 10_000]

    def maybe_advance_hw(self, ts: int, frame: int) -> None:
        if not self.followers or self.leo is None:
            return
        remotes = [self.followers[f].remote_leo for f in self.isr]
        if any(r is None for r in remotes):
            return
        cand = min([self.leo, *remotes])  # type: ignore[list-item]
        if self.hw is None or cand > self.hw:
            self.set_hw(cand, ts, frame)

    def entry(self, ev: Event, event: str, **extra: object) -> None:
        self.entries += 1
        now = ev.ts
        self.timeline.append({
            "frame": ev.frame,
            "ts": ev.ts_s,
            "event": event,
            "leader_leo": self.leo,
            "high_watermark": self.hw,
            "log_start_offset": self.log_start,
            "last_stable_offset": self.lso,
            "followers": {str(f): st.to_json(self.leo, now) for f, st in sorted(self.followers.items())},
            "isr": sorted(self.isr),
            **extra,
        })


def _stats(values: list[float]) -> dict[str, object]:
    v = sorted(values)
    return {
        "count": len(v),
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "p99": percentile(v, 99),
        "max": v[-1] if v else None,
    }


class ReplicationAnalyzer:
    """Feeds on Produce, Fetch and OffsetForLeaderEpoch events; one `PartitionState` each."""

    def __init__(self, findings: Findings, cap: int = 5000, stall_ms: float = 10_000.0) -> None:
        self.findings = findings
        self.cap = cap
        self.stall_ns = int(stall_ms * 1e6)
        self.parts: dict[tuple[str, int], PartitionState] = {}

    def part(self, topic: str, partition: int) -> PartitionState:
        key = (topic, partition)
        st = self.parts.get(key)
        if st is None:
            st = self.parts[key] = PartitionState(topic, partition, self.cap)
        return st

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    # ------------------------------------------------------------------ produce
    def _produce_request(self, ev: Event) -> None:
        acks = ev.ex.acks
        for topic, partition, bs in produce_partitions(ev.body):
            st = self.part(topic, partition)
            st.sources.add("produce_requests")
            count = 0
            seqs: list[tuple[int, int, int]] = []
            for b in bs:
                n = batch_count(b)
                pid, epoch, seq = b.get("producer_id", -1), b.get("producer_epoch", -1), b.get("base_sequence", -1)
                if isinstance(pid, int) and pid >= 0 and (pid, epoch, seq) in st.acked_seq:
                    continue  # a resent batch the leader already has: deduplicated, not appended
                count += n
                seqs.append((pid, epoch, seq))
            before = st.leo
            if st.leo is not None and count:
                st.set_leo(st.leo + count, ev.ts)
            st.tentative[id(ev.bodies)] = (count, before, seqs)
            if count:
                st.pending.append(Pending(before, None if before is None else before + count, count, ev.ts, ev.frame, acks))
            st.maybe_advance_hw(ev.ts, ev.frame)
            self._check_stall(st, ev)
            st.entry(ev, "produce")

    def _produce_response(self, ev: Event) -> None:
        for topic, partition, r in produce_results(ev.body):
            st = self.part(topic, partition)
            st.sources.add("produce_acks")
            count, before, seqs = st.tentative.pop(id(ev.bodies), (0, None, []))
            err, base = r.get("error_code", 0), r.get("base_offset", -1)
            if before is not None and count and (err or (isinstance(base, int) and base >= 0 and base + count <= before)):
                st.leo = (st.leo or 0) - count  # rejected or deduplicated: the leader did not append
            pend = next((p for p in st.pending if p.frame == (ev.ex.request.pdu.last_pkt if ev.ex.request else -1)), None)
            if not err and isinstance(base, int) and base >= 0 and count:
                st.set_leo(base + count, ev.ts)
                for s in seqs:
                    if s[0] >= 0:
                        st.acked_seq[s] = base
                if len(st.acked_seq) > 4096:
                    for k in list(st.acked_seq)[:1024]:
                        del st.acked_seq[k]
                if pend is not None:
                    pend.start, pend.end = base, base + count
            ls = r.get("log_start_offset")
            if isinstance(ls, int) and ls >= 0:
                st.log_start = ls
            if pend is not None:
                pend.answered = True
                if err:
                    st.pending.remove(pend)
                elif ev.ex.acks == -1 and ev.ex.latency_ns is not None:
                    st.acks_all_total_ms.append(ev.ex.latency_ns / 1e6)
                    if pend.first_copy_ts is not None:
                        st.acks_all_append_ms.append((pend.first_copy_ts - pend.req_ts) / 1e6)
                        st.acks_all_replication_ms.append((ev.ts - pend.first_copy_ts) / 1e6)
            if not err and ev.ex.acks == -1 and pend is not None and pend.end is not None and (st.hw is None or st.hw < pend.end):
                st.set_hw(pend.end, ev.ts, ev.frame)  # acks=all answered: the HW passed the batch
            elif pend is not None and pend.hw_ts is not None:
                st.pending.remove(pend)
            self._check_stall(st, ev)
            st.entry(ev, "produce_response")

    # ------------------------------------------------------------------ fetch
    def _fetch_request(self, ev: Event) -> None:
        req = ev.body
        replica = fetch_replica(req)
        for topic, partition, p in fetch_requests(req):
            st = self.part(topic, partition)
            epoch = p.get("current_leader_epoch")
            if isinstance(epoch, int) and epoch >= 0:
                if st.leader_epoch is not None and epoch > st.leader_epoch:
                    self.findings.add("info", "leader_epoch_change",
                                      f"{tp(topic, partition)}: leader epoch {st.leader_epoch} -> {epoch}",
                                      [ev.frame], ev.ts_s, topic=topic, partition=partition,
                                      old_epoch=st.leader_epoch, new_epoch=epoch)
                if st.leader_epoch is None or epoch > st.leader_epoch:
                    st.leader_epoch = epoch
            if replica < 0:
                continue
            off = p.get("fetch_offset")
            if not isinstance(off, int) or off < 0:
                continue
            st.sources.add("follower_fetch")
            f = st.followers.get(replica)
            if f is None:
                f = st.followers[replica] = Follower()
                st.isr.add(replica)
            elif f.leo is not None and off < f.leo:
                self.findings.add("warning", "follower_truncation",
                                  f"{tp(topic, partition)}: follower {replica} fetches from {off}, below its "
                                  f"position {f.leo} (truncated its log)",
                                  [x for x in (f.last_frame, ev.frame) if x is not None], ev.ts_s,
                                  topic=topic, partition=partition, replica=replica, previous=f.leo, offset=off)
            f.remote_leo = off
            f.leo = off
            f.last_frame = ev.frame
            if f.hw is not None:
                f.hw = min(f.hw, off)
            elif off == 0:
                f.hw = 0
            st.set_leo(off, ev.ts)
            if st.leo is not None and off >= st.leo:
                f.caught_up_ts = ev.ts
            if replica not in st.isr and st.hw is not None and off >= st.hw:
                st.isr.add(replica)
                self.findings.add("info", "isr_expand",
                                  f"{tp(topic, partition)}: follower {replica} caught up to the HW {st.hw} "
                                  "and rejoins the ISR", [ev.frame], ev.ts_s,
                                  topic=topic, partition=partition, replica=replica)
            st.maybe_advance_hw(ev.ts, ev.frame)
            self._check_stall(st, ev)
            st.entry(ev, "follower_fetch", replica=replica)

    def _fetch_response(self, ev: Event) -> None:
        replica = fetch_replica(ev.bodies.request) if ev.ex.request is not None else -1
        for topic, partition, p in fetch_responses(ev.body):
            if p.get("error_code", 0):
                continue
            st = self.part(topic, partition)
            st.sources.add("follower_fetch_responses" if replica >= 0 else "consumer_fetch_responses")
            hw = p.get("high_watermark")
            bs = batches(p.get("records"))
            end = max((e for e in (batch_end(b) for b in bs) if e is not None), default=None)
            st.set_leo(end, ev.ts)
            if isinstance(hw, int) and hw >= 0:
                if st.reported_hw is not None and hw < st.reported_hw:
                    self.findings.add("warning", "hw_regression",
                                      f"{tp(topic, partition)}: high watermark went back from {st.reported_hw} to {hw}",
                                      [x for x in (st.reported_hw_frame, ev.frame) if x is not None], ev.ts_s,
                                      topic=topic, partition=partition, previous=st.reported_hw, high_watermark=hw)
                st.reported_hw, st.reported_hw_frame = hw, ev.frame
                st.set_hw(hw, ev.ts, ev.frame)
                st.set_leo(hw, ev.ts)
                for fid in sorted(st.isr):
                    r = st.followers[fid].remote_leo
                    if r is not None and r < hw:
                        st.isr.discard(fid)
                        self.findings.add("warning", "isr_shrink",
                                          f"{tp(topic, partition)}: HW {hw} passed follower {fid} at {r}: "
                                          "it is out of the ISR", [ev.frame], ev.ts_s,
                                          topic=topic, partition=partition, replica=fid)
            for key, attr in (("log_start_offset", "log_start"), ("last_stable_offset", "lso")):
                v = p.get(key)
                if isinstance(v, int) and v >= 0:
                    setattr(st, attr, v)
            if replica >= 0:
                f = st.followers.get(replica)
                if f is not None:
                    if end is not None and (f.leo is None or end > f.leo):
                        f.leo = end
                    if st.hw is not None and f.leo is not None:
                        f.hw = min(f.leo, st.hw)
                if end is not None:
                    for pend in st.pending:
                        if pend.first_copy_ts is None and pend.start is not None and end > pend.start:
                            pend.first_copy_ts = ev.ts
            self._check_stall(st, ev)
            st.entry(ev, "follower_fetch_response" if replica >= 0 else "fetch_response",
                     **({"replica": replica} if replica >= 0 else {}))

    def _epoch_response(self, ev: Event) -> None:
        replica = (ev.bodies.request or {}).get("replica_id", -1) if ev.ex.request is not None else -1
        for t in (ev.body or {}).get("topics") or []:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                if p.get("error_code", 0):
                    continue
                end, epoch = p.get("end_offset"), p.get("leader_epoch")
                self.findings.add("info", "epoch_end_offset",
                                  f"{tp(topic, p.get('partition', -1))}: epoch {epoch} ends at offset {end} "
                                  "(a follower above it truncates there)",
                                  [ev.frame], ev.ts_s, topic=topic, partition=p.get("partition", -1),
                                  leader_epoch=epoch, end_offset=end, replica=replica)

    def _check_stall(self, st: PartitionState, ev: Event) -> None:
        """HW behind the LEO and not moving for `stall_ms` (a moving HW restarts the clock)."""
        if st.hw is None or st.leo is None or st.leo <= st.hw:
            st.behind_since = None
            st.stalled = False
            return
        since = ev.ts if st.behind_since is None else st.behind_since
        if st.hw_changed_ts is not None and st.hw_changed_ts > since:
            since = st.hw_changed_ts
        st.behind_since = since
        if not st.stalled and ev.ts - since > self.stall_ns:
            st.stalled = True
            self.findings.add("warning", "hw_stalled",
                              f"{tp(st.topic, st.partition)}: HW stuck at {st.hw} for {(ev.ts - since) / 1e9:.1f}s "
                              f"while the LEO is {st.leo}", [ev.frame], ev.ts_s, topic=st.topic,
                              partition=st.partition, high_watermark=st.hw, leader_leo=st.leo)

    # ------------------------------------------------------------------ output
    def to_json(self) -> list[dict[str, object]]:
        out = []
        for (topic, partition), st in sorted(self.parts.items()):
            if not st.entries:
                continue
            tl = list(st.timeline)
            final = {k: v for k, v in tl[-1].items() if k not in ("event", "replica")} if tl else None
            out.append({
                "topic": topic,
                "partition": partition,
                "sources": sorted(st.sources),
                "leader_epoch": st.leader_epoch,
                "timeline": tl,
                "timeline_dropped": st.entries - len(tl),
                "final": final,
                "hw_advance_latency_ms": _stats(st.hw_latency_ms),
                "acks_all_latency_ms": {
                    "total": _stats(st.acks_all_total_ms),
                    "append": _stats(st.acks_all_append_ms),
                    "replication": _stats(st.acks_all_replication_ms),
                },
            })
        return out

    HANDLERS = Handlers(
        requests={ApiKey.PRODUCE: _produce_request, ApiKey.FETCH: _fetch_request},
        responses={
            ApiKey.PRODUCE: _produce_response,
            ApiKey.FETCH: _fetch_response,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: _epoch_response,
        },
        body_required=False,
    )
