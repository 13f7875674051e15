"""One partition's replication state as the wire shows it: leader LEO and HW, followers' LEOs
and HWs, the ISR, produced batches waiting for the HW, and the rules that move them (HW only
forward unless the leader says otherwise, the inferred HW from the in-sync followers). Apart
from `replication`, which feeds it events, so that the state and its offset rules read on their
own."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kanalyze.analysis.events import Event
from kanalyze.analysis.summary import percentile


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
    pending: list[Pending] = field(default_factory=list)  # mutated through the methods below
    # `pending` by request frame, each list in `pending`'s order: a response finds its batch
    # without a scan of every pending batch (thousands where the HW never moves)
    by_frame: dict[int, list[Pending]] = field(default_factory=dict, repr=False)
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

    # ------------------------------------------------------------------ pending batches
    def add_pending(self, p: Pending) -> None:
        self.pending.append(p)
        self.by_frame.setdefault(p.frame, []).append(p)

    def drop_pending(self, p: Pending) -> None:
        """`pending.remove(p)`: the first batch equal to `p` (equal ones share its frame)."""
        self.pending.remove(p)
        same = self.by_frame[p.frame]
        same.remove(p)
        if not same:
            del self.by_frame[p.frame]

    def pending_at(self, frame: int) -> Pending | None:
        """The first pending batch whose request ended in `frame`."""
        same = self.by_frame.get(frame)
        return same[0] if same else None

    def _index_pending(self) -> None:
        self.by_frame = {}
        for p in self.pending:
            self.by_frame.setdefault(p.frame, []).append(p)

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
        before = len(self.pending)
        self.pending = [
            p for p in self.pending if not (p.hw_ts is not None and (p.answered or p.acks != -1))
        ]
        if len(self.pending) > 10_000:
            del self.pending[: len(self.pending) - 10_000]
        if len(self.pending) != before:
            self._index_pending()

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
        for p in other.pending:
            self.add_pending(p)
        self.hw_latency_ms.extend(other.hw_latency_ms)
        self.acks_all_total_ms.extend(other.acks_all_total_ms)
        self.acks_all_append_ms.extend(other.acks_all_append_ms)
        self.acks_all_replication_ms.extend(other.acks_all_replication_ms)


def latency_stats(values: list[float]) -> dict[str, object]:
    v = sorted(values)
    return {
        "count": len(v),
        "p50": percentile(v, 50),
        "p90": percentile(v, 90),
        "p99": percentile(v, 99),
        "max": v[-1] if v else None,
    }
