"""The bounded series behind the dashboard outputs: replay ticks (OpenMetrics readings), thinned
points and doubling time buckets (HTML charts)."""

from __future__ import annotations

from types import SimpleNamespace

from kanalyze.export.html_series import Binned, Thinned
from kanalyze.export.metric_replay import MetricReplay

S = 1_000_000_000


class _Metrics:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def observe(self, ex: object, d: dict) -> None:
        self.seen.append(ex.n)  # type: ignore[attr-defined]


def _ev(ts_ns: int, n: int) -> SimpleNamespace:
    """An unanswered request: the event that completes its exchange."""
    ex = SimpleNamespace(n=n, request=None, response=None, latency_ns=None)
    return SimpleNamespace(is_request=True, ex=ex, ts=ts_ns)


def test_ticks_every_step_then_stale_after_five_minutes_of_silence() -> None:
    ticks: list[float] = []
    m = _Metrics()
    r = MetricReplay(m, 1.0, ticks.append)  # type: ignore[arg-type]
    for n, ts in enumerate((S // 2, 5 * S // 2, 1000 * S + 250_000_000)):
        r.feed(_ev(ts, n))  # type: ignore[arg-type]
    r.finish()
    assert m.seen == [0, 1, 2]
    # 1 and 2 s before the second exchange; 300 readings (the staleness window) into the
    # silence, then one just before the third exchange; the last just after it
    assert ticks[:2] == [1.0, 2.0]
    assert ticks[2:302] == [float(s) for s in range(3, 303)]
    assert ticks[302:] == [1000.0, 1000.251]


def test_no_ticks_without_a_callback() -> None:
    m = _Metrics()
    r = MetricReplay(m, 0.001, None)  # type: ignore[arg-type]
    for n in range(3):
        r.feed(_ev(n * S, n))  # type: ignore[arg-type]
    r.finish()
    assert m.seen == [0, 1, 2]


def test_thinned_keeps_a_bounded_evenly_spaced_sample() -> None:
    t = Thinned(cap=100)
    for i in range(10_000):
        t.add(float(i), float(i))
    assert 50 <= len(t.xs) <= 100
    assert t.xs[0] == 0.0
    steps = {b - a for a, b in zip(t.xs, t.xs[1:], strict=False)}
    assert steps == {float(t.stride)}


def test_binned_doubles_the_bucket_width_and_keeps_the_sums() -> None:
    b = Binned(width_ns=1_000_000, cap=64)
    for i in range(1000):
        b.add("t", i * 1_000_000, 2)
    assert b.count <= 64 and b.width_ns > 1_000_000
    assert sum(b.sums["t"].values()) == 2000
    rates = b.rates(span_ns=999 * 1_000_000, bins=10)
    xs, ys = rates["t"]
    assert len(xs) <= 11
    w = b.width_ns / 1e9
    assert abs(sum(y * w for y in ys) - 2000) < 1e-6
