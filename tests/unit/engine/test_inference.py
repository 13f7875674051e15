"""Orphan responses inferred by their layout when their own connection has no fitting request
(kanalyze/inference.py): one api only, its version told by requests elsewhere or by being the
only one that fits; otherwise left undecoded with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.inference import MIN_UNSEEN, infer, response_fits
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[3]
APIV, TELEMETRY, PRODUCE = 18, 71, 0


@pytest.fixture(scope="module")
def frames() -> dict[tuple[int, int], bytes]:
    """One real response frame (without its size) per (api, version) of lib_acks.pcap."""
    out: dict[tuple[int, int], bytes] = {}
    for e in Session([str(ROOT / "captures" / "lib_acks.pcap")]).exchanges():
        if e.response is not None and e.api_key is not None and e.api_version is not None:
            out.setdefault((e.api_key, e.api_version), bytes(e.response.pdu.data))
    return out


def test_the_only_layout_that_fits(frames: dict) -> None:
    data = frames[(TELEMETRY, 0)]
    assert {a for a, _v in response_fits(data)} == {TELEMETRY}
    got = infer(data, 5, [(6, PRODUCE, 10)])  # the connection only produced
    assert (got.api, got.version, got.confidence) == (TELEMETRY, 0, "low")
    assert got.evidence == "GetTelemetrySubscriptions v0: the only layout that fits"


def test_versions_sharing_a_layout_need_a_request_to_tell(frames: dict) -> None:
    data = frames[(APIV, 3)]
    assert response_fits(data) == [(APIV, 3), (APIV, 4)]
    got = infer(data, 1, [(2, PRODUCE, 10)])
    assert got.api is None and "only ApiVersions fits, as v3, v4" in got.reason
    assert got.version_only  # worth waiting for: a request elsewhere may tell the version
    # another client sent ApiVersions v3: that tells the version
    pools = (([(PRODUCE, 10)], "c sent it"), ([(APIV, 3), (PRODUCE, 10)], "another sent it"))
    got = infer(data, 1, [(2, PRODUCE, 10)], pools)
    assert (got.api, got.version) == (APIV, 3)
    assert got.evidence == "ApiVersions v3: another sent it"
    # ... unless clients sent both: ambiguous, not guessed
    got = infer(data, 1, [], ((None, "c"), ([(APIV, 3), (APIV, 4)], "any")))
    assert got.api is None and "sent as v3, v4: ambiguous" in got.reason
    assert not got.version_only  # more evidence cannot help


def test_short_frames_are_not_decoded_by_layout_alone() -> None:
    # a correlation id, a zero error code, an empty array: a dozen layouts fit such bytes
    data = b"\x00\x00\x00\x07" + b"\x00" * 6
    assert len(data) < MIN_UNSEEN
    got = infer(data, 7, [])
    assert got.api is None and got.reason


def test_layout_searches_are_bounded_per_run(monkeypatch, capsys) -> None:
    """With the run's layout budget spent, the crafted mid-stream orphan (Metadata v9, found
    by its layout alone) stays undecoded with the reason, and summary counts the refusal: a
    capture of many SYN-less connections costs a bounded number of searches."""
    import json

    from kanalyze import cli
    from kanalyze.inference import LayoutBudget

    cap = str(ROOT / "captures" / "crafted" / "midstream.pcap")

    def orphans() -> list[dict]:
        cli.main(["export", cap])
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        return [d for d in lines if d["status"] == "request_missing"]

    assert [d["api"] for d in orphans()] == ["Metadata"]
    monkeypatch.setattr(LayoutBudget, "LIMIT", 0)
    (left,) = orphans()
    assert left["api"] is None
    assert "layout search skipped" in json.dumps(left["response"]["diagnostics"])
    cli.main(["summary", cap, "--json"])
    assert json.loads(capsys.readouterr().out)["limits"]["layout_search"] >= 1


def test_identical_frames_are_looked_up_not_searched(frames: dict) -> None:
    """Frames that differ only in their correlation id (a connection's Heartbeat responses)
    share one search; each run (`LayoutBudget`, one per Engine) has its own budget."""
    from kanalyze.inference import LayoutBudget

    budget = LayoutBudget()
    data = frames[(APIV, 3)]
    first = response_fits(data, budget)
    assert budget.left == budget.LIMIT - 1
    assert response_fits(data, budget) == first and budget.left == budget.LIMIT - 1
    other_corr = b"\x00\x00\x12\x34" + data[4:]
    assert response_fits(other_corr, budget) == first and budget.left == budget.LIMIT - 1
    budget.left = 0
    assert response_fits(data, budget) == first  # remembered: no search needed
    assert response_fits(data + b"\x00", budget) is None and budget.refused == 1
    assert LayoutBudget().left == LayoutBudget.LIMIT  # a new run starts afresh


HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, JOIN_GROUP = 12, 13, 8, 11


def test_a_short_response_is_not_given_to_a_request_that_fits_when_a_rival_may_have() -> None:
    """A throttle time and an error code fit Heartbeat v3 and LeaveGroup v1 alike: a consumer
    whose requests after the cut are LeaveGroup (and others that do not fit) may have sent the
    missing Heartbeat before it, so the response stays undecoded (it was decoded as
    LeaveGroup, wrongly, in 5 of 790 cut orphans)."""
    data = b"\x00\x00\x00\x0c" + b"\x00" * 6  # correlation id 12, throttle 0, error 0
    fits = {a for a, _v in response_fits(data)}
    assert {HEARTBEAT, LEAVE_GROUP} <= fits
    got = infer(data, 12, [(13, OFFSET_COMMIT, 9), (14, LEAVE_GROUP, 1)])
    assert got.api is None and "Heartbeat" in got.reason and "may send" in got.reason
    # an api of a kind the client never showed is no rival: a request that fits is taken
    broker_only = {4, 5, 7}  # LeaderAndIsr, StopReplica, ControlledShutdown
    assert broker_only & fits
    got = infer(data, 12, [(13, 18, 3), (14, LEAVE_GROUP, 1)])
    assert got.api is None  # LeaveGroup shows the group kind: Heartbeat is still a rival


def test_rivals_are_the_apis_a_client_sends_and_their_kind() -> None:
    from kanalyze.api_kinds import rivals

    sent = {(LEAVE_GROUP, 1), (0, 9)}  # a group member that produces
    cands = {(HEARTBEAT, 3), (4, 1), (LEAVE_GROUP, 2), (22, 4), (26, 5)}
    # Heartbeat: the group kind; LeaveGroup v2: sent, but in another version (a client uses
    # one); InitProducerId: a producer's; EndTxn: only a transactional producer's; LeaderAndIsr:
    # a broker's
    assert rivals(cands, sent) == {HEARTBEAT, 22}
    assert rivals({(10, 2)}, {(10, 3)}) == set()  # FindCoordinator shows no kind


def test_evidence_trusts_only_what_the_same_program_sent() -> None:
    """A host running two programs: what one sent tells nothing about the other's versions;
    client ids that announced one software, or behave alike, pool their evidence."""
    from kanalyze.evidence import ANY_CLIENT, Evidence

    ev = Evidence()
    for cid, pairs in {
        "lib-a": [(3, 12), (8, 9)],
        "kp": [(18, 4), (3, 12), (32, 4)],
        "lib-b": [(3, 12), (8, 9), (18, 3)],
    }.items():
        for pair in pairs:
            ev.sent(cid, (ANY_CLIENT,), pair)
    assert ev.alike("lib-a", "lib-b")  # Metadata v12 and OffsetCommit v9 both
    assert not ev.alike("lib-a", "kp")  # only Metadata in common
    assert set(ev.told(ANY_CLIENT, "lib-a")) == {(3, 12), (8, 9), (18, 3)}
    assert ev.told(ANY_CLIENT, None) == []  # a connection that sent nothing: programs mixed
    ev.software.update({"kp": "kafka-python/2", "lib-a": "kafka-python/2"})
    assert (18, 4) in ev.told(ANY_CLIENT, "lib-a")  # the same software announced


def test_client_software_from_an_api_versions_request() -> None:
    from kanalyze.evidence import client_software

    body = b"\x0blibrdkafka\x062.3.0\x00"
    assert client_software(b"xx" + body, 2) == "librdkafka/2.3.0"
    assert client_software(b"\x7f", 0) is None  # cut short: no guess
