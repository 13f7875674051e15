"""`kanalyze stats` on the real-client captures: conversations against `tshark -z conv,tcp`,
topics and clients against what the clients know (captures/*.truth.json), fixed-width
snapshots of the text tables, and the JSON document against docs/stats.schema.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from kanalyze.cli import main
from kanalyze.views.stats import Exch, IoCollector, parse_interval
from kanalyze.views.table import Col, Out, count, nbytes
from tests.support.tshark import tshark_binary

ROOT = Path(__file__).resolve().parents[2]
REAL = sorted((ROOT / "captures").glob("*.pcap"))
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("KANALYZE_UPDATE_SNAPSHOTS") == "1"
SCHEMA = json.loads((ROOT / "docs" / "stats.schema.json").read_text())


def truth(cap: Path) -> dict:
    return json.loads(cap.with_suffix(".truth.json").read_text())


def stats(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["stats", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def snapshot(name: str, text: str) -> None:
    """Compare with tests/functional/snapshots/NAME (KANALYZE_UPDATE_SNAPSHOTS=1 rewrites it)."""
    path = SNAPSHOTS / name
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"snapshot {name} written; check it and run again")
    assert text == path.read_text(), f"{name} differs (KANALYZE_UPDATE_SNAPSHOTS=1 to accept)"


_CONV = re.compile(
    r"^(\S+)\s+<->\s+(\S+)\s+(\d+)\s+(\d+) (bytes|kB|MB)\s+(\d+)\s+(\d+) (bytes|kB|MB)"
    r"\s+\d+\s+\d+ (?:bytes|kB|MB)\s+([\d.]+)\s+([\d.]+)\s*$"
)


def tshark_conv(cap: Path) -> list[tuple]:
    out = subprocess.run(
        [tshark_binary(), "-r", str(cap), "-q", "-z", "conv,tcp"],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        m = _CONV.match(line)
        if m:
            a, b, fr_ba, by_ba, u1, fr_ab, by_ab, u2, start, dur = m.groups()
            rows.append(
                (
                    a,
                    b,
                    int(fr_ab),
                    int(by_ab) if u2 == "bytes" else None,
                    int(fr_ba),
                    int(by_ba) if u1 == "bytes" else None,
                    float(start),
                    float(dur),
                )
            )
    return rows


CONV_CAPTURES = [
    *REAL,
    *sorted((ROOT / "captures" / "replication").glob("*.pcap")),
    *(
        c
        for c in sorted((ROOT / "captures" / "crafted").glob("*.pcap*"))
        if not c.name.startswith("bad_")
    ),
]


def _endpoint(text: str) -> str:
    """tshark writes IPv6 endpoints without brackets."""
    return text.replace("[", "").replace("]", "")


@pytest.mark.tshark
@pytest.mark.skipif(tshark_binary() is None, reason="tshark is not installed")
@pytest.mark.parametrize("cap", CONV_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_conv_matches_tshark(cap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours = stats(capsys, "-z", "conv", str(cap))["tables"]["conv"]
    theirs = tshark_conv(cap)
    assert len(ours) == len(theirs) > 0
    for a, b, fr_ab, by_ab, fr_ba, by_ba, start, dur in theirs:
        # the same endpoints can carry several conversations (port reuse): match the start too
        (r,) = [
            r
            for r in ours
            if {_endpoint(r["client"]), _endpoint(r["broker"])} == {a, b}
            and abs(r["relative_start_s"] - start) < 1e-5
        ]
        # tshark's A sent the first packet; without a SYN that can be the broker, which
        # kanalyze still names as the broker (from the Kafka requests)
        a_is_client = _endpoint(r["client"]) == a
        assert a_is_client or not r["syn"]
        to_b, to_a = ("broker", "client") if a_is_client else ("client", "broker")
        assert (r[f"frames_to_{to_b}"], r[f"frames_to_{to_a}"]) == (fr_ab, fr_ba)
        if by_ab is not None:
            assert r[f"bytes_to_{to_b}"] == by_ab
        if by_ba is not None:
            assert r[f"bytes_to_{to_a}"] == by_ba
        assert abs(r["duration_s"] - dur) < 1e-3
        assert r["kafka"] and r["requests"] > 0
        assert r["ended"] in ("FIN", "RST", "half-closed", "open")
    if cap.name == "port_reuse.pcap":
        assert [r["ended"] for r in ours] == ["FIN", "RST"]
        assert len({r["connection"] for r in ours}) == 2


@pytest.mark.parametrize("cap", REAL, ids=lambda p: p.stem)
def test_topics_and_clients_match_truth(cap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = truth(cap)
    doc = stats(capsys, str(cap))
    jsonschema.validate(doc, SCHEMA)
    topics = {(r["topic"], r["partition"]): r for r in doc["tables"]["topics"]}
    produced = Counter((r["topic"], r["partition"]) for r in t["produced"] if not r.get("error"))
    for key, n in produced.items():
        assert topics[key]["produced_records"] >= n, key  # retries may send a record again
        offs = [
            r["offset"]
            for r in t["produced"]
            if (r["topic"], r["partition"]) == key and r["offset"] is not None
        ]
        if offs:
            assert topics[key]["last_offset"] >= max(offs)
    consumed = Counter((r["topic"], r["partition"]) for r in t["consumed"])
    for key, n in consumed.items():
        assert topics[key]["fetched_records"] >= n, key
    assert {k[0] for k in topics} <= set(t["topics"]) | {r["topic"] for r in t["produced"]}
    clients = {r["client_id"]: r for r in doc["tables"]["clients"]}
    for c in t["clients"]:
        cid = c["config"].get("client.id") or c["config"].get("client_id")
        if cid is None or cid not in clients:
            continue
        sw = " ".join(clients[cid]["software"])
        if c["library"] == "confluent-kafka" and sw:
            assert c["version"] in sw and c["librdkafka"] in sw, (cid, sw)
        elif c["library"] == "aiokafka" and sw:
            assert "aiokafka" in sw, (cid, sw)
    assert sum(r["requests"] for r in doc["tables"]["clients"]) == doc["capture"]["exchanges"]


def test_latency_waits_apart_and_expected_errors(capsys: pytest.CaptureFixture[str]) -> None:
    doc = stats(
        capsys, "-z", "latency", "-z", "errors", str(ROOT / "captures" / "lib_group_rebalance.pcap")
    )
    lat = doc["tables"]["latency"]
    waits = {(r["api"], r["kind"]) for r in lat if r["kind"] != "response"}
    assert ("Fetch", "long-poll") in waits and ("JoinGroup", "rebalance wait") in waits
    normal = [r for r in lat if r["kind"] == "response"]
    assert all(r["max_ms"] < 300 for r in normal if r["api"] == "Fetch")
    errs = {(r["error"], r["api"]): r for r in doc["tables"]["errors"]}
    first_join = errs[("MEMBER_ID_REQUIRED", "JoinGroup")]
    assert first_join["expected"] and "KIP-394" in first_join["reason"] and first_join["frames"]
    assert not [r for r in doc["tables"]["errors"] if not r["expected"]]


def test_io_interval(capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(ROOT / "captures" / "lib_codecs.pcap")
    one = stats(capsys, "-z", "io,1s", cap)
    half = stats(capsys, "-z", "io,500ms", cap)
    assert one["io_interval_s"] == 1.0 and half["io_interval_s"] == 0.5
    for doc in (one, half):
        rows = doc["tables"]["io"]
        assert sum(r["requests"] for r in rows) == doc["capture"]["exchanges"]
        assert sum(r["produced_records"] for r in rows) == 60
    assert len(half["tables"]["io"]) >= 2 * len(one["tables"]["io"]) - 1
    assert [parse_interval(x) for x in ("1", "2s", "250ms", "1m")] == [1, 2, 0.25, 60]


@pytest.mark.parametrize("bad", ["nope", "io,0s", "io,fast", "topics,x"])
def test_bad_statistic_is_exit_2(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["stats", "-z", bad, str(ROOT / "captures" / "lib_codecs.pcap")])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("kanalyze stats: error:")


@pytest.mark.parametrize("name", ["lib_group_rebalance", "lib_transactions"])
def test_stats_text_snapshot(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the file name as given appears in the output
    assert main(["stats", f"captures/{name}.pcap"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert all(line == line.rstrip() for line in out.splitlines())
    snapshot(f"stats_{name}.txt", out)


def test_plain_tables_equal_rich() -> None:
    """The direct layout (piped output) is the one rich draws on a terminal."""
    import io

    cols = (
        Col("name", "n", right=False),
        Col("bytes →", "b", nbytes),
        Col("count", "c", count),
        Col("wide", "w", right=False),
    )
    rows = [
        {"n": "a", "b": 10, "c": 1234567, "w": ["x", "yy"]},
        {"n": "lönger-näme", "b": None, "c": 0, "w": "→←"},
        {"n": "", "b": 5 << 20, "c": None},
    ]
    plain, fancy = io.StringIO(), io.StringIO()
    Out(plain, color=False).table(cols, rows)
    out = Out(fancy, color=False)
    out.tty = True  # the rich path, at the plain width (the stream is no terminal)
    out.table(cols, rows)
    assert plain.getvalue() == fancy.getvalue()
    assert "5.0 MiB" in plain.getvalue() and "1,234,567" in plain.getvalue()


def test_io_without_interval_stays_short() -> None:
    from types import SimpleNamespace

    col = IoCollector()
    for k in range(500):  # one exchange every 7 s: 3500 s
        ex = SimpleNamespace(
            start_ts=k * 7_000_000_000, request=None, response=None, api_key=3, latency_ns=k * 1000
        )
        col.feed(Exch(ex, None, lambda b: None))  # type: ignore[arg-type]
    rows = col.rows()
    assert col.interval_s == 60 and len(rows) <= IoCollector.AUTO_ROWS
    assert sum(r["requests"] for r in rows) == 500
    assert rows[1]["start_s"] == 60 and rows[0]["requests"] == 9  # 0, 7, ..., 56 s
    assert rows[0]["p50_ms"] == 0.004 and rows[0]["max_ms"] == 0.008  # latency over time


@pytest.mark.parametrize(
    "name",
    [
        "crafted/bad_truncated.pcap",
        "crafted/gap.pcap",
        "crafted/midstream.pcap",
        "crafted/pcapng_multi.pcapng",
        "replication/anomalies.pcap",
    ],
)
def test_every_table_on_damaged_and_odd_captures(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never a crash, always a valid document; the tables agree with each other."""
    doc = stats(capsys, str(ROOT / "captures" / name))
    jsonschema.validate(doc, SCHEMA)
    t = doc["tables"]
    n = doc["capture"]["exchanges"]
    assert sum(r["requests"] for r in t["io"]) == n
    assert sum(r["requests"] for r in t["clients"]) == n
    assert sum(r["requests"] for r in t["conv"]) == n
    answered = sum(r["count"] for r in t["latency"])
    assert answered <= n
    assert main(["stats", str(ROOT / "captures" / name)]) == 0
    assert "Connections (conv)" in capsys.readouterr().out


def test_io_split_by_topic_and_client(capsys: pytest.CaptureFixture[str]) -> None:
    """Throughput per topic and per client over time adds up to the totals."""
    cap = str(ROOT / "captures" / "lib_group_rebalance.pcap")
    doc = stats(capsys, "-z", "io,topic", "-z", "topics", cap)
    jsonschema.validate(doc, SCHEMA)
    by_topic = Counter()
    for r in doc["tables"]["io_by"]:
        assert r["by"] == "topic"
        by_topic[r["key"]] += r["produced_records"]
    topics = Counter()
    for r in doc["tables"]["topics"]:
        topics[r["topic"]] += r["produced_records"]
    assert by_topic == topics and sum(topics.values()) == 24
    assert sum(r["produced_records"] for r in doc["tables"]["io"]) == 24
    doc = stats(capsys, "-z", "io,500ms,client", cap)
    rows, split = doc["tables"]["io"], doc["tables"]["io_by"]
    assert doc["io_interval_s"] == 0.5
    for field in ("requests", "produced_records", "fetched_records", "fetched_bytes"):
        assert sum(r[field] for r in split) == sum(r[field] for r in rows), field
    assert {r["key"] for r in split} == {"lib-group-producer", "lib-member-a", "lib-member-b"}
