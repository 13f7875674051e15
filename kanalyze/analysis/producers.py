"""Delivery-semantics audit per producer: acks, idempotence, sequence continuity, retries.

A producer is (client id, producer id, producer epoch); a non-idempotent one has producer id -1.
Per partition it tracks the batches' base sequences: the same (pid, epoch, sequence) sent again
is a duplicate, a base sequence above the next expected one a gap, one below it (not an exact
repeat) an overlap. A non-idempotent batch sent again (same CRC, count and first timestamp) is a
retry that may duplicate; more than one request in flight on a connection with retries may reorder.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from dissectors import ApiKey, error_name
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import batch_count, produce_partitions, produce_results, tp

OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER = 45, 46
SEQUENCE_ERRORS = frozenset({OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER})


@dataclass
class PartitionSeq:
    first_sequence: int | None = None
    last_sequence: int | None = None
    next_sequence: int | None = None
    batches: int = 0
    records: int = 0
    duplicates: int = 0
    gaps: int = 0
    overlaps: int = 0
    retries: int = 0
    sent: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # base sequence -> (count, frame)
    acked: set[int] = field(default_factory=set)  # base sequences answered without error
    recent: deque = field(
        default_factory=lambda: deque(maxlen=64)
    )  # non-idempotent batch identities

    def to_json(self) -> dict[str, object]:
        return {
            "first_sequence": self.first_sequence,
            "last_sequence": self.last_sequence,
            "batches": self.batches,
            "records": self.records,
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "overlaps": self.overlaps,
            "retries": self.retries,
        }


@dataclass
class Producer:
    client_id: str | None
    producer_id: int
    producer_epoch: int
    acks: Counter = field(default_factory=Counter)
    transactional_id: str | None = None
    connections: set[int] = field(default_factory=set)
    partitions: dict[str, PartitionSeq] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    requests: int = 0
    max_in_flight: int = 0
    first_frame: int | None = None

    def to_json(self) -> dict[str, object]:
        acks_levels = sorted(self.acks)
        return {
            "client_id": self.client_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "acks": acks_levels[0] if len(acks_levels) == 1 else (acks_levels or None),
            "idempotent": self.producer_id >= 0,
            "transactional_id": self.transactional_id,
            "connections": sorted(self.connections),
            "requests": self.requests,
            "max_in_flight": self.max_in_flight,
            "errors": dict(sorted(self.errors.items())),
            "partitions": {k: v.to_json() for k, v in sorted(self.partitions.items())},
        }


class ProducerAnalyzer:
    def __init__(self, findings: Findings, cap: int = 10_000) -> None:
        self.findings = findings
        self.cap = cap
        self.producers: dict[tuple[str | None, int, int], Producer] = {}
        self.in_flight: Counter[int] = (
            Counter()
        )  # connection -> produce requests awaiting a response
        # request's bodies id -> (producer, tp, base seq; -1 for a non-idempotent batch): who a
        # response's per-partition results (acks, errors) belong to
        self.by_request: dict[int, list[tuple[Producer, str, int]]] = {}
        self.topic_producers: dict[str, set[str]] = {}

    def producer(self, client_id: str | None, pid: int, epoch: int) -> Producer | None:
        key = (client_id, pid, epoch)
        p = self.producers.get(key)
        if p is None:
            if len(self.producers) >= self.cap:
                return None
            p = self.producers[key] = Producer(client_id, pid, epoch)
        return p

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    def _request(self, ev: Event) -> None:
        ex, body = ev.ex, ev.body or {}
        conn = ex.conn.id
        if ex.acks not in (0, None):
            self.in_flight[conn] += 1
        touched: list[tuple[Producer, str, int]] = []
        seen: set[int] = set()
        for topic, partition, bs in produce_partitions(body):
            key = tp(topic, partition)
            self.topic_producers.setdefault(topic, set()).add(ex.client_id or ex.conn.client)
            for b in bs:
                pid, epoch, seq = (
                    b.get("producer_id", -1),
                    b.get("producer_epoch", -1),
                    b.get("base_sequence", -1),
                )
                if not isinstance(pid, int):
                    continue
                prod = self.producer(ex.client_id, pid, epoch if pid >= 0 else -1)
                if prod is None:
                    continue
                if id(prod) not in seen:
                    seen.add(id(prod))
                    prod.requests += 1
                    prod.connections.add(conn)
                    prod.max_in_flight = max(prod.max_in_flight, self.in_flight[conn])
                    if ex.acks is not None:
                        prod.acks[ex.acks] += 1
                    if prod.first_frame is None:
                        prod.first_frame = ev.frame
                if body.get("transactional_id"):
                    prod.transactional_id = body["transactional_id"]
                ps = prod.partitions.setdefault(key, PartitionSeq())
                n = batch_count(b)
                ps.batches += 1
                ps.records += n
                if pid >= 0 and isinstance(seq, int) and seq >= 0:
                    self._sequence(ev, prod, key, ps, seq, n)
                    touched.append((prod, key, seq))
                else:
                    touched.append((prod, key, -1))
                    ident = (b.get("crc"), n, b.get("base_timestamp"))
                    if ident in ps.recent:
                        ps.retries += 1
                        self.findings.add(
                            "warning",
                            "non_idempotent_retry",
                            f"{prod.client_id}: batch of {n} records to {key} sent again without "
                            "idempotence: the partition may hold it twice",
                            [ev.frame],
                            ev.ts_s,
                            client_id=prod.client_id,
                            partition_key=key,
                        )
                        if self.in_flight[conn] > 1:
                            self.findings.add(
                                "warning",
                                "reorder_risk",
                                f"{prod.client_id}: retry with {self.in_flight[conn]} produce "
                                f"requests in flight on connection {conn}: "
                                "batches may be reordered",
                                [ev.frame],
                                ev.ts_s,
                                client_id=prod.client_id,
                            )
                    ps.recent.append(ident)
        self.by_request[id(ev.bodies)] = touched

    def _sequence(
        self, ev: Event, prod: Producer, key: str, ps: PartitionSeq, seq: int, n: int
    ) -> None:
        last = seq + max(n, 1) - 1
        who = f"{prod.client_id} (producer id {prod.producer_id}, epoch {prod.producer_epoch})"
        if ps.first_sequence is None:
            ps.first_sequence = seq
        if seq in ps.sent:
            ps.duplicates += 1
            earlier = ps.sent[seq][1]
            was_acked = seq in ps.acked
            self.findings.add(
                "warning" if was_acked else "info",
                "duplicate_sequence",
                f"{who}: batch {key} sequence {seq} sent again"
                + (
                    " after it was acknowledged"
                    if was_acked
                    else " (retry of an unanswered batch; the broker deduplicates)"
                ),
                [earlier, ev.frame],
                ev.ts_s,
                producer_id=prod.producer_id,
                producer_epoch=prod.producer_epoch,
                partition_key=key,
                sequence=seq,
            )
        elif ps.next_sequence is not None and seq > ps.next_sequence:
            ps.gaps += 1
            self.findings.add(
                "error",
                "sequence_gap",
                f"{who}: {key} sequence jumps from {ps.next_sequence} to {seq} "
                f"({seq - ps.next_sequence} missing)",
                [ev.frame],
                ev.ts_s,
                producer_id=prod.producer_id,
                producer_epoch=prod.producer_epoch,
                partition_key=key,
                expected=ps.next_sequence,
                sequence=seq,
            )
        elif ps.next_sequence is not None and seq < ps.next_sequence:
            ps.overlaps += 1
            self.findings.add(
                "warning",
                "sequence_overlap",
                f"{who}: {key} sequence {seq} overlaps batches already sent "
                f"(next was {ps.next_sequence})",
                [ev.frame],
                ev.ts_s,
                producer_id=prod.producer_id,
                partition_key=key,
                sequence=seq,
            )
        if seq not in ps.sent:
            ps.sent[seq] = (n, ev.frame)
            if len(ps.sent) > 4096:
                for k in list(ps.sent)[:1024]:
                    del ps.sent[k]
        if ps.last_sequence is None or last > ps.last_sequence:
            ps.last_sequence = last
        ps.next_sequence = max(ps.next_sequence or 0, last + 1)

    def _response(self, ev: Event) -> None:
        ex = ev.ex
        if ex.request is not None and ex.acks not in (0, None) and self.in_flight[ex.conn.id] > 0:
            self.in_flight[ex.conn.id] -= 1
        touched = self.by_request.pop(id(ev.bodies), [])
        results = {tp(t, p): r for t, p, r in produce_results(ev.body)}
        producers = {id(p): p for p, _k, _s in touched}
        for prod, key, seq in touched:
            r = results.get(key)
            if r is None:
                continue
            err = r.get("error_code", 0)
            if not err and seq >= 0:
                prod.partitions[key].acked.add(seq)
        for key, r in results.items():
            err = r.get("error_code", 0)
            if not err:
                continue
            # each producer once, however many batches (legacy: messages) it sent to the key
            owners = list({id(p): p for p, k, _s in touched if k == key}.values()) or list(
                producers.values()
            )
            for prod in owners:
                prod.errors[error_name(err)] += 1
            sev = "error" if err in SEQUENCE_ERRORS else "warning"
            self.findings.add(
                sev,
                "produce_error",
                f"{ex.client_id}: Produce to {key} failed with {error_name(err)} ({err})",
                [
                    f
                    for f in (ex.request.pdu.last_pkt if ex.request else None, ev.frame)
                    if f is not None
                ],
                ev.ts_s,
                client_id=ex.client_id,
                partition_key=key,
                error=error_name(err),
            )

    def to_json(self) -> list[dict[str, object]]:
        return [
            p.to_json() for p in sorted(self.producers.values(), key=lambda p: p.first_frame or 0)
        ]

    HANDLERS = Handlers(
        requests={ApiKey.PRODUCE: _request},
        responses={ApiKey.PRODUCE: _response},
        body_required=False,
    )
