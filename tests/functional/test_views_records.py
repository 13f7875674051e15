"""`kanalyze records` and `kanalyze metadata` on the real-client captures, against what the
clients know (captures/*.truth.json): every record produced or consumed, with its topic,
partition, offset, key, value and headers; every topic with its partitions."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kanalyze.cli import main
from kanalyze.views.records import FormatError, Record, compile_format, format_record

ROOT = Path(__file__).resolve().parents[2]
METADATA_SCHEMA = json.loads((ROOT / "docs" / "metadata.schema.json").read_text())
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
    # `seeded`: records written before the capture started, fetched in it (kn_legacy)
    want = [r for r in t["produced"] + t["consumed"] + t.get("seeded", []) if not r.get("error")]
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
    jsonschema.validate(doc, METADATA_SCHEMA)
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


# -- the KRaft metadata log (kanalyze/views/metadata_log.py) ------------------------------------

KRAFT = ROOT / "captures" / "replication" / "kraft.pcap"


def test_metadata_reads_the_kraft_log(capsys: pytest.CaptureFixture[str]) -> None:
    """captures/replication/kraft.pcap has no Metadata response: its topic and partition come
    from the log's TopicRecord, PartitionRecord and PartitionChangeRecords (encoded by the
    capture's own script, kio for the Fetch v15 around them), as its truth file states them."""
    t = json.loads(KRAFT.with_suffix(".truth.json").read_text())
    assert main(["metadata", "--json", str(KRAFT)]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, METADATA_SCHEMA)
    assert doc["metadata_responses"] == 0 and doc["metadata_log_records"] == 4
    ((tid, name),) = t["topic_ids"].items()
    (topic,) = doc["topics"]
    assert (topic["name"], topic["topic_id"], topic["source"]) == (name, tid, "metadata_log")
    (part,) = topic["partitions"]
    last = [s for s in t["stated"] if s["source"] == "metadata_log"][-1]
    assert (part["leader"], part["isr"]) == (last["leader"], last["isr"])
    assert part["replicas"] == [1, 2, 3] and part["frame"] > topic["frame"] > 0
    assert main(["metadata", str(KRAFT)]) == 0
    out = capsys.readouterr().out
    assert "4 metadata-log records (KRaft)" in out and f'topic "{name}" with 1 partition' in out


def test_metadata_log_states_each_isr_in_turn() -> None:
    """Applied record by record, the log gives the ISRs the truth lists, in order."""
    from kanalyze.commands.metadata import build
    from kanalyze.session import Session

    t = json.loads(KRAFT.with_suffix(".truth.json").read_text())
    want = [s["isr"] for s in t["stated"] if s["source"] == "metadata_log"]
    exs = list(Session([str(KRAFT)]).exchanges())
    seen: list[list[int]] = []
    for n in range(1, len(exs) + 1):
        doc = build(_Replay(exs[:n]))
        parts = doc["topics"][0]["partitions"] if doc["topics"] else []
        if parts and (not seen or parts[0]["isr"] != seen[-1]):
            seen.append(parts[0]["isr"])
    assert seen == want


class _Replay:
    """A session that replays given exchanges."""

    def __init__(self, exs: list) -> None:
        self.exs, self.paths = exs, ["replay"]

    def exchanges(self):  # noqa: ANN201
        return iter(self.exs)


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _cstr(s: str | None) -> bytes:
    return b"\x00" if s is None else _uvarint(len(s.encode()) + 1) + s.encode()


def _record(type_id: int, version: int, body: bytes) -> bytes:
    """A metadata-log value framed by hand from the KRaft specs (frame version 1, type,
    version, then the flexible body): independent of kanalyze's decoders."""
    return _uvarint(1) + _uvarint(type_id) + _uvarint(version) + body


def test_metadata_log_brokers_fencing_leaders_and_deletes() -> None:
    """RegisterBrokerRecord, FenceBrokerRecord, PartitionChangeRecord with a new leader and
    RemoveTopicRecord, encoded by hand from the spec JSON and decoded by kanalyze's dissectors,
    fold into the view."""
    import struct
    import uuid

    from dissectors import DecodeContext
    from kanalyze.bodies.internal import metadata_record
    from kanalyze.views.metadata import ClusterView
    from kanalyze.views.metadata_log import LogFolder

    tid = uuid.UUID("11111111-2222-3333-4444-555555555555")
    register = _record(
        0,
        0,
        struct.pack(">i", 7)  # BrokerId
        + uuid.uuid4().bytes  # IncarnationId
        + struct.pack(">q", 42)  # BrokerEpoch
        + _uvarint(2)  # EndPoints: one
        + _cstr("PLAINTEXT")
        + _cstr("10.1.2.3")
        + struct.pack(">Hh", 9092, 0)
        + b"\x00"  # endpoint's tagged fields
        + _uvarint(1)  # Features: none
        + _cstr("r1")  # Rack
        + b"\x01"  # Fenced
        + b"\x00",
    )
    unfence = _record(8, 0, struct.pack(">iq", 7, 42) + b"\x00")
    topic = _record(2, 0, _cstr("t") + tid.bytes + b"\x00")
    part = _record(
        3,
        0,
        struct.pack(">i", 0)
        + tid.bytes
        + _uvarint(3)
        + struct.pack(">ii", 7, 8)  # Replicas
        + _uvarint(3)
        + struct.pack(">ii", 7, 8)  # Isr
        + _uvarint(1)
        + _uvarint(1)  # Removing-, AddingReplicas
        + struct.pack(">iii", 7, 4, 0)  # Leader, LeaderEpoch, PartitionEpoch
        + b"\x00",
    )
    leader = struct.pack(">i", 8)  # tagged field 1: Leader
    change = _record(5, 0, struct.pack(">i", 0) + tid.bytes + b"\x01\x01\x04" + leader)
    remove = _record(9, 0, tid.bytes + b"\x00")
    ctx = DecodeContext()
    values = [register, unfence, topic, part, change]
    recs = [{"offset": i, "metadata_record": metadata_record(v, ctx)} for i, v in enumerate(values)]
    assert all("diagnostics" not in r["metadata_record"] for r in recs), recs
    body = {
        "responses": [
            {
                "topic": "__cluster_metadata",
                "partitions": [{"records": {"batches": [{"records": recs}]}}],
            }
        ]
    }
    view = ClusterView()
    log = LogFolder(view)
    log.feed(body, True, 10, 1.0)
    log.feed(body, True, 11, 2.0)  # another broker fetching the same records: applied once
    doc = view.to_json([])
    assert doc["metadata_log_records"] == 5
    (b,) = doc["brokers"]
    assert (b["id"], b["host"], b["port"], b["rack"], b["fenced"]) == (
        7,
        "10.1.2.3",
        9092,
        "r1",
        False,
    )
    (p,) = doc["topics"][0]["partitions"]
    assert (p["leader"], p["leader_epoch"], p["isr"], p["frame"]) == (8, 5, [7, 8], 10)
    recs.append({"offset": 5, "metadata_record": metadata_record(remove, ctx)})
    log.feed(body, True, 12, 3.0)
    doc = view.to_json([])
    assert doc["topics"] == [] and doc["deleted_topics"][0]["name"] == "t"
    jsonschema.validate(doc, METADATA_SCHEMA)
