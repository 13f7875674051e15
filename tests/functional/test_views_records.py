"""`kanalyze records` and `kanalyze metadata` on the real-client captures, against what the
clients know (captures/*.truth.json): every record produced or consumed, with its topic,
partition, offset, key, value and headers; every topic with its partitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.views.records import FormatError, Record, compile_format, format_record

ROOT = Path(__file__).resolve().parents[2]
REAL = sorted((ROOT / "captures").glob("*.pcap"))


def truth(cap: Path) -> dict:
    return json.loads(cap.with_suffix(".truth.json").read_text())


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(list(argv)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _rec(r: dict) -> tuple:
    return (r["key"], r["value"], [list(h) for h in r.get("headers") or []])


@pytest.mark.parametrize("cap", REAL, ids=lambda p: p.stem)
def test_records_match_truth(cap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = truth(cap)
    got = run_json(capsys, "records", "--json", str(cap))
    by_offset = {(r["topic"], r["partition"], r["offset"]): r for r in got if r["offset"] >= 0}
    assert len(by_offset) == sum(1 for r in got if r["offset"] >= 0), (
        "a (topic, partition, offset) twice"
    )
    unknown = [r for r in got if r["offset"] < 0]
    want = [r for r in t["produced"] + t["consumed"] if not r.get("error")]
    known = {(r["topic"], r["partition"], r["offset"]): r for r in want if r["offset"] is not None}
    for k, r in known.items():
        assert k in by_offset, f"record {k} of the truth not listed"
        assert _rec(by_offset[k]) == _rec(r), k
    # records the client got no offset for (acks=0) are listed, with their content
    for r in want:
        if r["offset"] is None:
            assert any(_rec(g) == _rec(r) and g["topic"] == r["topic"] for g in got), r["key"]
    # nothing listed that no client produced or consumed
    contents = {(r["topic"], r["partition"]) + tuple(map(str, _rec(r))) for r in want}
    for g in list(by_offset.values()) + unknown:
        assert (g["topic"], g["partition"]) + tuple(map(str, _rec(g))) in contents, g


def test_records_all_shows_every_copy_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(ROOT / "captures" / "lib_group_rebalance.pcap")
    once = run_json(capsys, "records", "--json", cap)
    every = run_json(capsys, "records", "--json", "--all", cap)
    assert len(every) > len(once)  # produced and fetched copies of the same offsets
    assert {r["direction"] for r in every} == {"produce", "fetch"}
    only = run_json(capsys, "records", "--json", "--partition", "1", cap)
    assert only and {r["partition"] for r in only} == {1}
    t = truth(ROOT / "captures" / "lib_group_rebalance.pcap")
    assert len(only) == len({r["offset"] for r in t["produced"] if r["partition"] == 1})
    assert run_json(capsys, "records", "--json", "--topic", "no-such-topic", cap) == []


def test_records_kcat_format(capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(ROOT / "captures" / "lib_codecs.pcap")
    assert (
        main(["records", "-f", "%t|%p|%o|%k|%s|%K|%S|%T|%h|%d|%c\\n", "--topic", "lib-none", cap])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    first = next(
        r for r in truth(Path(cap))["produced"] if r["topic"] == "lib-none" and r["offset"] == 0
    )
    assert lines[0] == "|".join(
        [
            "lib-none",
            "0",
            "0",
            first["key"],
            first["value"],
            str(len(first["key"])),
            str(len(first["value"])),
            str(first["timestamp_ms"]),
            ",".join(f"{k}={v}" for k, v in first["headers"]),
            "produce",
            "lib-producer-none",
        ]
    )


def test_format_strings() -> None:
    r = Record("t", 3, 7, 5, None, b"v\xff", (("a", b"1"), ("b", None)), "fetch", None, 9)
    assert format_record(compile_format("%k|%K|%s|%S|%h|%c|%%"), r) == b"|-1|v\xff|2|a=1,b=||%\n"
    assert (
        format_record(compile_format("%o\\t%p\\n"), r) == b"7\t3\n"
    )  # has its newline: none added
    with pytest.raises(FormatError, match="%x"):
        compile_format("%x")
    with pytest.raises(FormatError):
        compile_format("abc%")


def test_bad_format_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["records", "-f", "%q", str(ROOT / "captures" / "lib_codecs.pcap")])
    assert e.value.code == 2
    assert "unknown format token %q" in capsys.readouterr().err


@pytest.mark.parametrize("cap", REAL, ids=lambda p: p.stem)
def test_metadata_matches_truth(cap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = truth(cap)
    assert main(["metadata", "--json", str(cap)]) == 0
    doc = json.loads(capsys.readouterr().out)
    if not doc["metadata_responses"]:
        assert doc["topics"] == [] and doc["brokers"] == []
        return
    b = t["broker"]
    assert [(x["host"], x["port"]) for x in doc["brokers"]] == [(b["host"], b["port"])]
    leader = doc["brokers"][0]["id"]
    assert doc["controller"] in (leader, None)  # Metadata v0 names no controller
    seen = {x["name"]: x for x in doc["topics"]}
    for name, n in t["topics"].items():
        if name not in seen:
            continue  # a topic no client asked Metadata about
        parts = seen[name]["partitions"]
        assert [p["partition"] for p in parts] == list(range(n)), name
        assert all(p["leader"] == leader and p["isr"] == [p["leader"]] for p in parts)
        assert seen[name]["frame"] > 0
    assert set(seen) & set(t["topics"]) or not t["topics"]


def test_metadata_text_is_kcat_like(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata", str(ROOT / "captures" / "admin.pcap")]) == 0
    out = capsys.readouterr().out
    assert " 1 broker:" in out and "broker 111 at 127.0.0.1:19101  (controller)" in out
    assert 'topic "admin-a" with 3 partitions' in out
    assert "    partition 2, leader 111, replicas: 111, isrs: 111" in out
