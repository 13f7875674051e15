"""Transactions per transactional id: the coordinator state machine as the wire shows it.

FindCoordinator(key_type 1) -> InitProducerId(transactional_id) -> AddPartitionsToTxn ->
Produce (transactional batches) -> AddOffsetsToTxn -> TxnOffsetCommit -> EndTxn(commit/abort)
-> WriteTxnMarkers -> control records (COMMIT/ABORT) in the partition logs. Each transaction
ends committed, aborted or incomplete; anomalies: a transactional produce to a partition not
added, a fenced epoch, EndTxn with nothing added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissectors import ApiKey, error_name
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import (
    LogRecords,
    batches,
    fetch_responses,
    produce_partitions,
    topic_of,
    tp,
)

# TransactionLogValue.TransactionStatus (Kafka's TransactionState ids)
LOG_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}
FENCED = frozenset({47, 90})  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED


@dataclass
class Txn:
    transactional_id: str
    producer_id: int | None
    producer_epoch: int | None
    outcome: str = "incomplete"
    state: str = "Ongoing"
    partitions: set[str] = field(default_factory=set)
    produced: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, int] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    markers: dict[str, str] = field(
        default_factory=dict
    )  # partition -> COMMIT/ABORT control record seen
    source: str | None = None  # "transaction_log": known from __transaction_state records only
    first_ts: float | None = None
    end_ts: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "outcome": self.outcome,
            "state": self.state,
            "partitions": sorted(self.partitions | self.produced),
            "groups": sorted(self.groups),
            "offsets": dict(sorted(self.offsets.items())),
            "states": self.states,
            "control_records": dict(sorted(self.markers.items())),
            "first_frame": self.frames[0] if self.frames else None,
            "last_frame": self.frames[-1] if self.frames else None,
            "duration_ms": None
            if self.first_ts is None or self.end_ts is None
            else round((self.end_ts - self.first_ts) * 1000, 3),
            **({"source": self.source} if self.source else {}),
        }


@dataclass
class TxnProducer:
    transactional_id: str
    producer_id: int | None = None
    producer_epoch: int | None = None
    coordinator: str | None = None
    current: Txn | None = None


class TransactionAnalyzer:
    def __init__(self, findings: Findings, cap: int = 10_000) -> None:
        self.findings = findings
        self.cap = cap
        self.producers: dict[str, TxnProducer] = {}
        self.by_pid: dict[int, str] = {}
        self.done: list[Txn] = []
        self.dropped = 0
        self.log = LogRecords("__transaction_state")
        # (transactional id, producer id) -> the transaction as __transaction_state logged it
        self.logged: dict[tuple[str, int], Txn] = {}

    def _prod(self, tid: str) -> TxnProducer:
        p = self.producers.get(tid)
        if p is None:
            p = self.producers[tid] = TxnProducer(tid)
        return p

    def _txn(self, p: TxnProducer, ev: Event, state: str) -> Txn:
        if p.current is None:
            p.current = Txn(p.transactional_id, p.producer_id, p.producer_epoch, first_ts=ev.ts_s)
        t = p.current
        if not t.states or t.states[-1] != state:
            t.states.append(state)
        t.state = state
        t.frames.append(ev.frame)
        if len(t.frames) > 64:
            del t.frames[1:-32]
        return t

    def _close(self, p: TxnProducer, outcome: str, ev: Event) -> None:
        t = p.current
        if t is None:
            return
        t.outcome = outcome
        t.state = "CompleteCommit" if outcome == "committed" else "CompleteAbort"
        t.states.append(t.state)
        t.end_ts = ev.ts_s
        p.current = None
        if len(self.done) < self.cap:
            self.done.append(t)
        else:
            self.dropped += 1

    def _fenced(self, ev: Event, tid: str, err: int) -> None:
        if err in FENCED:
            self.findings.add(
                "error",
                "fenced_epoch",
                f"transactional id {tid}: {ev.ex.api} answered {error_name(err)} (a newer producer "
                "instance took over)",
                [ev.frame],
                ev.ts_s,
                transactional_id=tid,
            )

    def _check_epoch(self, ev: Event, p: TxnProducer, epoch: object) -> None:
        if (
            isinstance(epoch, int)
            and p.producer_epoch is not None
            and 0 <= epoch < p.producer_epoch
        ):
            self.findings.add(
                "error",
                "fenced_epoch",
                f"transactional id {p.transactional_id}: {ev.ex.api} with epoch {epoch} after epoch "
                f"{p.producer_epoch} was issued (zombie producer)",
                [ev.frame],
                ev.ts_s,
                transactional_id=p.transactional_id,
            )

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    # FindCoordinator
    def _find_coordinator_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        if req.get("key_type") != 1:
            return
        keys = req.get("coordinator_keys") or ([req["key"]] if req.get("key") else [])
        for k in keys:
            self._prod(k).coordinator = f"{body.get('host')}:{body.get('port')}"

    # InitProducerId
    def _init_producer_id_response(self, ev: Event, body: dict) -> None:
        tid = (ev.bodies.request or {}).get("transactional_id")
        if not tid:
            return
        p = self._prod(tid)
        err = body.get("error_code", 0)
        if err:
            self._fenced(ev, tid, err)
            return
        if p.current is not None and p.current.outcome == "incomplete":
            self._close(p, "aborted", ev)  # a new InitProducerId aborts whatever was open
        p.producer_id, p.producer_epoch = body.get("producer_id"), body.get("producer_epoch")
        if isinstance(p.producer_id, int):
            self.by_pid[p.producer_id] = tid

    # AddPartitionsToTxn
    def _add_partitions_to_txn_request(self, ev: Event, body: dict) -> None:
        items = []
        if body.get("v3_and_below_transactional_id"):
            items.append(
                (
                    body["v3_and_below_transactional_id"],
                    body.get("v3_and_below_producer_epoch"),
                    body.get("v3_and_below_topics") or [],
                )
            )
        items.extend(
            (t.get("transactional_id"), t.get("producer_epoch"), t.get("topics") or [])
            for t in body.get("transactions") or []
        )
        for tid, epoch, topics in items:
            if not tid:
                continue
            p = self._prod(tid)
            self._check_epoch(ev, p, epoch)
            t = self._txn(p, ev, "Ongoing")
            for topic in topics:
                for part in topic.get("partitions") or []:
                    t.partitions.add(tp(topic_of(topic), part))

    def _add_partitions_to_txn_response(self, ev: Event, body: dict) -> None:
        errs = set()
        for r in body.get("results_by_topic_v3_and_below") or []:
            errs.update(
                x.get("partition_error_code", 0) for x in r.get("results_by_partition") or []
            )
        for tr in body.get("results_by_transaction") or []:
            for r in tr.get("topic_results") or []:
                errs.update(
                    x.get("partition_error_code", 0) for x in r.get("results_by_partition") or []
                )
        errs.add(body.get("error_code", 0))
        tid = (ev.bodies.request or {}).get("v3_and_below_transactional_id") or ""
        for e in errs - {0}:
            self._fenced(ev, tid, e)

    # Produce
    def _produce_request(self, ev: Event, body: dict) -> None:
        tid = body.get("transactional_id")
        for topic, partition, bs in produce_partitions(body):
            if not any(b.get("is_transactional") for b in bs):
                continue
            pid = next(
                (b.get("producer_id") for b in bs if isinstance(b.get("producer_id"), int)), None
            )
            name = tid or (self.by_pid.get(pid) if isinstance(pid, int) else None)
            if not name:
                continue
            p = self._prod(name)
            epoch = next((b.get("producer_epoch") for b in bs), None)
            self._check_epoch(ev, p, epoch)
            t = self._txn(p, ev, "Ongoing")
            key = tp(topic, partition)
            t.produced.add(key)
            if key not in t.partitions:
                self.findings.add(
                    "error",
                    "produce_to_unadded_partition",
                    f"transactional id {name}: transactional produce to {key} before "
                    "AddPartitionsToTxn added it",
                    [ev.frame],
                    ev.ts_s,
                    transactional_id=name,
                    partition_key=key,
                )

    # AddOffsetsToTxn
    def _add_offsets_to_txn_request(self, ev: Event, body: dict) -> None:
        tid = body.get("transactional_id")
        if tid:
            p = self._prod(tid)
            self._check_epoch(ev, p, body.get("producer_epoch"))
            self._txn(p, ev, "Ongoing").groups.add(body.get("group_id") or "")

    def _add_offsets_to_txn_response(self, ev: Event, body: dict) -> None:
        self._fenced(
            ev, (ev.bodies.request or {}).get("transactional_id") or "", body.get("error_code", 0)
        )

    # TxnOffsetCommit
    def _txn_offset_commit_request(self, ev: Event, body: dict) -> None:
        tid = body.get("transactional_id")
        if not tid:
            return
        p = self._prod(tid)
        t = self._txn(p, ev, "Ongoing")
        t.groups.add(body.get("group_id") or "")
        for topic in body.get("topics") or []:
            for part in topic.get("partitions") or []:
                t.offsets[tp(topic_of(topic), part.get("partition_index", -1))] = part.get(
                    "committed_offset"
                )

    # EndTxn
    def _end_txn_request(self, ev: Event, body: dict) -> None:
        tid = body.get("transactional_id")
        if not tid:
            return
        p = self._prod(tid)
        self._check_epoch(ev, p, body.get("producer_epoch"))
        committed = bool(body.get("committed"))
        t = p.current
        if t is None or not (t.partitions or t.groups):
            self.findings.add(
                "warning",
                "end_txn_without_partitions",
                f"transactional id {tid}: EndTxn({'commit' if committed else 'abort'}) with no "
                "partitions or offsets added",
                [ev.frame],
                ev.ts_s,
                transactional_id=tid,
            )
        self._txn(p, ev, "PrepareCommit" if committed else "PrepareAbort")

    def _end_txn_response(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        tid = req.get("transactional_id")
        if not tid:
            return
        p = self._prod(tid)
        err = body.get("error_code", 0)
        if err:
            self._fenced(ev, tid, err)
            self.findings.add(
                "warning",
                "end_txn_failed",
                f"transactional id {tid}: EndTxn failed with {error_name(err)}",
                [ev.frame],
                ev.ts_s,
                transactional_id=tid,
            )
            return
        if p.current is not None:
            p.current.frames.append(ev.frame)
        self._close(p, "committed" if req.get("committed") else "aborted", ev)

    # WriteTxnMarkers (coordinator -> partition leaders)
    def _write_txn_markers_request(self, ev: Event, body: dict) -> None:
        for m in body.get("markers") or []:
            pid = m.get("producer_id")
            tid = self.by_pid.get(pid) if isinstance(pid, int) else None
            if tid is None:
                continue
            result = "COMMIT" if m.get("transaction_result") else "ABORT"
            txn = self._last(tid)
            if txn is None:
                continue
            for topic in m.get("topics") or []:
                for part in topic.get("partition_indexes") or []:
                    txn.markers.setdefault(tp(topic_of(topic), part), result)

    # control records in fetched logs
    def _transaction_log(self, ev: Event, body: dict) -> None:
        """__transaction_state replicated to a follower: the coordinator's record of each
        transaction's state and partitions (decoded by kanalyze.bodies.internal)."""
        for key, value in self.log.new(body):
            tid = key["fields"].get("transactional_id")
            v = value.get("fields") if value is not None else None
            pid = v.get("producer_id") if isinstance(v, dict) else None
            if not isinstance(tid, str) or not isinstance(v, dict) or not isinstance(pid, int):
                continue
            t = self.logged.get((tid, pid))
            if t is None:
                if len(self.logged) >= self.cap:
                    continue
                t = self.logged[(tid, pid)] = Txn(tid, pid, v.get("producer_epoch"))
                t.source, t.first_ts = "transaction_log", ev.ts_s
            status = v.get("transaction_status")
            state = LOG_STATES.get(status, str(status)) if isinstance(status, int) else str(status)
            if not t.states or t.states[-1] != state:
                t.states.append(state)
            t.state, t.producer_epoch = state, v.get("producer_epoch", t.producer_epoch)
            t.frames.append(ev.frame)
            for tp_ in v.get("transaction_partitions") or []:
                for i in tp_.get("partition_ids") or []:
                    t.partitions.add(tp(tp_.get("topic") or "?", i))
            if state in ("CompleteCommit", "CompleteAbort"):
                t.outcome = "committed" if state == "CompleteCommit" else "aborted"
                t.end_ts = ev.ts_s

    def _fetch_response(self, ev: Event, body: dict) -> None:
        self._transaction_log(ev, body)
        for topic, partition, p in fetch_responses(body):
            for b in batches(p.get("records")):
                if not b.get("is_control"):
                    continue
                pid = b.get("producer_id")
                tid = self.by_pid.get(pid) if isinstance(pid, int) else None
                if tid is None:
                    continue
                for r in b.get("records") or []:
                    ctl = r.get("control") if isinstance(r, dict) else None
                    if isinstance(ctl, dict) and ctl.get("type") in ("COMMIT", "ABORT"):
                        self._mark(tid, tp(topic, partition), ctl["type"], b.get("base_offset"))

    def _last(self, tid: str) -> Txn | None:
        p = self.producers.get(tid)
        if p is not None and p.current is not None and p.current.state.startswith("Prepare"):
            return p.current
        return next((t for t in reversed(self.done) if t.transactional_id == tid), None)

    def _mark(self, tid: str, key: str, kind: str, offset: object) -> None:
        want = "committed" if kind == "COMMIT" else "aborted"
        for t in self.done:
            if (
                t.transactional_id == tid
                and t.outcome == want
                and key in (t.partitions | t.produced)
                and key not in t.markers
            ):
                t.markers[key] = f"{kind}@{offset}"
                return

    def to_json(self) -> list[dict[str, object]]:
        out = [t.to_json() for t in self.done]
        out.extend(p.current.to_json() for p in self.producers.values() if p.current is not None)
        out.extend(t.to_json() for t in self.logged.values())
        return out

    HANDLERS = Handlers(
        requests={
            ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn_request,
            ApiKey.PRODUCE: _produce_request,
            ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn_request,
            ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit_request,
            ApiKey.END_TXN: _end_txn_request,
            ApiKey.WRITE_TXN_MARKERS: _write_txn_markers_request,
        },
        responses={
            ApiKey.FIND_COORDINATOR: _find_coordinator_response,
            ApiKey.INIT_PRODUCER_ID: _init_producer_id_response,
            ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn_response,
            ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn_response,
            ApiKey.END_TXN: _end_txn_response,
            ApiKey.FETCH: _fetch_response,
        },
    )
