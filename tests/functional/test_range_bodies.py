"""`report` and `stats` with `--jobs N` decode the bodies in the ranges
(`kanalyze.parallel.range_bodies`): where their merge could differ from one process (a
partition's HW/LEO events, a group's rebalance across the cut), what is shipped (plain data
records as a count, facts as tuples), the topic-name checks and the one-process rerun when a
name a range read differs from the run's."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from dissectors.context import DecodeContext
from kanalyze.bodies import Bodies, BodyDecoder, Records
from kanalyze.parallel import range_bodies, range_session
from kanalyze.parallel.range_bodies import BodiesDigest, ElidedRecords, elide_records
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.ranges import plan_ranges
from kanalyze.parallel.stitch import Unstitchable
from kanalyze.parallel.worker import RecordingNames
from kanalyze.session import Session
from tests.functional.test_range_commands import in_process, one_process  # noqa: F401
from tests.functional.test_ranges import ROOT, cli

pytestmark = pytest.mark.usefixtures("in_process")


def two_ranges(capture: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Cut `capture` into two ranges of about half its bytes; the first packet of the second."""
    size = os.path.getsize(capture) // 2 + 1
    monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
    ranges = plan_ranges([capture], 2, size, bodies=True)
    assert ranges is not None and len(ranges) == 2
    return ranges[1].base + 1


def test_hw_events_straddle_two_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition whose produce, follower fetch and HW events lie on both sides of the cut:
    its timeline and the whole report, text and JSON, as one process has them."""
    capture = "captures/replication/isr.pcap"
    cut = two_ranges(capture, monkeypatch)
    got = cli(["report", "--json", capture, "--jobs", "2"])
    assert range_session.last_fallback is None and range_session.last_ranges == 2
    assert got == one_process(("report", "--json", capture))
    part = json.loads(got[1])["replication"][0]
    frames = [e["frame"] for e in part["timeline"]]
    hw = [e["frame"] for e in part["timeline"] if e["event"].startswith("follower_fetch")]
    assert min(frames) < cut <= max(frames)
    assert min(hw) < cut <= max(hw)
    assert cli(["report", capture, "--jobs", "2"]) == one_process(("report", capture))
    assert range_session.last_fallback is None


@pytest.mark.parametrize("capture",
                         ["captures/kjs_group.pcap", "captures/lib_group_rebalance.pcap"])
def test_group_across_ranges(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer group whose joins, syncs, heartbeats and commits fall in both ranges."""
    cut = two_ranges(capture, monkeypatch)
    group_apis = {"JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch"}
    frames = [ex.request.pdu.last_pkt for ex in Session([capture]).exchanges()
              if ex.api in group_apis and ex.request is not None]
    assert min(frames) < cut <= max(frames)
    for argv in (["report", "--json"], ["stats", "--json"], ["report"]):
        got = cli([*argv, capture, "--jobs", "2"])
        assert range_session.last_fallback is None and range_session.last_ranges == 2
        assert got == one_process((*argv, capture))
    assert json.loads(one_process(("report", "--json", capture))[1])["groups"]


@pytest.mark.parametrize("mode", [("report", "--json"), ("report",), ("stats", "--json")])
def test_name_read_differs_runs_again(mode: tuple[str, ...],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A name a range's decode read that the run's registry does not hold at the same point
    (here made up): the shipped bodies are dropped and the command runs again in one process,
    printing what one process prints."""
    capture = "captures/kp_codecs.pcap"
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    real = BodiesDigest.__call__

    def lying(self: BodiesDigest, ex: object) -> tuple:
        got = real(self, ex)  # type: ignore[arg-type]
        made_up = ({"00000000-0000-0000-0000-00000000abcd": "nope"}, {})
        return (*got[:3], made_up, made_up, *got[5:])

    monkeypatch.setattr(BodiesDigest, "__call__", lying)
    got = cli([*mode, capture, "--jobs", "2"])
    assert (range_session.last_fallback or "").startswith("ran again in one process")
    assert got == one_process((*mode, capture))


def test_learning_from_data_refuses() -> None:
    """A range that named an id from record batches or the metadata log stands down: what
    one process learns there depends on batches other ranges saw."""
    names = RecordingNames({})
    digest = BodiesDigest(names, DecodeContext(), Records.DATA, True, False, True, False)
    digest.finish()
    digest.decoder.names.learn("11111111-2222-3333-4444-555555555555", "t", "record_batches")
    with pytest.raises(Unstitchable, match="learned from the data"):
        digest.finish()
    digest = BodiesDigest(RecordingNames({}), DecodeContext(), Records.DATA, True, False, True,
                          False)
    assert digest.decoder.links is not None
    digest.decoder.links.seen[("b:9092", 0, 0, 1)] = (True, "some-id")
    with pytest.raises(Unstitchable, match="could not name"):
        digest.finish()


def test_elided_records() -> None:
    """Plain records of a magic 2 data batch travel as their count: the same length and
    truth, pickled small, never iterated."""
    e = ElidedRecords(3)
    assert len(e) == 3 and e and not ElidedRecords(0)
    assert pickle.loads(pickle.dumps(e, pickle.HIGHEST_PROTOCOL)) == e
    with pytest.raises(TypeError):
        list(e)
    record = {"offset": 0, "offset_delta": 0, "timestamp": 1, "timestamp_ms": 1,
              "timestamp_type": "create", "attributes": 0, "key": None, "value": "v",
              "headers": [{"key": "h", "value": "x"}]}

    def body(magic: int, control: bool, records: list) -> dict:
        batch = {"magic": magic, "is_control": control, "records": records}
        return {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": {"batches": [batch]}}]}]}

    def records_of(b: dict) -> object:
        return b["topic_data"][0]["partition_data"][0]["records"]["batches"][0]["records"]

    plain = body(2, False, [record, dict(record)])
    elide_records(plain, 0, True)
    assert records_of(plain) == ElidedRecords(2)
    for kept in (body(1, False, [record]), body(2, True, [record]),
                 body(2, False, [{**record, "control": {"type": "COMMIT"}}]),
                 body(2, False, [{**record, "value": {"fields": {}}}])):
        before = json.dumps(kept)
        elide_records(kept, 0, True)
        assert json.dumps(kept) == before
    not_data = body(2, False, [record])
    elide_records(not_data, 0, False)  # a Produce response carries no data
    assert isinstance(records_of(not_data), list)


def test_shipped_facts_and_codes_equal_one_process() -> None:
    """Per exchange of a capture with produce, fetch and errors: the facts and error codes
    computed in a range (records elided first, facts as tuples) equal one process's."""
    capture = str(ROOT / "captures/lib_transactions.pcap")
    one = BodyDecoder(DecodeContext(), Records.DATA)
    digest = BodiesDigest(RecordingNames({}), DecodeContext(), Records.DATA, False, True, True,
                          False)
    compared = 0
    for ex in Session([capture]).exchanges():
        one.learn(ex)
        want = Bodies(ex, one)
        got = digest(ex)
        assert range_bodies.from_tuple(got[5]) == want.facts
        assert (got[7] or []) == want.error_codes()
        compared += bool(want.facts.partitions)
    assert compared > 5


def test_topic_ids_file_in_every_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--topic-ids names by-id topics in every range from its first body on (the ranges'
    registries start from the file): stitched, and what one process prints. Without the file
    the report names the id from record batches (learned from the data): one process; `stats`
    does not learn from the data: stitched, the id unnamed as in one process."""
    capture = "captures/replication/mixed_ids.pcap"
    truth = json.loads((ROOT / "captures/replication/mixed_ids.truth.json").read_text())
    ((tid, name),) = truth["topic_ids"].items()
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({name: tid}))
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    for mode in (["report", "--json"], ["stats", "--json"]):
        argv = [*mode, "--topic-ids", str(ids), capture]
        got = cli([*argv, "--jobs", "2"])
        assert range_session.last_fallback is None and range_session.last_ranges > 2
        assert got == cli([*argv, "--jobs", "1"])
        assert name in got[1].decode()
        got = cli([*mode, capture, "--jobs", "2"])
        learned = "learned from the data" in (range_session.last_fallback or "")
        assert learned == (mode[0] == "report")
        assert got == one_process((*mode, capture))


def test_unshipped_body_read_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stats` ships only the bodies `bodies_read` names; one read after all (here: none
    named, and the tables read ApiVersions requests) makes the run one process again, with
    one process's output. With the real rule, the run stands."""
    from kanalyze.views import stats

    capture = "captures/kp_codecs.pcap"
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    got = cli(["stats", "--json", capture, "--jobs", "2"])
    assert range_session.last_fallback is None
    assert got == one_process(("stats", "--json", capture))
    monkeypatch.setattr(stats, "bodies_read", lambda _ex, _facts: (False, False))
    got = cli(["stats", "--json", capture, "--jobs", "2"])
    assert range_session.last_fallback == (
        "ran again in one process: a body the range did not ship was read")
    assert got == one_process(("stats", "--json", capture))
