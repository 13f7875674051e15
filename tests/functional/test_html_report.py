"""`kanalyze report --html`: one self-contained file, opened in headless Chromium (Debian
`chromium`, installed by .ci/run): no JavaScript error, every chart rendered, a screenshot that is
not blank."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support.png import pixels

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = [
    ROOT / "captures" / "lib_group_rebalance.pcap",
    ROOT / "captures" / "replication" / "isr.pcap",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not installed (Debian package chromium)")


def browse(html: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp / 'profile'}",
            "--virtual-time-budget=20000",
            *args,
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def write_report(cap: Path, out: Path) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", "--html", str(out), str(cap)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.slow
@pytest.mark.parametrize("cap", CAPTURES, ids=lambda c: c.name)
def test_html_report_renders_in_chromium(cap: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")  # the html extra; in the test extra
    out = tmp_path / "report.html"
    assert write_report(cap, out) == ""  # the page instead of the text
    page = out.read_text()
    assert "<h2>Findings</h2>" in page and "<h2>Replication (final)</h2>" in page
    # self-contained: plotly's bundle is embedded whole, and nothing outside it refers to the
    # network (the bundle's own strings name plotly.com; no chart here asks for a resource)
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()) == 1
    ours = page.replace(get_plotlyjs(), "")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", ours)
    assert "<link" not in ours and "<script src" not in ours
    dom = browse(out, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    status = re.search(r'<div id="kanalyze-status"([^>]*)>', dom.stdout)
    assert status, dom.stdout[-2000:]
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', status.group(1)))
    assert attrs["done"] == "1" and attrs["errors"] == "", attrs
    assert int(attrs["charts"]) >= 4 and attrs["rendered"] == attrs["charts"], attrs
    titles = re.findall(r'<div class="chart" id="chart-\d+" title="([^"]*)"', page)
    assert any(t.startswith("Replication") for t in titles) and "Latency per API" in titles
    if cap.name == "lib_group_rebalance.pcap":
        assert "Consumer lag" in titles
        assert "Records produced per second, per topic" in titles
    else:
        assert any("follower" in t for t in re.findall(r'"name":"([^"]*)"', page))
    shot = tmp_path / "shot.png"
    p = browse(out, tmp_path, "--window-size=1000,1200", f"--screenshot={shot}")
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    w, h, rows = pixels(shot.read_bytes())
    assert (w, h) == (1000, 1200)
    colors: Counter = Counter()
    for r in rows[::4]:
        for i in range(0, len(r), 16):
            colors[r[i : i + 3]] += 1
    background = colors.most_common(1)[0][1]
    drawn = sum(colors.values()) - background
    assert len(colors) > 50 and drawn > 0.02 * sum(colors.values()), (len(colors), drawn)


def test_html_with_json_writes_the_same_document(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    cap = CAPTURES[1]
    out = tmp_path / "r.html"
    args = [sys.executable, "-m", "kanalyze.cli", "report", "--json", str(cap)]
    plain = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    both = subprocess.run(
        [*args, "--html", str(out)], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert json.loads(both) == json.loads(plain)
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_unwritable_html_is_one_line_exit_1(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "missing-dir" / "r.html"
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "report", "--html", str(out), str(CAPTURES[1])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 1
    assert len(p.stderr.strip().splitlines()) == 1 and "missing-dir" in p.stderr
