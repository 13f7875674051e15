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

One partition, one timeline, whatever each client calls its topic: names and topic ids
resolve through the run's `TopicNames` registry. An event that names a topic only by an id
nobody has named yet is held back (with every event after it, to keep the wire order) until
the id is named -- by a Metadata response, a KRaft record, the user's --topic-ids file or the
record batches the leader also returned to a name-based fetch -- or until `HOLD_CAP` events
wait; an id named only after that merges its timeline into the name's. An id never named
stays the partition's label, with one `unresolved_topic_id` finding that says how to name it.

The HW shown goes back only when the leader sends a lower one, and then with an alert: below
the HW it reported before (`hw_regression`), or below the inferred one (`hw_inference_ahead`:
a replica or an ack the capture does not show holds it back; from then on the partition's HW
follows the leader's reports only).
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
from kanalyze.bodies.names import METADATA_TOPIC, UNRESOLVED_HINT, TopicNames


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
        return {
            "leo": self.leo,
            "remote_leo": self.remote_leo,
            "hw": self.hw,
            "lag_records": lag,
            "lag_ms": lag_ms,
        }


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
    tentative: dict[int, tuple[int, int | None, list[tuple[int, int, int]]]] = field(
        default_factory=dict
    )
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
    infer_hw: bool = True  # off once the leader reported an HW below the inferred one
    # the partition as the cluster stated it (KRaft metadata log, AlterPartition responses)
    stated: dict[str, object] | None = None

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
        self.pending = [
            p for p in self.pending if not (p.hw_ts is not None and (p.answered or p.acks != -1))
        ]
        if len(self.pending) > 10_000:
            del self.pending[: len(self.pending) - 10_000]

    def maybe_advance_hw(self, ts: int, frame: int) -> None:
        if not self.followers or self.leo is None or not self.infer_hw:
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
        self.timeline.append(
            {
                "frame": ev.frame,
                "ts": ev.ts_s,
                "event": event,
                "leader_leo": self.leo,
                "high_watermark": self.hw,
                "log_start_offset": self.log_start,
                "last_stable_offset": self.lso,
                "followers": {
                    str(f): st.to_json(self.leo, now) for f, st in sorted(self.followers.items())
                },
                "isr": sorted(self.isr),
                **({"stated": dict(self.stated)} if self.stated is not None else {}),
                **extra,
            }
        )

    def absorb(self, other: PartitionState) -> None:
        """Take in the state of the same partition followed under another label (an id named
        late): timelines merged in wire order, followers and ISR united, offsets the highest."""
        for fid, f in other.followers.items():
            mine = self.followers.get(fid)
            if mine is None or (f.last_frame or -1) > (mine.last_frame or -1):
                self.followers[fid] = f
        self.isr |= other.isr
        self.sources |= other.sources
        merged = sorted([*self.timeline, *other.timeline], key=lambda e: e["frame"])
        self.timeline = deque(merged, maxlen=self.cap)
        self.entries += other.entries
        for attr in ("leo", "hw", "leader_epoch"):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            if theirs is not None and (mine is None or theirs > mine):
                setattr(self, attr, theirs)
        if other.reported_hw_frame is not None and (
            self.reported_hw_frame is None or other.reported_hw_frame > self.reported_hw_frame
        ):
            self.reported_hw, self.reported_hw_frame = other.reported_hw, other.reported_hw_frame
        for attr in ("log_start", "lso"):
            if getattr(self, attr) is None:
                setattr(self, attr, getattr(other, attr))
        self.infer_hw = self.infer_hw and other.infer_hw
        self.pending.extend(other.pending)
        self.hw_latency_ms.extend(other.hw_latency_ms)
        self.acks_all_total_ms.extend(other.acks_all_total_ms)
        self.acks_all_append_ms.extend(other.acks_all_append_ms)
        self.acks_all_replication_ms.extend(other.acks_all_replication_ms)


def _stats(values: list[float]) -> dict[str, object]:
    v = sorted(values)
    return {
        "count": len(v),
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "p99": percentile(v, 99),
        "max": v[-1] if v else None,
    }


# metadata-log records about brokers -> what happened to the broker
BROKER_RECORDS = {
    "RegisterBrokerRecord": "registered",
    "FenceBrokerRecord": "fenced",
    "UnfenceBrokerRecord": "unfenced",
    "UnregisterBrokerRecord": "unregistered",
}
# events held back at most while waiting for a topic id's name (then they go on as the id),
# and at most this many wire bytes of them (their decoded bodies are held too)
HOLD_CAP = 20_000
HOLD_BYTES = 16 << 20
# the lists of topics (by api body) whose items may name a topic only by id
_TOPIC_LISTS: tuple[str, ...] = ("topic_data", "responses", "topics")
_NAME_KEYS = ("topic_name", "name", "topic")


def _int(v: object) -> int:
    """A batch header field, or -1 when the batch was cut before it (a partial batch has None)."""
    return v if isinstance(v, int) else -1


class ReplicationAnalyzer:
    """Feeds on Produce, Fetch and OffsetForLeaderEpoch events; one `PartitionState` each."""

    def __init__(
        self,
        findings: Findings,
        cap: int = 5000,
        stall_ms: float = 10_000.0,
        names: TopicNames | None = None,
    ) -> None:
        self.findings = findings
        self.cap = cap
        self.stall_ns = int(stall_ms * 1e6)
        self.parts: dict[tuple[str, int], PartitionState] = {}
        self.names = names if names is not None else TopicNames()
        self.held: list[Event] = []
        self.held_bytes = 0
        self.waiting: set[str] = set()  # unnamed ids the held events wait for
        self.given_up: set[str] = set()  # ids that went on unnamed (HOLD_CAP reached)
        self.known = 0  # registry size when the id-labelled partitions were last merged
        self.metadata_applied = -1  # the last `__cluster_metadata` offset applied

    def label(self, topic: str) -> str:
        """A partition's topic label: the name when the registry knows the id."""
        return self.names.get(topic) or topic

    def part(self, topic: str, partition: int) -> PartitionState:
        key = (self.label(topic), partition)
        st = self.parts.get(key)
        if st is None:
            st = self.parts[key] = PartitionState(key[0], partition, self.cap)
        return st

    def feed(self, ev: Event) -> None:
        key = ev.ex.api_key
        if key not in self.HANDLERS.requests and key not in self.HANDLERS.responses:
            return
        unnamed = self._unnamed(ev)
        if unnamed or self.held:
            self.held.append(ev)
            msg = ev.ex.request if ev.is_request else ev.ex.response
            self.held_bytes += msg.pdu.size if msg is not None else 0
            self.waiting |= unnamed
            self.waiting = {t for t in self.waiting if t not in self.names}
            if not self.waiting or len(self.held) > HOLD_CAP or self.held_bytes > HOLD_BYTES:
                self.given_up |= self.waiting
                self.flush()
            return
        self._dispatch(ev)

    def _dispatch(self, ev: Event) -> None:
        if len(self.names) != self.known:
            self._merge_named()
        self.HANDLERS.dispatch(self, ev)

    def flush(self) -> None:
        """Handle the held events (in wire order) with what the registry knows now."""
        held, self.held, self.waiting, self.held_bytes = self.held, [], set(), 0
        for ev in held:
            self._dispatch(ev)

    def _unnamed(self, ev: Event) -> set[str]:
        """Topic ids of this event's body that no source has named (and not given up on)."""
        body = ev.body
        out: set[str] = set()
        if not isinstance(body, dict):
            return out
        for key in _TOPIC_LISTS:
            for t in body.get(key) or []:
                if not isinstance(t, dict) or any(t.get(k) for k in _NAME_KEYS):
                    continue
                tid = t.get("topic_id")
                if isinstance(tid, str) and tid not in self.names and tid not in self.given_up:
                    out.add(tid)
        return out

    def _merge_named(self) -> None:
        """Partitions followed under an id the registry has named since: into the name's."""
        self.known = len(self.names)
        for topic, partition in list(self.parts):
            name = self.names.get(topic)
            if name is None:
                continue
            st = self.parts.pop((topic, partition))
            into = self.parts.get((name, partition))
            if into is None:
                st.topic = name
                self.parts[(name, partition)] = st
            else:
                into.absorb(st)

    def finish(self) -> None:
        """End of the run: handle what is still held; one finding per id nobody named."""
        self.given_up |= self.waiting
        self.flush()
        self._merge_named()
        self._check_stated()
        for tid in sorted({t for (t, _p) in self.parts if t in self.given_up}):
            self.findings.add(
                "info", "unresolved_topic_id", f"{tid}: {UNRESOLVED_HINT}", [], None, topic_id=tid
            )

    # ------------------------------------------------------------------ produce
    def _produce_request(self, ev: Event) -> None:
        acks = ev.ex.acks
        for topic, partition, bs in produce_partitions(ev.body):
            st = self.part(topic, partition)
            topic = st.topic  # the partition's one name
            st.sources.add("produce_requests")
            count = 0
            seqs: list[tuple[int, int, int]] = []
            for b in bs:
                n = batch_count(b)
                pid, epoch, seq = (
                    _int(b.get(k)) for k in ("producer_id", "producer_epoch", "base_sequence")
                )
                if isinstance(pid, int) and pid >= 0 and (pid, epoch, seq) in st.acked_seq:
                    continue  # a resent batch the leader already has: deduplicated, not appended
                count += n
                seqs.append((pid, epoch, seq))
            before = st.leo
            if st.leo is not None and count:
                st.set_leo(st.leo + count, ev.ts)
            st.tentative[id(ev.bodies)] = (count, before, seqs)
            if count:
                st.pending.append(
                    Pending(
                        before,
                        None if before is None else before + count,
                        count,
                        ev.ts,
                        ev.frame,
                        acks,
                    )
                )
            st.maybe_advance_hw(ev.ts, ev.frame)
            self._check_stall(st, ev)
            st.entry(ev, "produce")

    def _produce_response(self, ev: Event) -> None:
        for topic, partition, r in produce_results(ev.body):
            st = self.part(topic, partition)
            topic = st.topic  # the partition's one name
            st.sources.add("produce_acks")
            count, before, seqs = st.tentative.pop(id(ev.bodies), (0, None, []))
            err, base = r.get("error_code", 0), r.get("base_offset", -1)
            if (
                before is not None
                and count
                and (err or (isinstance(base, int) and base >= 0 and base + count <= before))
            ):
                st.leo = (
                    st.leo or 0
                ) - count  # rejected or deduplicated: the leader did not append
            pend = next(
                (
                    p
                    for p in st.pending
                    if p.frame == (ev.ex.request.pdu.last_pkt if ev.ex.request else -1)
                ),
                None,
            )
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
            if (
                not err
                and ev.ex.acks == -1
                and pend is not None
                and pend.end is not None
                and (st.hw is None or st.hw < pend.end)
            ):
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
            topic = st.topic  # the partition's one name
            epoch = p.get("current_leader_epoch")
            if isinstance(epoch, int) and epoch >= 0:
                if st.leader_epoch is not None and epoch > st.leader_epoch:
                    self.findings.add(
                        "info",
                        "leader_epoch_change",
                        f"{tp(topic, partition)}: leader epoch {st.leader_epoch} -> {epoch}",
                        [ev.frame],
                        ev.ts_s,
                        topic=topic,
                        partition=partition,
                        old_epoch=st.leader_epoch,
                        new_epoch=epoch,
                    )
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
                self.findings.add(
                    "warning",
                    "follower_truncation",
                    f"{tp(topic, partition)}: follower {replica} fetches from {off}, below its "
                    f"position {f.leo} (truncated its log)",
                    [x for x in (f.last_frame, ev.frame) if x is not None],
                    ev.ts_s,
                    topic=topic,
                    partition=partition,
                    replica=replica,
                    previous=f.leo,
                    offset=off,
                )
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
                self.findings.add(
                    "info",
                    "isr_expand",
                    f"{tp(topic, partition)}: follower {replica} caught up to the HW {st.hw} "
                    "and rejoins the ISR",
                    [ev.frame],
                    ev.ts_s,
                    topic=topic,
                    partition=partition,
                    replica=replica,
                )
            st.maybe_advance_hw(ev.ts, ev.frame)
            self._check_stall(st, ev)
            st.entry(ev, "follower_fetch", replica=replica)

    def _fetch_response(self, ev: Event) -> None:
        replica = fetch_replica(ev.bodies.request) if ev.ex.request is not None else -1
        for topic, partition, p in fetch_responses(ev.body):
            if p.get("error_code", 0):
                continue
            if self.label(topic) == METADATA_TOPIC:
                self._metadata_log(ev, p)
            st = self.part(topic, partition)
            topic = st.topic  # the partition's one name
            st.sources.add(
                "follower_fetch_responses" if replica >= 0 else "consumer_fetch_responses"
            )
            hw = p.get("high_watermark")
            bs = batches(p.get("records"))
            end = max((e for e in (batch_end(b) for b in bs) if e is not None), default=None)
            st.set_leo(end, ev.ts)
            if isinstance(hw, int) and hw >= 0:
                if st.reported_hw is not None and hw < st.reported_hw:
                    self.findings.add(
                        "warning",
                        "hw_regression",
                        f"{tp(topic, partition)}: high watermark went back from {st.reported_hw} to {hw}",
                        [x for x in (st.reported_hw_frame, ev.frame) if x is not None],
                        ev.ts_s,
                        topic=topic,
                        partition=partition,
                        previous=st.reported_hw,
                        high_watermark=hw,
                    )
                regression = st.reported_hw is not None and hw < st.reported_hw
                st.reported_hw, st.reported_hw_frame = hw, ev.frame
                if not regression and st.hw is not None and hw < st.hw and st.infer_hw:
                    st.infer_hw = False
                    self.findings.add(
                        "warning",
                        "hw_inference_ahead",
                        f"{tp(topic, partition)}: the leader reports HW {hw} below the {st.hw} "
                        "inferred from what the capture shows (a replica or ack it does not show "
                        "holds it back); the HW follows the leader's reports from here",
                        [ev.frame],
                        ev.ts_s,
                        topic=topic,
                        partition=partition,
                        high_watermark=hw,
                        inferred=st.hw,
                    )
                st.set_hw(hw, ev.ts, ev.frame)
                st.set_leo(hw, ev.ts)
                for fid in sorted(st.isr):
                    r = st.followers[fid].remote_leo
                    if r is not None and r < hw:
                        st.isr.discard(fid)
                        self.findings.add(
                            "warning",
                            "isr_shrink",
                            f"{tp(topic, partition)}: HW {hw} passed follower {fid} at {r}: "
                            "it is out of the ISR",
                            [ev.frame],
                            ev.ts_s,
                            topic=topic,
                            partition=partition,
                            replica=fid,
                        )
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
                        if (
                            pend.first_copy_ts is None
                            and pend.start is not None
                            and end > pend.start
                        ):
                            pend.first_copy_ts = ev.ts
            self._check_stall(st, ev)
            st.entry(
                ev,
                "follower_fetch_response" if replica >= 0 else "fetch_response",
                **({"replica": replica} if replica >= 0 else {}),
            )

    # ------------------------------------------------------------------ stated ISR
    def _state(self, ev: Event, topic: str, partition: int, source: str, **change: object) -> None:
        """The cluster's word on a partition (replicas, ISR, leader, epochs) changed."""
        st = self.part(topic, partition)
        stated = dict(st.stated or {})
        leader = change.get("leader")
        new_leader = isinstance(leader, int) and leader != -2 and leader != stated.get("leader")
        if new_leader and change.get("leader_epoch") is None:
            epoch = stated.get("leader_epoch")  # a new leader, a new epoch
            change["leader_epoch"] = epoch + 1 if isinstance(epoch, int) else None
        stated.update({k: v for k, v in change.items() if v is not None and v != -2})
        stated.update(source=source, frame=ev.frame)
        st.stated = stated
        st.sources.add(source)
        epoch = stated.get("leader_epoch")
        if isinstance(epoch, int) and (st.leader_epoch is None or epoch > st.leader_epoch):
            st.leader_epoch = epoch
        st.entry(ev, "isr_stated")

    def _metadata_log(self, ev: Event, p: dict) -> None:
        """Records of `__cluster_metadata` (decoded by `kanalyze.bodies.internal`), each once
        however many brokers fetch it: partition state, broker registration and fencing."""
        for b in batches(p.get("records")):
            for r in b.get("records") or []:
                off, rec = r.get("offset"), r.get("metadata_record")
                if not isinstance(off, int) or off <= self.metadata_applied:
                    continue
                self.metadata_applied = off
                fields = rec.get("fields") if isinstance(rec, dict) else None
                if isinstance(rec, dict) and isinstance(fields, dict):
                    self._metadata_record(ev, str(rec.get("type")), fields)

    def _metadata_record(self, ev: Event, kind: str, f: dict) -> None:
        if kind in ("PartitionRecord", "PartitionChangeRecord"):
            tid, index = f.get("topic_id"), f.get("partition_id")
            if not isinstance(tid, str) or not isinstance(index, int):
                return
            self._state(
                ev,
                tid,
                index,
                "metadata_log",
                isr=f.get("isr"),
                replicas=f.get("replicas"),
                leader=f.get("leader"),
                leader_epoch=f.get("leader_epoch"),
                partition_epoch=f.get("partition_epoch"),
            )
        elif kind in BROKER_RECORDS:
            broker, what = f.get("broker_id", f.get("id")), BROKER_RECORDS[kind]
            self.findings.add(
                "info",
                f"broker_{what}",
                f"broker {broker} {what} (metadata log)",
                [ev.frame],
                ev.ts_s,
                broker=broker,
                broker_epoch=f.get("broker_epoch", f.get("epoch")),
            )
        elif kind in ("TopicRecord", "RemoveTopicRecord"):
            tid = f.get("topic_id")
            name = f.get("name") or self.names.get(tid if isinstance(tid, str) else None) or tid
            what = "created" if kind == "TopicRecord" else "deleted"
            self.findings.add(
                "info",
                f"topic_{what}",
                f"topic {name} {what} (metadata log)",
                [ev.frame],
                ev.ts_s,
                topic=name,
                topic_id=tid,
            )

    def _alter_partition_response(self, ev: Event) -> None:
        """The controller's answer to a leader's AlterPartition: the ISR it committed."""
        for t in (ev.body or {}).get("topics") or []:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                index = p.get("partition_index")
                if p.get("error_code", 0) or not isinstance(index, int):
                    continue
                self._state(
                    ev,
                    topic,
                    index,
                    "alter_partition",
                    isr=p.get("isr"),
                    leader=p.get("leader_id"),
                    leader_epoch=p.get("leader_epoch"),
                    partition_epoch=p.get("partition_epoch"),
                )

    def _check_stated(self) -> None:
        """End of the run: a follower the wire shows in sync, or not, against the cluster's word."""
        for st in self.parts.values():
            isr = st.stated.get("isr") if st.stated else None
            if not isinstance(isr, list) or not st.followers:
                continue
            differ = sorted(f for f in st.followers if (f in isr) != (f in st.isr))
            if not differ:
                continue
            stated: dict = st.stated  # type: ignore[assignment]
            frame = stated.get("frame")
            self.findings.add(
                "warning",
                "isr_disagreement",
                f"{tp(st.topic, st.partition)}: the cluster states ISR {sorted(isr)} "
                f"({stated.get('source')}), the wire shows followers {sorted(st.isr)} in sync",
                [frame] if isinstance(frame, int) else [],
                None,
                topic=st.topic,
                partition=st.partition,
                stated_isr=sorted(isr),
                inferred_isr=sorted(st.isr),
                replicas=differ,
            )

    def _epoch_response(self, ev: Event) -> None:
        replica = (
            (ev.bodies.request or {}).get("replica_id", -1) if ev.ex.request is not None else -1
        )
        for t in (ev.body or {}).get("topics") or []:
            topic = self.label(topic_of(t))
            for p in t.get("partitions") or []:
                if p.get("error_code", 0):
                    continue
                end, epoch = p.get("end_offset"), p.get("leader_epoch")
                self.findings.add(
                    "info",
                    "epoch_end_offset",
                    f"{tp(topic, p.get('partition', -1))}: epoch {epoch} ends at offset {end} "
                    "(a follower above it truncates there)",
                    [ev.frame],
                    ev.ts_s,
                    topic=topic,
                    partition=p.get("partition", -1),
                    leader_epoch=epoch,
                    end_offset=end,
                    replica=replica,
                )

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
            self.findings.add(
                "warning",
                "hw_stalled",
                f"{tp(st.topic, st.partition)}: HW stuck at {st.hw} for {(ev.ts - since) / 1e9:.1f}s "
                f"while the LEO is {st.leo}",
                [ev.frame],
                ev.ts_s,
                topic=st.topic,
                partition=st.partition,
                high_watermark=st.hw,
                leader_leo=st.leo,
            )

    # ------------------------------------------------------------------ output
    def to_json(self) -> list[dict[str, object]]:
        self.flush()
        ids = {name: tid for tid, name in self.names.items()}
        out: list[dict[str, object]] = []
        for (topic, partition), st in sorted(self.parts.items()):
            if not st.entries:
                continue
            tl = list(st.timeline)
            final = (
                {k: v for k, v in tl[-1].items() if k not in ("event", "replica")} if tl else None
            )
            named: dict[str, object] = {"topic_id": ids[topic]} if topic in ids else {}
            if topic in self.given_up:
                named = {"topic_id": topic, "topic_unresolved": True}
            out.append(
                {
                    "topic": topic,
                    **named,
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
                }
            )
        return out

    HANDLERS = Handlers(
        requests={ApiKey.PRODUCE: _produce_request, ApiKey.FETCH: _fetch_request},
        responses={
            ApiKey.PRODUCE: _produce_response,
            ApiKey.FETCH: _fetch_response,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: _epoch_response,
            ApiKey.ALTER_PARTITION: _alter_partition_response,
        },
        body_required=False,
    )
