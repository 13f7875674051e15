"""`kanalyze export --format openmetrics`: the `live --prometheus` series of a capture, with the
capture's timestamps, for `promtool tsdb create-blocks-from openmetrics` (docs/dashboards.md).

The capture is replayed through the same `Metrics` class a live run serves
(`metric_replay`) and the registry is read every `step` seconds of capture time, as a
scrape every `step` seconds would have read it. OpenMetrics wants every series' points
together and in time order, so the readings are kept until the end: one float array per
sample series (a series, once seen, is in every later reading; it never goes away), 8 bytes a
value, and written family by family, series by series.

Left out: the `_created` samples (the wall-clock time the counter object was made, not a
capture time) and the capture-health families, which read a live capture's counters.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from prometheus_client import CollectorRegistry

if TYPE_CHECKING:
    from dissectors.context import DecodeContext
    from kanalyze.session import Session

# family type -> the sample suffixes it owns, in the order a point is written
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}


@dataclass(slots=True)
class _Series:
    """One labelled metric of a family: its sample series (name suffix, le) -> values."""

    start: int  # index of the first reading it appears in
    samples: dict[tuple[str, str | None], array] = field(default_factory=dict)


@dataclass(slots=True)
class _Family:
    kind: str
    help: str
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)


class Readings:
    """Registry readings over capture time, written as one OpenMetrics text."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.times: list[float] = []
        self.families: dict[str, _Family] = {}

    def read(self, ts_s: float) -> None:
        """Take a reading at capture time `ts_s` (seconds)."""
        idx = len(self.times)
        self.times.append(ts_s)
        for fam in self.registry.collect():
            suffixes = _SUFFIXES.get(fam.type)
            if suffixes is None:
                continue
            f = self.families.get(fam.name)
            if f is None:
                f = self.families[fam.name] = _Family(fam.type, fam.documentation)
            for s in fam.samples:
                suffix = s.name[len(fam.name) :]
                if suffix not in suffixes:
                    continue  # _created, _gsum, ...
                le = s.labels.get("le")
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                ser = f.series.get(key)
                if ser is None:
                    ser = f.series[key] = _Series(idx)
                vals = ser.samples.get((suffix, le))
                if vals is None:
                    vals = ser.samples[(suffix, le)] = array("d")
                vals.append(s.value)

    def write(self, out: BinaryIO) -> int:
        """The OpenMetrics text, ending with `# EOF`; returns the number of samples written."""
        n = 0
        for name, f in self.families.items():
            if not f.series:
                continue
            out.write(f"# HELP {name} {_escape_help(f.help)}\n# TYPE {name} {f.kind}\n".encode())
            for key in sorted(f.series):
                ser = f.series[key]
                order = sorted(ser.samples, key=_sample_order)
                lines = []
                for suffix, le in order:
                    labels = key if le is None else (*key, ("le", le))
                    lines.append((f"{name}{suffix}{_labels(labels)} ", ser.samples[(suffix, le)]))
                for j, ts in enumerate(self.times[ser.start :]):
                    stamp = f" {_stamp(ts)}\n"
                    buf = [
                        f"{head}{_value(vals[j])}{stamp}" for head, vals in lines if j < len(vals)
                    ]
                    n += len(buf)
                    out.write("".join(buf).encode())
        out.write(b"# EOF\n")
        return n


def _sample_order(k: tuple[str, str | None]) -> tuple[int, float]:
    suffix, le = k
    rank = {"_bucket": 0, "_count": 1, "_sum": 2}.get(suffix, 0)
    return rank, (math.inf if le == "+Inf" else float(le)) if le is not None else 0.0


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
    return f"{{{inner}}}" if inner else ""


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def _stamp(ts: float) -> str:
    """Seconds with millisecond precision (Prometheus' resolution)."""
    ms = round(ts * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}"


def write_capture(session: Session, ctx: DecodeContext, step_s: float, out: BinaryIO) -> int:
    """Replay `session` through `Metrics`, reading it every `step_s` seconds; write the text."""
    from kanalyze.analysis.events import analysis_decoder, ordered_events
    from kanalyze.export.metric_replay import replay
    from kanalyze.metrics import Metrics

    metrics = Metrics()
    readings = Readings(metrics.registry)
    events = ordered_events(session.exchanges(), analysis_decoder(ctx))
    replay(events, metrics, step_s, readings.read)
    return readings.write(out)
