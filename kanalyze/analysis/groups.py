"""Consumer groups: members, generations, rebalances, assignments, commits and lag.

Classic protocol: JoinGroup (member ids, leader, protocol = assignor, generation) -> SyncGroup
(the leader's assignments; each member's own assignment in its response) -> Heartbeat ->
LeaveGroup. KIP-848: ConsumerGroupHeartbeat carries member epochs and assignments (topic ids).
A rebalance runs from the first JoinGroup of a generation to the last SyncGroup response of it.
Commits (OffsetCommit) per partition; lag = HW - committed, with a Burrow-style status over the
commit history (OK, WARN, STALL, STOP, REWIND).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from dissectors import ApiKey, error_name
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import LogRecords, topic_of, tp

BENIGN_HEARTBEAT = frozenset({27})  # REBALANCE_IN_PROGRESS: the normal signal to rejoin


@dataclass
class Member:
    member_id: str
    client_id: str | None = None
    instance_id: str | None = None
    generations: list[int] = field(default_factory=list)
    assignment: list[str] = field(default_factory=list)
    assignments: list[dict[str, object]] = field(default_factory=list)
    heartbeat_errors: Counter = field(default_factory=Counter)
    left: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "member_id": self.member_id,
            "client_id": self.client_id,
            "group_instance_id": self.instance_id,
            "generations": self.generations,
            "assignment": self.assignment,
            "assignments": self.assignments,
            "heartbeat_errors": dict(self.heartbeat_errors),
            "left": self.left,
        }


@dataclass
class Generation:
    generation_id: int
    protocol: str | None = None
    leader: str | None = None
    members: set[str] = field(default_factory=set)
    join_started_ts: float | None = None
    join_frame: int | None = None
    synced_ts: float | None = None
    sync_frame: int | None = None
    assignments: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "generation_id": self.generation_id,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": sorted(self.members),
            "assignments": dict(sorted(self.assignments.items())),
            "join_frame": self.join_frame,
            "sync_frame": self.sync_frame,
        }


@dataclass
class Group:
    group_id: str
    protocol_type: str | None = None
    kind: str = "classic"
    members: dict[str, Member] = field(default_factory=dict)
    generations: dict[int, Generation] = field(default_factory=dict)
    joining_since: tuple[float, int] | None = None
    committed: dict[str, int] = field(default_factory=dict)
    commit_history: dict[str, deque] = field(
        default_factory=dict
    )  # partition -> (ts, committed, hw)
    fetched_committed: dict[str, int] = field(default_factory=dict)
    logged_committed: dict[str, int] = field(default_factory=dict)  # from __consumer_offsets

    def member(self, member_id: str) -> Member:
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = Member(member_id)
        return m


def burrow_status(
    history: list[tuple[float, int, int | None]], now: float | None, stop_after_s: float
) -> str:
    """OK / WARN / STALL / STOP / REWIND from (ts, committed offset, HW) samples, newest last."""
    if not history:
        return "OK"
    offsets = [h[1] for h in history]
    if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)):
        return "REWIND"
    lags = [None if h[2] is None else max(0, h[2] - h[1]) for h in history]
    last_lag = lags[-1]
    if last_lag == 0 or last_lag is None:
        return "OK"
    if now is not None and now - history[-1][0] > stop_after_s:
        return "STOP"
    if len(history) >= 2 and offsets[0] == offsets[-1]:
        return "STALL"
    known = [x for x in lags if x is not None]
    if len(known) >= 3 and all(b > a for a, b in zip(known, known[1:], strict=False)):
        return "WARN"
    return "OK"


class GroupAnalyzer:
    def __init__(
        self,
        findings: Findings,
        hw_of=None,
        cap: int = 10_000,
        history: int = 64,
        stop_after_s: float = 60.0,
    ) -> None:
        self.findings = findings
        self.hw_of = hw_of  # (topic, partition) -> current HW, from the replication analyzer
        self.cap = cap
        self.history = history
        self.stop_after_s = stop_after_s
        self.groups: dict[str, Group] = {}
        self.last_ts: float | None = None
        # TxnOffsetCommit offsets accepted by the coordinator, waiting for their transaction's
        # EndTxn: transactional id -> [(group id, topics of the request)]
        self.txn_commits: dict[str, list[tuple[str, list]]] = {}
        self.log = LogRecords("__consumer_offsets")

    def group(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        if g is None and len(self.groups) < self.cap:
            g = self.groups[group_id] = Group(group_id)
        return g

    def feed(self, ev: Event) -> None:
        self.last_ts = ev.ts_s
        self.HANDLERS.dispatch(self, ev)

    # JoinGroup
    def _join_group_request(self, ev: Event, body: dict) -> None:
        g = self.group(body.get("group_id") or "")
        if g is None:
            return
        g.protocol_type = body.get("protocol_type") or g.protocol_type
        if g.joining_since is None:
            g.joining_since = (ev.ts_s, ev.frame)

    def _join_group_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        g = self.group(req.get("group_id") or "")
        if g is None or body.get("error_code", 0):
            return
        gen_id = body.get("generation_id")
        if not isinstance(gen_id, int):
            return
        gen = g.generations.get(gen_id)
        if gen is None:
            gen = g.generations[gen_id] = Generation(gen_id)
            since = g.joining_since or (ev.ts_s, ev.frame)
            gen.join_started_ts, gen.join_frame = since
        gen.protocol = body.get("protocol_name") or gen.protocol
        gen.leader = body.get("leader") or gen.leader
        mid = body.get("member_id") or ""
        gen.members.add(mid)
        for m in body.get("members") or []:
            if m.get("member_id"):
                gen.members.add(m["member_id"])
        me = g.member(mid)
        me.client_id = ev.ex.client_id
        me.instance_id = req.get("group_instance_id")
        if gen_id not in me.generations:
            me.generations.append(gen_id)

    # SyncGroup
    def _sync_group_request(self, ev: Event, body: dict) -> None:
        g = self.group(body.get("group_id") or "")
        gen = g.generations.get(body.get("generation_id")) if g else None
        if gen is None:
            return
        for a in body.get("assignments") or []:
            gen.assignments[a.get("member_id") or ""] = _assigned(a.get("assignment"))

    def _sync_group_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        g = self.group(req.get("group_id") or "")
        if g is None or body.get("error_code", 0):
            return
        gen = g.generations.get(req.get("generation_id"))
        mid = req.get("member_id") or ""
        parts = _assigned(body.get("assignment"))
        m = g.member(mid)
        m.client_id = m.client_id or ev.ex.client_id
        m.assignment = parts
        if len(m.assignments) < self.history:
            m.assignments.append(
                {"generation_id": req.get("generation_id"), "partitions": parts, "frame": ev.frame}
            )
        if gen is not None:
            gen.assignments[mid] = parts
            gen.synced_ts, gen.sync_frame = ev.ts_s, ev.frame
        g.joining_since = None

    # Heartbeat
    def _heartbeat_response(self, ev: Event, body: dict) -> None:
        err = body.get("error_code", 0)
        req = ev.bodies.request or {}
        g = self.group(req.get("group_id") or "")
        if not err or g is None:
            return
        m = g.member(req.get("member_id") or "")
        m.heartbeat_errors[error_name(err)] += 1
        if err not in BENIGN_HEARTBEAT:
            self.findings.add(
                "warning",
                "heartbeat_error",
                f"group {g.group_id}: heartbeat of {m.client_id or m.member_id} failed with "
                f"{error_name(err)}",
                [ev.frame],
                ev.ts_s,
                group_id=g.group_id,
                member_id=m.member_id,
            )

    # LeaveGroup
    def _leave_group_request(self, ev: Event, body: dict) -> None:
        g = self.group(body.get("group_id") or "")
        if g is None:
            return
        ids = (
            [body["member_id"]]
            if body.get("member_id")
            else [m.get("member_id") for m in body.get("members") or []]
        )
        for mid in ids:
            if mid:
                m = g.member(mid)
                m.left = True
                m.client_id = m.client_id or ev.ex.client_id

    # OffsetCommit
    def _offset_commit_request(self, ev: Event, body: dict) -> None:
        self._commit(ev, body.get("group_id") or "", body.get("topics") or [])

    # TxnOffsetCommit: the offsets count once their transaction commits (EndTxn), as a
    # read_committed reader of __consumer_offsets would see them; aborted ones never do
    def _txn_offset_commit_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        tid = req.get("transactional_id")
        if not isinstance(tid, str) or len(self.txn_commits) >= self.cap:
            return
        commit = (req.get("group_id") or "", req.get("topics") or [])
        self.txn_commits.setdefault(tid, []).append(commit)

    def _end_txn_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        pending = self.txn_commits.pop(req.get("transactional_id"), None)  # type: ignore[arg-type]
        if pending and req.get("committed") and not body.get("error_code"):
            for group_id, topics in pending:
                self._commit(ev, group_id, topics)

    def _commit(self, ev: Event, group_id: str, topics: list) -> None:
        g = self.group(group_id)
        if g is None:
            return
        for t in topics:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                off, part = p.get("committed_offset"), p.get("partition_index", -1)
                if not isinstance(off, int):
                    continue
                key = tp(topic, part)
                hw = self.hw_of(topic, part) if self.hw_of else None
                hist = g.commit_history.setdefault(key, deque(maxlen=self.history))
                if hist and off < hist[-1][1]:
                    self.findings.add(
                        "warning",
                        "commit_rewind",
                        f"group {g.group_id}: committed offset of {key} went back from "
                        f"{hist[-1][1]} to {off}",
                        [ev.frame],
                        ev.ts_s,
                        group_id=g.group_id,
                        partition_key=key,
                    )
                hist.append((ev.ts_s, off, hw))
                g.committed[key] = off

    # OffsetFetch: offsets committed before the capture started
    def _offset_fetch_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        groups = body.get("groups")
        if groups is None:
            groups = [{"group_id": req.get("group_id"), "topics": body.get("topics") or []}]
        for gr in groups:
            g = self.group(gr.get("group_id") or "")
            if g is None:
                continue
            for t in gr.get("topics") or []:
                for p in t.get("partitions") or []:
                    off = p.get("committed_offset")
                    if isinstance(off, int) and off >= 0:
                        g.fetched_committed[tp(topic_of(t), p.get("partition_index", -1))] = off

    # ConsumerGroupHeartbeat (KIP-848)
    # __consumer_offsets replicated to a follower: the coordinator's own record of commits and
    # generations (keys and values decoded by kanalyze.bodies.internal)
    def _fetch_response(self, ev: Event, body: dict) -> None:
        for key, value in self.log.new(body):
            k = key["fields"]
            g = self.group(k.get("group") or "")
            if g is None or value is None or not isinstance(value.get("fields"), dict):
                continue
            v = value["fields"]
            if key["type"] == "OffsetCommitKey" and isinstance(v.get("offset"), int):
                g.logged_committed[tp(k.get("topic") or "?", k.get("partition", -1))] = v["offset"]
            elif key["type"] == "GroupMetadataKey" and isinstance(v.get("generation"), int):
                g.protocol_type = v.get("protocol_type") or g.protocol_type
                gen = g.generations.get(v["generation"])
                if gen is None:
                    gen = g.generations[v["generation"]] = Generation(v["generation"])
                    gen.join_frame = ev.frame
                gen.protocol = v.get("protocol") or gen.protocol
                gen.leader = v.get("leader") or gen.leader
                for m in v.get("members") or []:
                    if isinstance(m, dict) and m.get("member_id"):
                        gen.members.add(m["member_id"])
                        me = g.member(m["member_id"])
                        me.client_id = me.client_id or m.get("client_id")
                        if v["generation"] not in me.generations:
                            me.generations.append(v["generation"])

    def _consumer_group_heartbeat_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        g = self.group(req.get("group_id") or "")
        if g is None:
            return
        g.kind = "consumer"
        err = body.get("error_code", 0)
        mid = body.get("member_id") or req.get("member_id") or ""
        m = g.member(mid)
        m.client_id = m.client_id or ev.ex.client_id
        if err:
            m.heartbeat_errors[error_name(err)] += 1
            self.findings.add(
                "warning",
                "heartbeat_error",
                f"group {g.group_id}: ConsumerGroupHeartbeat of {m.client_id or mid} failed with "
                f"{error_name(err)}",
                [ev.frame],
                ev.ts_s,
                group_id=g.group_id,
                member_id=mid,
            )
            return
        if req.get("member_epoch") == -1:
            m.left = True
        epoch = body.get("member_epoch")
        if isinstance(epoch, int) and epoch >= 0:
            if epoch not in m.generations:
                m.generations.append(epoch)
            gen = g.generations.get(epoch)
            if gen is None:
                gen = g.generations[epoch] = Generation(epoch, protocol=req.get("server_assignor"))
                gen.join_started_ts, gen.join_frame = ev.ts_s, ev.frame
            gen.members.add(mid)
            assignment = body.get("assignment")
            if isinstance(assignment, dict):
                parts = sorted(
                    tp(topic_of(t), p)
                    for t in assignment.get("topic_partitions") or []
                    for p in t.get("partitions") or []
                )
                gen.assignments[mid] = parts
                gen.synced_ts, gen.sync_frame = ev.ts_s, ev.frame
                m.assignment = parts
                if len(m.assignments) < self.history:
                    m.assignments.append(
                        {"generation_id": epoch, "partitions": parts, "frame": ev.frame}
                    )

    def to_json(self) -> list[dict[str, object]]:
        out = []
        for g in self.groups.values():
            rebalances = []
            for gen in sorted(g.generations.values(), key=lambda x: x.generation_id):
                dur = None
                if gen.join_started_ts is not None and gen.synced_ts is not None:
                    dur = round((gen.synced_ts - gen.join_started_ts) * 1000, 3)
                rebalances.append(
                    {
                        "generation_id": gen.generation_id,
                        "leader": gen.leader,
                        "assignor": gen.protocol,
                        "members": len(gen.members),
                        "started_frame": gen.join_frame,
                        "completed_frame": gen.sync_frame,
                        "duration_ms": dur,
                    }
                )
            lag = {}
            for key, hist in sorted(g.commit_history.items()):
                topic, _, part = key.rpartition("-")
                hw = self.hw_of(topic, int(part)) if self.hw_of else None
                committed = g.committed.get(key)
                samples = list(hist)
                if samples and hw is not None:
                    samples[-1] = (samples[-1][0], samples[-1][1], max(hw, samples[-1][2] or 0))
                lag[key] = {
                    "committed": committed,
                    "high_watermark": hw,
                    "lag": None if hw is None or committed is None else max(0, hw - committed),
                    "status": burrow_status(samples, self.last_ts, self.stop_after_s),
                    "history": [
                        {"ts": ts, "committed": c, "high_watermark": h} for ts, c, h in hist
                    ],
                }
            out.append(
                {
                    "group_id": g.group_id,
                    "protocol": g.kind,
                    "protocol_type": g.protocol_type,
                    "generations": [
                        gen.to_json()
                        for gen in sorted(g.generations.values(), key=lambda x: x.generation_id)
                    ],
                    "rebalances": rebalances,
                    "members": [m.to_json() for m in g.members.values()],
                    "committed": dict(sorted(g.committed.items())),
                    "committed_before_capture": dict(sorted(g.fetched_committed.items())),
                    "lag": lag,
                    **(
                        {"committed_log": dict(sorted(g.logged_committed.items()))}
                        if g.logged_committed
                        else {}
                    ),
                }
            )
        return out

    HANDLERS = Handlers(
        requests={
            ApiKey.JOIN_GROUP: _join_group_request,
            ApiKey.SYNC_GROUP: _sync_group_request,
            ApiKey.LEAVE_GROUP: _leave_group_request,
            ApiKey.OFFSET_COMMIT: _offset_commit_request,
        },
        responses={
            ApiKey.JOIN_GROUP: _join_group_response,
            ApiKey.SYNC_GROUP: _sync_group_response,
            ApiKey.HEARTBEAT: _heartbeat_response,
            ApiKey.OFFSET_FETCH: _offset_fetch_response,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat_response,
            ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit_response,
            ApiKey.END_TXN: _end_txn_response,
            ApiKey.FETCH: _fetch_response,
        },
    )


def _assigned(assignment: object) -> list[str]:
    """Partitions of a decoded consumer-protocol assignment, as sorted "topic-partition" strings."""
    if not isinstance(assignment, dict):
        return []
    return sorted(
        tp(topic_of(a), p)
        for a in assignment.get("assigned_partitions") or []
        for p in a.get("partitions") or []
    )
