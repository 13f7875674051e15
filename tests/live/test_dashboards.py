"""The committed Grafana dashboard and recording rules against a real Prometheus scraping a real
`kanalyze live -i lo --prometheus` run.

The traffic is real TCP on loopback carrying the frames of three captures
(`tests.support.replay`: a stand-in broker socket answers each captured request with its
captured response), so followers (isr.pcap), consumer groups with commits and errors
(lib_group_rebalance, aio_group) are all on the wire without a broker cluster. Every panel's
PromQL, with the dashboard's variables filled as Grafana would, must return series; so must
every recording rule."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.live.conftest import Live, free_port, needs_root
from tests.support.prometheus import Prometheus, binary
from tests.support.replay import replay

pytestmark = [pytest.mark.slow, needs_root]
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "dashboards" / "grafana-kanalyze.json"
RULES = ROOT / "docs" / "dashboards" / "kanalyze-rules.yml"
CAPTURES = [
    ROOT / "captures" / "lib_group_rebalance.pcap",
    ROOT / "captures" / "replication" / "isr.pcap",
    ROOT / "captures" / "aio_group.pcap",
]


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, variables filled as Grafana would (All jobs)."""
    out = []
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", "1m").replace("$job", ".*")
            assert "$" not in expr, expr
            out.append((p["title"], expr))
    return out


def rule_names() -> list[str]:
    return re.findall(r"^\s*- record: (\S+)$", RULES.read_text(), re.M)


def test_dashboard_is_well_formed() -> None:
    d = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
    # Grafana lays panels out by gridPos: none may overlap another, all within 24 columns
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not area & cells, p["title"]
        cells |= area
    assert len(panel_queries()) >= 15
    assert len(rule_names()) >= 8


def test_rules_pass_promtool() -> None:
    p = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_panel_and_rule_returns_series(tmp_path: Path) -> None:
    binary("prometheus")
    kport = free_port()
    mport = free_port({kport})
    shutil.copy(RULES, tmp_path / "kanalyze-rules.yml")
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [kanalyze-rules.yml]\n"
        "scrape_configs:\n"
        f"  - job_name: kanalyze\n    static_configs: [{{targets: ['127.0.0.1:{mport}']}}]\n"
    )
    events = tmp_path / "out.events.ndjson"
    live = Live(
        ["-i", "lo", "--port", str(kport), "-o", str(events), "--format", "events"]
        + ["--prometheus", str(mport)],
        tmp_path,
    )
    prom = None
    try:
        prom = Prometheus(tmp_path, config)
        result: dict[str, int] = {}
        t = threading.Thread(target=lambda: result.setdefault("n", replay(CAPTURES, kport)))
        t.start()
        t.join(120)
        assert result.get("n", 0) > 100
        # every exchange through kanalyze and scraped, then a few more scrapes and rule runs
        deadline = time.monotonic() + 60
        while True:
            got = prom.query('kanalyze_exchanges_total{job="kanalyze"}')
            if got and float(got[0]["value"][1]) >= result["n"]:
                break
            assert time.monotonic() < deadline, f"kanalyze saw {got}, {result['n']} replayed"
            time.sleep(0.5)
        time.sleep(4)
        empty = [(title, q) for title, q in panel_queries() if not prom.query(q)]
        assert not empty, empty
        empty_rules = [r for r in rule_names() if not prom.query(r)]
        assert not empty_rules, empty_rules
        # the values are the capture's: follower lag for isr.pcap's followers, a group's lag
        assert {r["metric"]["replica"] for r in prom.query("kanalyze_follower_lag")} >= {"2", "3"}
        assert {r["metric"]["group"] for r in prom.query("kanalyze_consumer_lag")} >= {
            "lib-group-1"
        }
    finally:
        if prom is not None:
            prom.stop()
        rc, err = live.stop()
    assert rc == 0, err
    # the live event stream (the Loki/index shipping path): one event per exchange
    docs = [json.loads(x) for x in events.read_text().splitlines()]
    assert len(docs) == result["n"]
    assert all(d["kafka.schema"] == "kanalyze.event/1" and d["@timestamp"] for d in docs)
    assert "lib-group" in {t for d in docs for t in d["kafka.topics"]}
    assert {"MEMBER_ID_REQUIRED"} <= {e for d in docs for e in d["kafka.error_codes"]}
