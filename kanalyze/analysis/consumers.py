"""Consumers: isolation level, fetched position per partition, commits against what was fetched.

A consumer is a client id whose Fetch requests have replica id -1. Its position on a partition is
the highest of its fetch offsets and the end of the records it received. An OffsetCommit from the
same client id above that position commits what it never consumed (at-most-once risk). A
read_committed consumer that receives records of an aborted transaction which the response's
`aborted_transactions` does not list for filtering would hand aborted data to the application.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from dissectors import ApiKey
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import (
    batch_end,
    batches,
    fetch_replica,
    fetch_requests,
    fetch_responses,
    topic_of,
    tp,
)


@dataclass
class Consumer:
    client_id: str
    isolation: Counter = field(default_factory=Counter)
    positions: dict[str, int] = field(default_factory=dict)
    position_frames: dict[str, int] = field(default_factory=dict)
    commits: dict[str, int] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    fetches: int = 0
    records: int = 0
    aborted_records: int = 0

    def to_json(self) -> dict[str, object]:
        levels = {0: "read_uncommitted", 1: "read_committed"}
        return {
            "client_id": self.client_id,
            "isolation_level": sorted(levels.get(k, str(k)) for k in self.isolation),
            "groups": sorted(self.groups),
            "fetches": self.fetches,
            "records": self.records,
            "aborted_records_received": self.aborted_records,
            "positions": dict(sorted(self.positions.items())),
            "committed": dict(sorted(self.commits.items())),
        }


class ConsumerAnalyzer:
    def __init__(self, findings: Findings, cap: int = 10_000) -> None:
        self.findings = findings
        self.cap = cap
        self.consumers: dict[str, Consumer] = {}
        self.topic_consumers: dict[str, set[str]] = {}

    def consumer(self, client_id: str) -> Consumer | None:
        c = self.consumers.get(client_id)
        if c is None and len(self.consumers) < self.cap:
            c = self.consumers[client_id] = Consumer(client_id)
        return c

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    def _client(self, ev: Event) -> str:
        return ev.ex.client_id or ev.ex.conn.client

    def _fetch_request(self, ev: Event) -> None:
        body = ev.body
        if body is None or fetch_replica(body) >= 0:
            return
        c = self.consumer(self._client(ev))
        if c is None:
            return
        c.fetches += 1
        c.isolation[body.get("isolation_level", 0)] += 1
        for topic, partition, p in fetch_requests(body):
            self.topic_consumers.setdefault(topic, set()).add(c.client_id)
            off = p.get("fetch_offset")
            key = tp(topic, partition)
            if isinstance(off, int) and off >= 0 and off > c.positions.get(key, -1):
                c.positions[key] = off
                c.position_frames[key] = ev.frame

    def _fetch_response(self, ev: Event) -> None:
        req = ev.bodies.request if ev.ex.request is not None else None
        if req is None or fetch_replica(req) >= 0:
            return
        c = self.consumers.get(self._client(ev))
        if c is None:
            return
        read_committed = req.get("isolation_level", 0) == 1
        for topic, partition, p in fetch_responses(ev.body):
            key = tp(topic, partition)
            bs = batches(p.get("records"))
            listed = {
                a.get("producer_id"): a.get("first_offset")
                for a in p.get("aborted_transactions") or []
                if isinstance(a, dict)
            }
            markers = _markers(bs)
            for b in bs:
                end = batch_end(b)
                if end is not None and end > c.positions.get(key, -1):
                    c.positions[key] = end
                    c.position_frames[key] = ev.frame
                if b.get("is_control"):
                    continue
                n = len(b.get("records") or [])
                c.records += n
                if read_committed and b.get("is_transactional"):
                    pid, base = b.get("producer_id"), b.get("base_offset")
                    if (
                        isinstance(base, int)
                        and aborted_batch(markers, pid, base)
                        and not (
                            pid in listed and isinstance(listed[pid], int) and listed[pid] <= base
                        )
                    ):
                        c.aborted_records += n
                        self.findings.add(
                            "warning",
                            "read_committed_got_aborted",
                            f"{c.client_id} (read_committed) received {n} records of an aborted "
                            f"transaction (producer id {pid}) on {key} at offset {base}, "
                            "not listed in aborted_transactions",
                            [ev.frame],
                            ev.ts_s,
                            client_id=c.client_id,
                            partition_key=key,
                            producer_id=pid,
                        )

    def _commit(self, ev: Event) -> None:
        body = ev.body or {}
        c = self.consumers.get(self._client(ev))
        group = body.get("group_id") or ""
        for t in body.get("topics") or []:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                off = p.get("committed_offset")
                key = tp(topic, p.get("partition_index", -1))
                if c is None or not isinstance(off, int):
                    continue
                c.groups.add(group)
                c.commits[key] = off
                pos = c.positions.get(key)
                if pos is not None and off > pos:
                    self.findings.add(
                        "warning",
                        "commit_ahead_of_consumption",
                        f"{c.client_id} commits {key} at {off} for group {group} but has "
                        f"fetched only up to {pos}: records {pos}..{off - 1} count as consumed "
                        "(at-most-once)",
                        [x for x in (c.position_frames.get(key), ev.frame) if x is not None],
                        ev.ts_s,
                        client_id=c.client_id,
                        group_id=group,
                        partition_key=key,
                        committed=off,
                        position=pos,
                    )

    def to_json(self) -> list[dict[str, object]]:
        return [c.to_json() for c in self.consumers.values()]

    HANDLERS = Handlers(
        requests={ApiKey.FETCH: _fetch_request, ApiKey.OFFSET_COMMIT: _commit},
        responses={ApiKey.FETCH: _fetch_response},
        body_required=False,
    )


def _markers(bs: list[dict]) -> dict[object, list[tuple[int, str]]]:
    """Producer id -> its control markers (offset, COMMIT/ABORT) in these batches, in offset
    order."""
    out: dict[object, list[tuple[int, str]]] = {}
    for b in bs:
        if not b.get("is_control") or not isinstance(b.get("base_offset"), int):
            continue
        for r in b.get("records") or []:
            ctl = r.get("control") if isinstance(r, dict) else None
            if isinstance(ctl, dict) and ctl.get("type") in ("COMMIT", "ABORT"):
                out.setdefault(b.get("producer_id"), []).append((b["base_offset"], ctl["type"]))
    for v in out.values():
        v.sort()
    return out


def aborted_batch(markers: dict[object, list[tuple[int, str]]], pid: object, base: int) -> bool:
    """True when the first marker of `pid` after `base` is an ABORT (the batch's transaction
    aborted)."""
    for off, kind in markers.get(pid, []):
        if off > base:
            return kind == "ABORT"
    return False
