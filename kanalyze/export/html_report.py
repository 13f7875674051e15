"""`kanalyze report --html OUT`: the report as one self-contained HTML file with charts.

plotly's bundled JavaScript is embedded whole (no network needed to open the file, ~4.6 MB);
the figures are plain plotly JSON built here, so only the bundle is taken from the plotly
package. Charts: per-partition leader LEO / HW / LSO / follower LEOs over time (the report's
replication timelines), latency of every exchange per API, records produced and fetched per
topic per second, consumer lag per group over time; then the report's tables (findings,
APIs, errors, replication, producers, transactions, groups, lag, clients). Each chart is drawn
only when the capture has data for it; the page says which were left out and why. A small
script records JavaScript errors and how many charts rendered in `#kanalyze-status` (the
browser test reads it).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kanalyze.export.html_series import ChartSeries

if TYPE_CHECKING:
    from kanalyze.session import Session

MAX_PARTITION_CHARTS = 12
MAX_TRACES = 30


class HtmlUnavailable(RuntimeError):
    """plotly (the `html` extra) is not installed."""


def plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as e:
        raise HtmlUnavailable("--html needs plotly (pip install 'kanalyze[html]')") from e
    return get_plotlyjs()


def _t(ts: float) -> str:
    """Capture time for a date axis (UTC, milliseconds)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _layout(title: str, ytitle: str, **extra: object) -> dict:
    return {
        "title": {"text": title},
        "xaxis": {"type": "date", "title": {"text": "capture time (UTC)"}},
        "yaxis": {"title": {"text": ytitle}, **extra},
        "height": 380,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
        "showlegend": True,
    }


def _line(
    name: str, xs: list[float], ys: list, shape: str = "hv", mode: str = "lines+markers"
) -> dict:
    return {
        "type": "scatter",
        "mode": mode,
        "name": name,
        "x": [_t(x) for x in xs],
        "y": ys,
        "line": {"shape": shape},
    }


def replication_charts(doc: dict) -> tuple[list[dict], list[str]]:
    parts = [p for p in doc.get("replication", []) if p.get("timeline")]
    parts.sort(key=lambda p: -len(p["timeline"]))
    notes = []
    if not parts:
        notes.append("replication: no Produce or Fetch traffic with offsets")
    if len(parts) > MAX_PARTITION_CHARTS:
        notes.append(
            f"replication: {len(parts) - MAX_PARTITION_CHARTS} more partitions not drawn "
            "(the busiest are; all are in the tables below)"
        )
    charts = []
    for p in parts[:MAX_PARTITION_CHARTS]:
        tl = p["timeline"]
        xs = [e["ts"] for e in tl]
        traces = [
            _line("leader LEO", xs, [e["leader_leo"] for e in tl]),
            _line("high watermark", xs, [e["high_watermark"] for e in tl]),
        ]
        if any(e.get("last_stable_offset") is not None for e in tl):
            traces.append(
                _line("last stable offset", xs, [e.get("last_stable_offset") for e in tl])
            )
        followers = sorted({f for e in tl for f in (e.get("followers") or {})}, key=str)
        for f in followers:
            ys = [((e.get("followers") or {}).get(f) or {}).get("leo") for e in tl]
            traces.append(_line(f"follower {f} LEO", xs, ys))
        name = f"{p['topic']}-{p['partition']}"
        charts.append(
            {
                "title": f"Replication {name}",
                "data": traces,
                "layout": _layout(f"Replication progress: {name}", "offset"),
            }
        )
    return charts, notes


def latency_chart(series: ChartSeries) -> tuple[list[dict], list[str]]:
    if not series.latency:
        return [], ["latency: no answered requests"]
    traces = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": api,
            "x": [_t(x) for x in s.xs],
            "y": s.ys,
            "marker": {"size": 4},
        }
        for api, s in sorted(series.latency.items())
    ]
    thinned = [api for api, s in series.latency.items() if s.stride > 1]
    notes = (
        [f"latency: {', '.join(sorted(thinned))} thinned to every n-th exchange"] if thinned else []
    )
    return [
        {
            "title": "Latency per API",
            "data": traces,
            "layout": _layout("Latency per API (every exchange)", "ms", type="log"),
        }
    ], notes


def throughput_charts(series: ChartSeries) -> tuple[list[dict], list[str]]:
    charts, notes = [], []
    for title, binned in (
        ("Records produced per second, per topic", series.produced),
        ("Records fetched by consumers per second, per topic", series.fetched),
    ):
        rates = binned.rates(series.span_ns)
        if not rates:
            notes.append(f"{title.lower()}: none in this capture")
            continue
        width_ms = binned.width_ns / 1e6  # bars as wide as their bucket (date axis: milliseconds)
        traces = [
            {
                "type": "bar",
                "name": topic,
                "x": [_t(x + width_ms / 2000) for x in xs],
                "y": ys,
                "width": width_ms,
            }
            for topic, (xs, ys) in sorted(rates.items(), key=lambda kv: -sum(kv[1][1]))[:MAX_TRACES]
        ]
        lay = _layout(title, "records/s")
        lay["barmode"] = "stack"
        charts.append({"title": title, "data": traces, "layout": lay})
    return charts, notes


def lag_chart(series: ChartSeries, doc: dict) -> tuple[list[dict], list[str]]:
    if not series.lag:
        groups = [g["group_id"] for g in doc.get("groups", []) if g.get("lag")]
        why = "no committed offset and high watermark of the same partition"
        return [], [f"consumer lag: {why}" + (f" (groups: {', '.join(groups)})" if groups else "")]
    ranked = sorted(series.lag.items(), key=lambda kv: -max(kv[1].ys))
    traces = [_line(key, s.xs, s.ys) for key, s in ranked[:MAX_TRACES]]
    notes = (
        [f"consumer lag: {len(ranked) - MAX_TRACES} more partitions not drawn"]
        if len(ranked) > MAX_TRACES
        else []
    )
    return [
        {
            "title": "Consumer lag",
            "data": traces,
            "layout": _layout("Consumer lag per group (HW - committed offset)", "records"),
        }
    ], notes


def _table(head: list[str], rows: list[list[object]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape('-' if c is None else str(c))}</td>" for c in r)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _tables(doc: dict) -> str:
    out = ["<h2>Findings</h2>"]
    findings = doc.get("findings", [])
    out.append(
        _table(
            ["severity", "kind", "message", "frames"],
            [
                [f["severity"], f["kind"], f["message"], ",".join(map(str, f["frames"][:6]))]
                for f in findings
            ],
        )
        if findings
        else "<p>none</p>"
    )
    st = doc["stats"]
    out.append("<h2>Requests per API</h2>")
    out.append(
        _table(
            [
                "api",
                "version",
                "count",
                "p50 ms",
                "p99 ms",
                "max ms",
                "request bytes",
                "response bytes",
            ],
            [
                [
                    a["api"] or "(request not captured)",
                    a["api_version"],
                    a["count"],
                    a["latency_ms"]["p50"],
                    a["latency_ms"]["p99"],
                    a["latency_ms"]["max"],
                    a["request_bytes"],
                    a["response_bytes"],
                ]
                for a in st["apis"]
            ],
        )
    )
    if st["errors"]:
        out.append("<h2>Errors</h2>")
        out.append(
            _table(
                ["error", "api", "count"], [[e["name"], e["api"], e["count"]] for e in st["errors"]]
            )
        )
    out.append(_replication_table(doc))
    out.append(_producer_table(doc))
    out.append(_transaction_table(doc))
    out.append(_group_table(doc))
    out.append(_lag_table(doc))
    out.append(_client_table(doc))
    return "".join(out)


def _producer_table(doc: dict) -> str:
    rows = []
    for pr in doc.get("producers", []):
        ident = f"pid {pr['producer_id']} epoch {pr['producer_epoch']}" if pr["idempotent"] else "-"
        for tp, v in (pr.get("partitions") or {}).items():
            rows.append(
                [
                    pr["client_id"],
                    ident,
                    pr["acks"],
                    pr["transactional_id"],
                    tp,
                    v["batches"],
                    v["records"],
                    v["duplicates"],
                    v["gaps"],
                    v["retries"],
                ]
            )
    if not rows:
        return ""
    head = [
        "client",
        "producer",
        "acks",
        "transactional id",
        "partition",
        "batches",
        "records",
        "duplicates",
        "gaps",
        "retries",
    ]
    return "<h2>Producers</h2>" + _table(head, rows)


def _transaction_table(doc: dict) -> str:
    rows = [
        [
            t["transactional_id"],
            t["producer_id"],
            t["producer_epoch"],
            t["outcome"],
            ", ".join(t["partitions"]),
            " -> ".join(t["states"]),
            t.get("duration_ms"),
        ]
        for t in doc.get("transactions", [])
    ]
    if not rows:
        return ""
    head = ["transactional id", "pid", "epoch", "outcome", "partitions", "states", "ms"]
    return "<h2>Transactions</h2>" + _table(head, rows)


def _group_table(doc: dict) -> str:
    rows = [
        [g["group_id"], r["generation_id"], r["members"], r["assignor"], r["duration_ms"]]
        for g in doc.get("groups", [])
        for r in g.get("rebalances", [])
    ]
    if not rows:
        return ""
    head = ["group", "generation", "members", "assignor", "rebalance ms"]
    return "<h2>Consumer group rebalances</h2>" + _table(head, rows)


def _client_table(doc: dict) -> str:
    rows = [
        [
            c["client_id"],
            c.get("software_name"),
            c.get("software_version"),
            ", ".join(c["addresses"]),
            len(c["connections"]),
            c.get("requests"),
        ]
        for c in doc["stats"].get("clients", [])
    ]
    if not rows:
        return ""
    head = ["client id", "software", "version", "addresses", "connections", "requests"]
    return "<h2>Clients</h2>" + _table(head, rows)


def _replication_table(doc: dict) -> str:
    rows = []
    for p in doc.get("replication", []):
        fin = p.get("final") or {}
        followers = ", ".join(
            f"{fid}: LEO {fs.get('leo')} lag {fs.get('lag_records')}"
            for fid, fs in (fin.get("followers") or {}).items()
        )
        rows.append(
            [
                f"{p['topic']}-{p['partition']}",
                fin.get("leader_leo"),
                fin.get("high_watermark"),
                fin.get("last_stable_offset"),
                fin.get("log_start_offset"),
                fin.get("isr"),
                followers or None,
            ]
        )
    if not rows:
        return ""
    head = ["partition", "leader LEO", "HW", "LSO", "log start", "ISR", "followers"]
    return "<h2>Replication (final)</h2>" + _table(head, rows)


def _lag_table(doc: dict) -> str:
    rows = [
        [
            g["group_id"],
            tp,
            v.get("committed"),
            v.get("high_watermark"),
            v.get("lag"),
            v.get("status"),
        ]
        for g in doc.get("groups", [])
        for tp, v in (g.get("lag") or {}).items()
    ]
    if not rows:
        return ""
    head = ["group", "partition", "committed", "HW", "lag", "status"]
    return "<h2>Consumer lag (final)</h2>" + _table(head, rows)


CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}
.chart{min-height:380px;margin-bottom:1em;border:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:.85em;text-align:left}
pre{font-size:.8em;background:#f6f6f6;padding:1em;overflow:auto}
.notes{color:#666;font-size:.9em}
"""

RUN = """(function(){
var st=document.getElementById('kanalyze-status');
var charts=JSON.parse(document.getElementById('kanalyze-charts').textContent);
var opts={responsive:true,displaylogo:false};
Promise.all(charts.map(function(c){return Plotly.newPlot(c.id,c.data,c.layout,opts);}))
.then(function(){
  var n=0;
  charts.forEach(function(c){if(document.querySelector('#'+c.id+' .main-svg'))n++;});
  st.setAttribute('data-rendered',String(n));})
.catch(function(e){window.kanalyzeErrors.push(String(e));})
.then(function(){
  st.setAttribute('data-errors',window.kanalyzeErrors.join(' | '));
  st.setAttribute('data-done','1');});
})();"""


def render_html(doc: dict, series: ChartSeries) -> str:
    js = plotly_js()
    charts, notes = [], []
    for part in (
        replication_charts(doc),
        latency_chart(series),
        throughput_charts(series),
        lag_chart(series, doc),
    ):
        charts.extend(part[0])
        notes.extend(part[1])
    for i, c in enumerate(charts):
        c["id"] = f"chart-{i}"
    files = ", ".join(doc.get("files", []))
    t = doc.get("time") or {}
    span = (
        f"{_t(t['first'])} to {_t(t['last'])} UTC" if t.get("first") is not None else "no exchanges"
    )
    payload = json.dumps(
        [{"id": c["id"], "data": c["data"], "layout": c["layout"]} for c in charts],
        separators=(",", ":"),
    ).replace("</", "<\\/")
    divs = "".join(
        f'<div class="chart" id="{c["id"]}" title="{html.escape(c["title"])}"></div>'
        for c in charts
    )
    note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>kanalyze report: {html.escape(files)}</title><style>{CSS}</style>"
        "<script>window.kanalyzeErrors=[];window.addEventListener('error',function(e){"
        "window.kanalyzeErrors.push(String(e.message));});</script>"
        f"<script>{js}</script></head><body>"
        f"<h1>kanalyze report</h1><p>{html.escape(files)}<br>{html.escape(span)}; "
        f"{doc['stats']['exchanges']} exchanges</p>"
        f'<div id="kanalyze-status" data-charts="{len(charts)}" data-rendered="0"'
        ' data-done="0"></div>'
        f"{divs}"
        + (f'<ul class="notes">{note_html}</ul>' if notes else "")
        + _tables(doc)
        + f'<script id="kanalyze-charts" type="application/json">{payload}</script>'
        f"<script>{RUN}</script></body></html>\n"
    )


def write_html(path: str, doc: dict, series: ChartSeries) -> None:
    Path(path).write_text(render_html(doc, series), encoding="utf-8")


def run_html(
    args: argparse.Namespace, session: Session, build: Callable[..., dict], ctx: object = None
) -> int:
    """`report --html OUT`: one pass builds the report document (`build`, with the command's
    decode context) and the chart series; the page goes to OUT, and with `--json` the document
    to stdout as without `--html`."""
    try:
        plotly_js()
    except HtmlUnavailable as e:
        sys.stderr.write(f"kanalyze: error: {e}\n")
        return 2
    series = ChartSeries()
    doc = build(session, args.timeline_cap, args.stall_ms, ctx=ctx, observers=(series,))
    write_html(args.html, doc, series)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0
