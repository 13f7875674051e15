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

from dissectors import ApiKey
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.held import TopicIdHoldBack
from kanalyze.analysis.partition_state import Follower, PartitionState, Pending, latency_stats
from kanalyze.analysis.stated_isr import BROKER_RECORDS, StatedIsr
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

# the names that moved out (kept importable from here)
__all__ = [
    "BROKER_RECORDS",
    "HOLD_BYTES",
    "HOLD_CAP",
    "Follower",
    "PartitionState",
    "Pending",
    "ReplicationAnalyzer",
]

# events held back at most while waiting for a topic id's name (then they go on as the id),
# and at most this many wire bytes of them (their decoded bodies are held too)
HOLD_CAP = 20_000
HOLD_BYTES = 16 << 20


def _int(v: object) -> int:
    """A batch header field, or -1 when the batch was cut before it (a partial batch has None)."""
    return v if isinstance(v, int) else -1


class ReplicationAnalyzer(TopicIdHoldBack, StatedIsr):
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
        unnamed = self.unnamed_ids(ev)
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
        self.dispatch(ev)

    def finish(self) -> None:
        """End of the run: handle what is still held; one finding per id nobody named."""
        self.given_up |= self.waiting
        self.flush()
        self.merge_named()
        self.check_stated()
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
                st.add_pending(
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
            pend = st.pending_at(ev.ex.request.pdu.last_pkt if ev.ex.request else -1)
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
                    st.drop_pending(pend)
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
                st.drop_pending(pend)
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
                self.metadata_log(ev, p)
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
                        f"{tp(topic, partition)}: high watermark went back from "
                        f"{st.reported_hw} to {hw}",
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
                f"{tp(st.topic, st.partition)}: HW stuck at {st.hw} "
                f"for {(ev.ts - since) / 1e9:.1f}s while the LEO is {st.leo}",
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
                    "hw_advance_latency_ms": latency_stats(st.hw_latency_ms),
                    "acks_all_latency_ms": {
                        "total": latency_stats(st.acks_all_total_ms),
                        "append": latency_stats(st.acks_all_append_ms),
                        "replication": latency_stats(st.acks_all_replication_ms),
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
            ApiKey.ALTER_PARTITION: StatedIsr.alter_partition_response,
        },
        body_required=False,
    )
