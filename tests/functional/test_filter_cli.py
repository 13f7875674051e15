"""Filters and selections on every command as a user meets them: one clear error line with a
caret and exit 2, field output, Parquet, summary/report/live with -Y, --from/--to/--conn/--topic."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kanalyze import cli
from tests.live.test_live_unit import SLOW_EXPIRY, export_lines, fake_capture  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CAP = ROOT / "captures" / "lib_group_rebalance.pcap"


def kanalyze(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )


def export(*args: str) -> list[dict]:
    r = kanalyze("export", "--header-only", *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines()]


@pytest.mark.parametrize("command", ["export", "summary", "report"])
def test_bad_filter_is_one_error_with_a_caret_and_exit_2(command):
    r = kanalyze(command, str(CAP), "-Y", 'api == "Fetch" and latncy > 5')
    assert r.returncode == 2 and r.stdout == b""
    err = r.stderr.decode().splitlines()
    assert err == [
        "kanalyze: error: bad filter: unknown field 'latncy' (did you mean \"latency\"?)",
        '  api == "Fetch" and latncy > 5',
        "                     ^",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--conn", "nope"], "--conn 'nope'"),
        (["--from", "yesterday"], "--from 'yesterday'"),
        (["--to", "90"], "write +90s"),
        (["--conn", "[::1]"], None),
        (["-e", "api"], "-e needs -T fields"),
        (["-T", "fields"], "needs at least one -e"),
        (["-T", "fields", "-e", "latncy"], "-e latncy: unknown field"),
        (["-T", "fields", "-e", "api", "-E", "header=maybe"], "header is y or n"),
        (["-T", "parquet"], "-T parquet needs -o FILE"),
        (["-T", "fields", "-e", "api", "-w", "/nonexistent/x.pcap"], "does not combine with -T"),
    ],
)
def test_bad_option_is_one_line_and_exit_2(args, message):
    r = kanalyze("export", str(CAP), *args)
    if message is None:  # accepted (selects nothing here)
        assert r.returncode == 0 and r.stdout == b"", r.stderr
        return
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in lines[0]


def test_pcap_from_stdin_is_refused():
    r = kanalyze("export", "-", "-Y", "errors", "-w", "/tmp/never.pcap", stdin=CAP.read_bytes())
    assert r.returncode == 2 and b"standard input" in r.stderr


def test_no_filter_keeps_every_line():
    assert (
        kanalyze("export", str(CAP)).stdout
        == kanalyze("export", str(CAP), "-Y", "api or not api").stdout
    )


def test_fields_tsv_with_header():
    r = kanalyze(
        "export",
        str(CAP),
        "-Y",
        'api == "JoinGroup"',
        "-T",
        "fields",
        "-e",
        "frame",
        "-e",
        "api",
        "-e",
        "time",
        "-e",
        "error",
        "-e",
        "body.request.protocols.name",
        "-e",
        "latency",
        "-E",
        "header=y",
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.decode().splitlines()]
    assert rows[0] == ["frame", "api", "time", "error", "body.request.protocols.name", "latency"]
    want = export(str(CAP), "-Y", 'api == "JoinGroup"')
    assert len(rows) == len(want) + 1
    for row, d in zip(rows[1:], want, strict=True):
        assert row[0] == f"{d['request']['frame']},{d['response']['frame']}"
        assert row[1] == "JoinGroup"
        assert row[2] == datetime.fromtimestamp(d["request"]["ts"], UTC).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        assert row[5] == str(d["latency_ms"])
    assert {r[3] for r in rows[1:]} == {"MEMBER_ID_REQUIRED", ""}
    assert all(r[4] == "range,cooperative-sticky" or r[4] for r in rows[1:])


def test_fields_csv_aggregator_and_topics():
    r = kanalyze(
        "export",
        str(CAP),
        "-Y",
        'api == "Fetch"',
        "-T",
        "fields",
        "-e",
        "api",
        "-e",
        "topic",
        "-e",
        "partition",
        "-e",
        "client_id",
        "--csv",
        "-E",
        "aggregator=|",
        "-E",
        "header=y",
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout.decode())))
    assert rows[0] == ["api", "topic", "partition", "client_id"]
    assert len(rows) > 1 and all(row[0] == "Fetch" and row[1] and row[2] for row in rows[1:])
    # topic ids of Fetch v13+ come out as names: learned from Metadata responses not selected
    assert all("-" in row[1] and len(row[1]) < 36 for row in rows[1:])


def test_parquet_has_the_spark_exchanges_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from kanalyze.spark.schemas import EXCHANGE_COLUMNS, EXCHANGE_SCHEMA

    out = tmp_path / "x.parquet"
    r = kanalyze(
        "export", str(CAP), "-Y", 'errors or api == "Fetch"', "-T", "parquet", "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out)
    assert table.column_names == EXCHANGE_COLUMNS
    assert table.schema.equals(EXCHANGE_SCHEMA)  # typed as Spark writes them
    want = export(str(CAP), "-Y", 'errors or api == "Fetch"')
    assert table.num_rows == len(want) > 0
    rows = table.to_pylist()
    assert [(x["api"], x["correlation_id"]) for x in rows] == [
        (d["api"], d["correlation_id"]) for d in want
    ]
    assert all(
        x["topics"] and all(len(t) < 36 for t in x["topics"]) for x in rows if x["api"] == "Fetch"
    )


def test_summary_and_report_count_the_selection():
    want = export(str(CAP), "-Y", 'api matches "Group|Heartbeat"')
    s = kanalyze("summary", "--json", str(CAP), "-Y", 'api matches "Group|Heartbeat"')
    doc = json.loads(s.stdout)
    assert doc["exchanges"] == len(want) == sum(a["count"] for a in doc["apis"])
    assert {a["api"] for a in doc["apis"]} == {d["api"] for d in want}
    r = kanalyze("report", "--json", str(CAP), "--topic", "nothing-here")
    assert json.loads(r.stdout)["stats"]["exchanges"] == 0
    r = kanalyze("report", "--json", str(CAP), "-Y", 'api == "Heartbeat"')
    assert json.loads(r.stdout)["stats"]["exchanges"] == sum(d["api"] == "Heartbeat" for d in want)


def test_conn_and_topic_selections():
    every = export(str(CAP))
    c3 = export(str(CAP), "--conn", "3")
    assert c3 == [d for d in every if d["connection"]["id"] == 3] and c3
    client = c3[0]["connection"]["client"]
    assert export(str(CAP), "--conn", client) == c3
    broker = every[0]["connection"]["broker"]
    assert export(str(CAP), "--conn", broker) == every  # one broker: every connection
    assert export(str(CAP), "--conn", "3", "--conn", "5") == [
        d for d in every if d["connection"]["id"] in (3, 5)
    ]
    ip = client.rsplit(":", 1)[0]
    assert export(str(CAP), "--conn", ip) == every
    topic = export(str(CAP), "--topic", "lib-group")
    assert topic == export(str(CAP), "-Y", 'topic == "lib-group"') and 0 < len(topic) < len(every)
    both = export(str(CAP), "--topic", "lib-group", "-Y", 'api == "Fetch"', "--conn", "5")
    assert both == [d for d in topic if d["api"] == "Fetch" and d["connection"]["id"] == 5]


def test_from_and_to_relative_absolute_and_clock():
    every = export(str(CAP))
    from kanalyze.capture import read_captures

    first = next(iter(read_captures([str(CAP)]))).ts_ns / 1e9
    starts = [(d["request"] or d["response"])["ts"] for d in every]
    lo, hi = starts[len(starts) // 4], starts[3 * len(starts) // 4]
    want = [d for d, t in zip(every, starts, strict=True) if lo <= t < hi]
    assert export(str(CAP), "--from", repr(lo), "--to", repr(hi)) == want
    iso = datetime.fromtimestamp(lo, UTC).isoformat()
    assert export(str(CAP), "--from", iso, "--to", repr(hi)) == want
    rel = f"+{(lo - first) * 1000:.3f}ms"
    got = export(str(CAP), "--from", rel)
    assert got == [d for d, t in zip(every, starts, strict=True) if t >= round(lo, 6) - 1e-6]
    clock = datetime.fromtimestamp(lo, UTC).strftime("%H:%M:%S.%f")
    assert export(str(CAP), "--from", clock, "--to", repr(hi)) == want


def test_live_writes_only_the_selected_lines(fake_capture, tmp_path, capsys):  # noqa: F811
    src = ROOT / "captures" / "lib_acks.pcap"
    fake_capture(src)
    out = tmp_path / "o.ndjson"
    rc = cli.main(["live", "-i", "lo", "-o", str(out), "-Y", "acks == 0", *SLOW_EXPIRY])
    assert rc == 0, capsys.readouterr().err
    want = [x for x in export_lines(src) if json.loads(x).get("acks") == 0]
    assert out.read_text().splitlines() == want and want


def test_live_bad_filter_exits_2_before_capturing(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["live", "-i", "lo", "-Y", "acks =="])
    assert e.value.code == 2
    assert "bad filter" in capsys.readouterr().err


def test_every_command_help_shows_two_examples():
    for command in ("export", "summary", "report", "live"):
        text = kanalyze(command, "--help").stdout.decode()
        assert text.count("\n  -Y '") == 2, command
    for command in ("schemas", "spark", "tui"):
        text = kanalyze(command, "--help").stdout.decode()
        # at least two; spark shows one per mode (batch, cluster, append, stream)
        assert "examples:" in text and text.count("\n  kanalyze ") >= 2, command
    top = kanalyze("--help").stdout.decode()
    assert top.count("\n  kanalyze ") == 2
