"""`kanalyze export --format openmetrics`: the live series of a capture with its timestamps; valid
OpenMetrics, final values equal to counts from the NDJSON, and a real backfill: promtool turns the
text into blocks and a real Prometheus answers queries over them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.prometheus import Prometheus, binary

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = [
    ROOT / "captures" / "lib_group_rebalance.pcap",
    ROOT / "captures" / "replication" / "isr.pcap",
    ROOT / "captures" / "aio_group.pcap",
]


def kanalyze(*args: str) -> bytes:
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", *args], capture_output=True, cwd=ROOT, check=False
    )
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


def ndjson(cap: Path) -> list[dict]:
    return [json.loads(x) for x in kanalyze("export", str(cap)).splitlines()]


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float


SAMPLE = re.compile(r"([a-z_]+)(?:\{(.*)\})? (\S+) (\d+\.\d{3})")
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse(text: str) -> dict[str, list[Sample]]:
    """Samples per family (`# TYPE` line). promtool is the validator (the backfill test);
    prometheus_client's parser rejects histograms with more than one point per series."""
    fams: dict[str, list[Sample]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            current = fams.setdefault(line.split()[2], [])
        elif line.startswith("#"):
            continue
        else:
            m = SAMPLE.fullmatch(line)
            assert m and current is not None, line
            labels = dict(LABEL.findall(m.group(2) or ""))
            current.append(Sample(m.group(1), labels, float(m.group(3)), float(m.group(4))))
    return fams


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda c: c.name)
def test_openmetrics_is_valid_and_agrees_with_ndjson(cap: Path) -> None:
    text = kanalyze("export", "--format", "openmetrics", "--step", "0.01", str(cap)).decode()
    assert text.endswith("# EOF\n")
    fams = parse(text)
    ex = ndjson(cap)
    first = min(d["request"]["ts"] if d["request"] else d["response"]["ts"] for d in ex)
    last = max(max(d[s]["ts"] for s in ("request", "response") if d[s]) for d in ex)
    # every timestamp inside the capture (the last reading is the millisecond after it), and
    # each series' points strictly in time order
    by_series: dict[tuple, list[float]] = {}
    for samples in fams.values():
        for s in samples:
            assert first <= s.timestamp <= last + 0.002, (s, first, last)
            by_series.setdefault((s.name, tuple(sorted(s.labels.items()))), []).append(
                float(s.timestamp)
            )
    for pts in by_series.values():
        assert pts == sorted(set(pts))
    # the final reading of the request counter = the exchanges of the NDJSON, by label set
    final: dict[tuple, float] = {}
    for s in fams["kanalyze_requests"]:
        if s.name == "kanalyze_requests_total":
            final[
                (s.labels["api"], s.labels["version"], s.labels["client_id"], s.labels["status"])
            ] = s.value
    want = Counter(
        (
            d["api"] or "unknown",
            "" if d["api_version"] is None else str(d["api_version"]),
            d["client_id"] or "",
            d["status"],
        )
        for d in ex
    )
    assert final == dict(want)
    # more than one reading: the series move over capture time
    assert max(len(p) for p in by_series.values()) > 1


def test_bad_step_is_one_line_exit_2() -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "kanalyze.cli",
            "export",
            "--format",
            "openmetrics",
            "--step",
            "0",
            str(CAPTURES[0]),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("kanalyze export: error: argument --step")


@pytest.mark.slow
def test_promtool_backfill_then_prometheus_queries(tmp_path: Path) -> None:
    """The documented backfill (docs/dashboards.md), end to end with the real tools."""
    promtool = binary("promtool")
    binary("prometheus")
    data = tmp_path / "data"
    data.mkdir()
    expected: dict[str, float] = {}
    last_ts = 0.0
    for cap in CAPTURES:
        om = tmp_path / f"{cap.stem}.om"
        om.write_bytes(kanalyze("export", "--format", "openmetrics", "--step", "1", str(cap)))
        p = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        ex = ndjson(cap)
        expected[cap.stem] = len(ex)
        last_ts = max(last_ts, *(d["response"]["ts"] for d in ex if d["response"]))
    prom = Prometheus(tmp_path, data=data)
    try:
        # every capture's exchanges, each counted at the end of its own capture
        for cap in CAPTURES:
            ex = ndjson(cap)
            end = max(max(d[s]["ts"] for s in ("request", "response") if d[s]) for d in ex) + 0.002
            clients = sorted({d["client_id"] for d in ex if d["client_id"]})
            expr = f'sum(kanalyze_requests_total{{client_id=~"{"|".join(clients)}"}})'
            got = prom.query(expr, at=end)
            assert got, expr
            assert float(got[0]["value"][1]) == expected[cap.stem], cap.name
        # the series a dashboard draws are there: follower lag (isr.pcap), consumer lag, latency
        assert prom.query("kanalyze_follower_lag", at=last_ts + 1)
        assert prom.query("max_over_time(kanalyze_consumer_lag[1y])", at=last_ts + 1)
        q = (
            "histogram_quantile(0.99, sum by (le, api) "
            "(increase(kanalyze_request_latency_seconds_bucket[1y])))"
        )
        assert {r["metric"]["api"] for r in prom.query(q, at=last_ts + 1)} >= {"Fetch", "Produce"}
    finally:
        prom.stop()


def test_header_only_does_not_apply() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--format", "openmetrics", "--header-only"]
        + [str(CAPTURES[0])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "kanalyze: error: --header-only does not apply to --format openmetrics "
        "(the series are read from the decoded bodies)"
    ]
