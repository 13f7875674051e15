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
    # another client sent ApiVersions v3: that tells the version
    got = infer(data, 1, [(2, PRODUCE, 10)], "c", [(PRODUCE, 10)], [(APIV, 3), (PRODUCE, 10)])
    assert (got.api, got.version) == (APIV, 3)
    assert got.evidence == "ApiVersions v3: another client in this capture sent it"
    # ... unless clients sent both: ambiguous, not guessed
    got = infer(data, 1, [], None, None, [(APIV, 3), (APIV, 4)])
    assert got.api is None and "sent as v3, v4: ambiguous" in got.reason


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
    from kanalyze.inference import BUDGET

    BUDGET.reset()
    data = frames[(APIV, 3)]
    first = response_fits(data)
    assert BUDGET.left == BUDGET.LIMIT - 1
    assert response_fits(data) == first and BUDGET.left == BUDGET.LIMIT - 1
    BUDGET.left = 0
    assert response_fits(data) == first  # remembered: no search needed
    assert response_fits(data + b"\x00") is None and BUDGET.refused == 1
    BUDGET.reset()
