"""`kanalyze report`: replication HW progress, delivery semantics, transactions, consumer groups,
stats and findings (docs/report.md; --json follows docs/report.schema.json)."""

from __future__ import annotations

import argparse
import json
import sys

from kanalyze.analysis.report import analyze
from kanalyze.commands.common import (
    add_input_arguments,
    engine_options,
    explain_nothing,
    positive_int,
)
from kanalyze.session import Session


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="replication, delivery semantics, transactions, groups, stats, findings",
                       description=__doc__)
    add_input_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON document (docs/report.schema.json)")
    p.add_argument("--timeline-cap", type=positive_int, default=5000, metavar="N",
                   help="keep the newest N timeline entries per partition (default 5000)")
    p.add_argument("--stall-ms", type=positive_int, default=10_000, metavar="MS",
                   help="report an HW stalled this long while the LEO advances (default 10000)")
    p.set_defaults(run=run)


def build(session: Session, timeline_cap: int = 5000, stall_ms: float = 10_000.0) -> dict[str, object]:
    doc = analyze(session.exchanges(), timeline_cap=timeline_cap, stall_ms=stall_ms)
    doc["files"] = list(session.paths)
    return doc


def run(args: argparse.Namespace) -> int:
    session = Session(args.files, engine_options(args))
    doc = build(session, args.timeline_cap, args.stall_ms)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(doc))
    return explain_nothing(session)


def _v(x: object) -> str:
    return "-" if x is None else str(x)


def _ms(x: object) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(doc: dict) -> str:  # noqa: C901 - one section after another
    out: list[str] = []
    st = doc["stats"]
    out.append(f"files: {', '.join(doc.get('files', []))}   exchanges: {st['exchanges']}   "
               f"connections: {len(st['connections'])}")
    lat = st["latency_ms"]
    out.append(f"latency ms: p50 {_ms(lat['p50'])}  p90 {_ms(lat['p90'])}  p99 {_ms(lat['p99'])}  max {_ms(lat['max'])}")

    findings = doc["findings"]
    out.append("")
    out.append(f"FINDINGS ({len(findings)})")
    for f in findings:
        frames = ",".join(str(x) for x in f["frames"][:6])
        out.append(f"  {f['severity'].upper():<8}{f['kind']:<30}{f['message']}" + (f"  [frames {frames}]" if frames else ""))

    out.append("")
    out.append("REPLICATION")
    if not doc["replication"]:
        out.append("  (no Produce or Fetch traffic)")
    for p in doc["replication"]:
        fin = p["final"] or {}
        out.append(f"  {p['topic']}-{p['partition']}  sources: {', '.join(p['sources'])}")
        out.append(f"    final: LEO {_v(fin.get('leader_leo'))}  HW {_v(fin.get('high_watermark'))}  "
                   f"log start {_v(fin.get('log_start_offset'))}  LSO {_v(fin.get('last_stable_offset'))}  "
                   f"ISR {fin.get('isr')}")
        for fid, fs in (fin.get("followers") or {}).items():
            out.append(f"    follower {fid}: LEO {_v(fs['leo'])}  HW {_v(fs['hw'])}  lag {_v(fs['lag_records'])} records"
                       f" / {_ms(fs['lag_ms'])} ms")
        hl = p["hw_advance_latency_ms"]
        if hl["count"]:
            out.append(f"    HW advance latency ms: p50 {_ms(hl['p50'])}  p99 {_ms(hl['p99'])}  max {_ms(hl['max'])}"
                       f"  ({hl['count']} batches)")
        aa = p["acks_all_latency_ms"]
        if aa["total"]["count"]:
            out.append(f"    acks=all latency ms p50: total {_ms(aa['total']['p50'])}  append {_ms(aa['append']['p50'])}"
                       f"  replication {_ms(aa['replication']['p50'])}")
        tl = p["timeline"]
        if tl:
            out.append(f"    {'frame':>7} {'event':<24}{'LEO':>6}{'HW':>6}{'LSO':>6}  followers (LEO/remote/HW)  ISR")
            for e in tl[-12:]:
                fol = " ".join(f"{k}:{_v(v['leo'])}/{_v(v['remote_leo'])}/{_v(v['hw'])}" for k, v in e["followers"].items())
                out.append(f"    {e['frame']:>7} {e['event']:<24}{_v(e['leader_leo']):>6}{_v(e['high_watermark']):>6}"
                           f"{_v(e['last_stable_offset']):>6}  {fol or '-':<26}{e['isr']}")
            if len(tl) > 12:
                out.append(f"    ... {len(tl) - 12} earlier entries (see --json)")

    out.append("")
    out.append("PRODUCERS")
    for pr in doc["producers"]:
        ident = f"pid {pr['producer_id']} epoch {pr['producer_epoch']}" if pr["idempotent"] else "not idempotent"
        out.append(f"  {pr['client_id']}  {ident}  acks {pr['acks']}  in flight max {pr['max_in_flight']}"
                   + (f"  txn {pr['transactional_id']}" if pr["transactional_id"] else ""))
        for k, v in pr["partitions"].items():
            seq = f"seq {v['first_sequence']}..{v['last_sequence']}  " if v["first_sequence"] is not None else ""
            out.append(f"    {k}: {seq}{v['batches']} batches, {v['records']} records, dup {v['duplicates']}, "
                       f"gaps {v['gaps']}, retries {v['retries']}")
        if pr["errors"]:
            out.append(f"    errors: {pr['errors']}")

    out.append("")
    out.append("TRANSACTIONS")
    out.extend(
        f"  {t['transactional_id']}  pid {t['producer_id']} epoch {t['producer_epoch']}  {t['outcome'].upper()}"
        f"  partitions {t['partitions']}  {' -> '.join(t['states'])}"
        + (f"  markers {t['control_records']}" if t["control_records"] else "")
        for t in doc["transactions"]
    )

    out.append("")
    out.append("CONSUMER GROUPS")
    for g in doc["groups"]:
        out.append(f"  {g['group_id']} ({g['protocol']})  committed {g['committed']}")
        out.extend(f"    generation {r['generation_id']}: {r['members']} members, assignor {r['assignor']}, "
                   f"rebalance {_ms(r['duration_ms'])} ms" for r in g["rebalances"])
        out.extend(f"    member {m['client_id']}: generations {m['generations']}, assignment {m['assignment']}"
                   + ("  (left)" if m["left"] else "") for m in g["members"])
        for k, v in g["lag"].items():
            out.append(f"    lag {k}: committed {_v(v['committed'])} HW {_v(v['high_watermark'])} lag {_v(v['lag'])}"
                       f"  {v['status']}")

    out.append("")
    out.append("STATS")
    out.append(f"  {'api':<26}{'ver':>4}{'count':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'req B':>10}{'rsp B':>10}")
    for a in st["apis"]:
        la = a["latency_ms"]
        out.append(f"  {(a['api'] or '(request not captured)'):<26}{_v(a['api_version']):>4}{a['count']:>7}"
                   f"{_ms(la['p50']):>9}{_ms(la['p99']):>9}{_ms(la['max']):>9}{a['request_bytes']:>10}{a['response_bytes']:>10}")
    if st["errors"]:
        out.append("  errors: " + ", ".join(f"{e['name']} in {e['api']} x{e['count']}" for e in st["errors"]))
    for c in st["clients"]:
        sw = f"{c['software_name']} {c['software_version']}" if c["software_name"] else "-"
        out.append(f"  client {c['client_id']}: {sw}, {', '.join(c['addresses'])}, {len(c['connections'])} connections")
    out.extend(f"  topic {t['topic']}: produced by {t['producers'] or '-'}, consumed by {t['consumers'] or '-'}"
               for t in st["topics"])
    return "\n".join(out) + "\n"
