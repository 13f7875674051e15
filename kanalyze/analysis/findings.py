"""Findings: what an analyzer tells an operator, with the frames that show it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SEVERITIES = ("info", "warning", "error")


@dataclass(slots=True)
class Finding:
    severity: str
    kind: str
    message: str
    frames: list[int]
    ts: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "severity": self.severity,
            "kind": self.kind,
            "message": self.message,
            "frames": sorted({f for f in self.frames if f is not None}),
            "ts": self.ts,
        }
        out.update(self.details)
        return out


class Findings:
    """A bounded collector: at most `cap_per_kind` findings of each kind are kept, the rest
    counted."""

    def __init__(self, cap_per_kind: int = 200) -> None:
        self.items: list[Finding] = []
        self.per_kind: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.cap = cap_per_kind

    def add(
        self,
        severity: str,
        kind: str,
        message: str,
        frames: list[int],
        ts: float | None = None,
        **details: object,
    ) -> None:
        assert severity in SEVERITIES, severity
        self.per_kind[kind] += 1
        if self.per_kind[kind] > self.cap:
            self.dropped[kind] += 1
            return
        self.items.append(Finding(severity, kind, message, list(frames), ts, dict(details)))

    def to_json(self) -> list[dict[str, object]]:
        order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
        items = sorted(self.items, key=lambda f: (order[f.severity], min(f.frames, default=0)))
        out = [f.to_json() for f in items]
        out.extend(
            {
                "severity": "info",
                "kind": "findings_dropped",
                "message": f"{n} more {kind} findings not listed",
                "frames": [],
                "ts": None,
                "dropped_kind": kind,
                "count": n,
            }
            for kind, n in sorted(self.dropped.items())
        )
        return out
