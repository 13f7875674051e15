"""`export -Y EXPR -w out.pcap`: the written capture re-exports (kanalyze and tshark) to
exactly the selected exchanges."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from kanalyze.capture import read_captures
from kanalyze.cli import main
from tests.support.tshark import tshark_binary, tshark_pdus

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    p
    for d in ("captures", "captures/crafted", "captures/replication")
    for p in (ROOT / d).iterdir()
    if p.suffix in (".pcap", ".pcapng", ".gz") and not p.name.startswith("bad_")
)
EXPRESSIONS = (
    'api == "Fetch" or errors',
    'api == "Produce"',
    "conn == 2",
    'api matches "Group|Offset|Metadata|Sasl|ApiVersions"',
)
# a capture gap inside a selected frame stays a hole in the written file: the frame completes at
# another packet there, so only the exchanges (not their times) are compared
LOSSY = {"gap.pcap"}


def run(*argv: str) -> list[bytes]:
    out = io.BytesIO()
    old, old_err = sys.stdout, sys.stderr
    sys.stdout = wrapper = io.TextIOWrapper(out, encoding="utf-8")
    sys.stderr = io.StringIO()
    try:
        code = main(list(argv))
        wrapper.flush()
    finally:
        sys.stdout, sys.stderr = old, old_err
        wrapper.detach()
    lines = out.getvalue().splitlines()
    # 3: nothing analyzed, as for a written capture that holds no selected exchange
    assert code == 0 or (code == 3 and not lines), code
    return lines


def _strip_names(value):
    """Topic-id names are taught by Metadata responses a filtered pcap may leave out."""
    if isinstance(value, dict):
        return {k: _strip_names(v) for k, v in value.items() if k != "topic_name"}
    if isinstance(value, list):
        return [_strip_names(v) for v in value]
    return value


def normalized(lines: list[bytes], lossy: bool = False) -> list[tuple]:
    """What must survive the round trip: endpoints, header, status, times, sizes, bodies
    (connection ids and packet numbers are the new file's own)."""
    out = []
    for line in lines:
        d = json.loads(line)
        sides = tuple(
            None if m is None else (m["ts"], m["size"], json.dumps(_strip_names(m["body"])))
            for m in (d["request"], d["response"])
        )
        key = (
            d["connection"]["client"],
            d["connection"]["broker"],
            d["api"],
            d["api_version"],
            d["correlation_id"],
            d["client_id"],
            d["status"],
        )
        out.append(key if lossy else (*key, d["latency_ms"], sides))
    return out


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.name)
def test_filtered_pcap_reexports_to_the_selection(cap, tmp_path):
    checked = 0
    for expr in EXPRESSIONS:
        want = run("export", str(cap), "-Y", expr)
        out = tmp_path / "out.pcap"
        assert run("export", str(cap), "-Y", expr, "-w", str(out)) == []
        got = run("export", str(out))
        lossy = cap.name in LOSSY
        assert normalized(got, lossy) == normalized(want, lossy), expr
        checked += len(want)
    all_lines = run("export", "--header-only", str(cap))
    assert not all_lines or checked  # something was selected on every capture with traffic


def test_filtered_pcap_keeps_only_the_selected_packets(tmp_path):
    cap = ROOT / "captures" / "lib_group_rebalance.pcap"
    out = tmp_path / "out.pcap"
    run("export", str(cap), "-Y", 'api == "Heartbeat"', "-w", str(out))
    lines = [
        json.loads(x) for x in run("export", "--header-only", str(cap), "-Y", 'api == "Heartbeat"')
    ]
    frames = {m["frame"] for d in lines for m in (d["request"], d["response"]) if m}
    packets = [p for p in read_captures([str(out)]) if p.data[47] & 0x02 == 0]  # not SYNs
    # every Heartbeat frame here fits one packet: exactly one packet per request and response
    assert len(packets) == len(frames) == 2 * len(lines) > 0
    originals = {p.ts_ns for p in read_captures([str(cap)]) if p.no in frames}
    assert {p.ts_ns for p in packets} == originals


def test_nothing_selected_is_an_empty_capture(tmp_path):
    out = tmp_path / "out.pcap"
    run("export", str(ROOT / "captures" / "lib_acks.pcap"), "-Y", 'api == "Fetch"', "-w", str(out))
    assert list(read_captures([str(out)])) == []


TSHARK_CAPTURES = (
    "lib_group_rebalance.pcap",
    "lib_transactions.pcap",
    "lib_acks.pcap",
    "admin.pcap",
    "kp_codecs.pcap",
)


@pytest.mark.tshark
@pytest.mark.skipif(tshark_binary() is None, reason="needs tshark")
@pytest.mark.parametrize("name", TSHARK_CAPTURES)
def test_tshark_sees_the_selected_exchanges(name, tmp_path):
    """tshark (out-of-order reassembly on) finds in the written file the same Kafka PDUs it
    finds in the original at the selected exchanges' frames, matched the same way."""
    cap = ROOT / "captures" / name
    for expr in EXPRESSIONS:
        lines = [json.loads(x) for x in run("export", "--header-only", str(cap), "-Y", expr)]
        if not lines:
            continue
        out = tmp_path / "out.pcap"
        run("export", str(cap), "-Y", expr, "-w", str(out))
        by_ts: dict[int, list[int]] = {}
        for p in read_captures([str(cap)]):
            by_ts.setdefault(p.ts_ns, []).append(p.no)
        original_no = {p.no: by_ts[p.ts_ns].pop(0) for p in read_captures([str(out)])}
        frames = {m["frame"] for d in lines for m in (d["request"], d["response"]) if m}
        ports = {int(d["connection"]["broker"].rsplit(":", 1)[1]) for d in lines}
        want, got = set(), set()
        for port in ports:
            want |= {
                (p.frame, p.is_request, p.api_key, p.correlation_id)
                for p in tshark_pdus(cap, port)
                if p.frame in frames
            }
            got |= {
                (original_no[p.frame], p.is_request, p.api_key, p.correlation_id)
                for p in tshark_pdus(out, port)
            }
        assert got == want, expr
        assert len(want) == len(frames)
