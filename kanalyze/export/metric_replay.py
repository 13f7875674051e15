"""Replays a capture through the live Prometheus series (`kanalyze.metrics.Metrics`) in wire order.

`kanalyze live --prometheus` feeds every exchange to `Metrics` when it completes. Offline outputs
(OpenMetrics backfill, the HTML report's charts) must show the same numbers a live run would
have shown, so they feed the very same class the same way: each exchange at its last frame
(the response, or the request when nothing answered), bodies decoded as the report decodes them
(record batches only where HW/LEO needs them), in the wire order of `ordered_events`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kanalyze.analysis.events import Event
from kanalyze.correlation import Exchange, Message
from kanalyze.metrics import Metrics

MS = 1_000_000
STALENESS_NS = 300 * 10**9


def _side(msg: Message | None, body: dict | None) -> dict | None:
    if msg is None:
        return None
    return {"size": msg.pdu.size + 4, "body": body}


def encoded_view(ev: Event) -> dict[str, object]:
    """The parts of the NDJSON encoding `Metrics.observe` reads, built from the event's bodies."""
    ex: Exchange = ev.ex
    lat = ex.latency_ns
    return {
        "latency_ms": None if lat is None else round(lat / 1e6, 3),
        "request": _side(ex.request, ev.bodies.request if ex.request is not None else None),
        "response": _side(ex.response, ev.bodies.response if ex.response is not None else None),
    }


def is_last(ev: Event) -> bool:
    """The event that completes its exchange: the response, or a request nothing answered."""
    return not ev.is_request or ev.ex.response is None


class MetricReplay:
    """Feeds `metrics` from wire-ordered events and calls `on_tick(ts_s)` at every multiple of
    `step_s` seconds the capture crosses, before the first event past it, so a snapshot taken
    there is what a scrape at that moment of a live run would have read (None: no ticks)."""

    def __init__(
        self, metrics: Metrics, step_s: float, on_tick: Callable[[float], None] | None
    ) -> None:
        self.metrics = metrics
        # whole milliseconds: Prometheus keeps millisecond timestamps, and two ticks must not
        # round to the same one
        self.step_ns = max(1, round(step_s * 1e3)) * MS
        self.on_tick = on_tick
        self.next_tick: int | None = None
        self.last_ns: int | None = None
        self.fed = 0
        # a silence longer than Prometheus' staleness window (5 minutes) is not filled with
        # ticks: the series go stale there, as they would if the capture had stopped
        self.max_idle_ticks = max(1, -(-STALENESS_NS // self.step_ns))

    def feed(self, ev: Event) -> None:
        if not is_last(ev):
            return
        ts = ev.ts
        if self.on_tick is not None:
            self._ticks(ts, self.on_tick)
        self.metrics.observe(ev.ex, encoded_view(ev))
        self.fed += 1
        self.last_ns = ts if self.last_ns is None or ts > self.last_ns else self.last_ns

    def _ticks(self, ts: int, on_tick: Callable[[float], None]) -> None:
        """Every step boundary up to `ts`, before the exchange at `ts` is observed."""
        if self.next_tick is None:
            self.next_tick = (ts // self.step_ns + 1) * self.step_ns
        idle = 0
        while self.next_tick <= ts:
            if idle == self.max_idle_ticks:  # a long silence: resume at the step before this event
                self.next_tick = (ts // self.step_ns) * self.step_ns
                on_tick(self.next_tick / 1e9)
                self.next_tick += self.step_ns
                return
            on_tick(self.next_tick / 1e9)
            self.next_tick += self.step_ns
            idle += 1

    def finish(self) -> None:
        """A last tick just after the last exchange (the next millisecond), so the final values
        are in; every earlier tick is at or before that exchange, so none coincides."""
        if self.last_ns is not None and self.on_tick is not None:
            self.on_tick((self.last_ns // MS + 1) * MS / 1e9)


def replay(
    events: Iterable[Event], metrics: Metrics, step_s: float, on_tick: Callable[[float], None]
) -> int:
    """Feed every event, tick at each step and at the end; returns the exchanges fed."""
    r = MetricReplay(metrics, step_s, on_tick)
    for ev in events:
        r.feed(ev)
    r.finish()
    return r.fed
