"""Every real-client capture: exports validate, decode cleanly and account for every byte."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dissectors.context import DecodeContext
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
SCHEMA = json.loads((ROOT / "docs" / "exchange.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


# Bytes real clients send that do not follow Apache Kafka's definitions: kanalyze reports
# them (the operator should know), so they are listed here rather than hidden.
KNOWN_CLIENT_DEVIATIONS = {
    # librdkafka's admin client sends 3 bytes more than Metadata v12 defines. tshark 4.0 reads
    # them as IncludeClusterAuthorizedOperations (a v8-10 field) plus an empty tag 0.
    ("Metadata", 12, "request", "trailing_bytes", "3 bytes after the body"),
    # ... and bytes a real broker sends: tansu 0.6.0's ListOffsets v0 response ends after each
    # partition's error code (no old_style_offsets array; kn_legacy). tshark 4.0: Malformed.
    ("ListOffsets", 0, "response", "truncated", "Partitions: 1 elements: need 10 bytes, 6 left"),
}


def truth(cap: Path) -> dict:
    t = cap.with_suffix(".truth.json")
    return json.loads(t.read_text()) if t.exists() else {}


def export(cap: Path) -> tuple[list[dict], Session]:
    port = truth(cap).get("broker", {}).get("port")
    s = Session([str(cap)], EngineOptions(ports=frozenset({port}) if port else frozenset()))
    enc = ExchangeEncoder(DecodeContext(strict=True))
    return [enc.encode(ex) for ex in s.exchanges()], s


def test_there_are_real_captures():
    assert len(CAPTURES) >= 8


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.stem)
def test_capture_exports_cleanly(cap):
    rows, s = export(cap)
    assert rows, "no exchanges recovered"
    for row in rows:
        VALIDATOR.validate(json.loads(json.dumps(row)))
    # no decoding diagnostics anywhere on real-client traffic
    diags = [
        (r["api"], r["api_version"], side, d["code"], d["message"])
        for r in rows
        for side in ("request", "response")
        if r[side]
        for d in r[side]["diagnostics"]
    ]
    assert [d for d in diags if d not in KNOWN_CLIENT_DEVIATIONS] == []
    # byte accounting: stream = frames + skipped + gaps, and real loopback traffic loses nothing
    st = s.engine.stats
    for side in (st.client, st.broker):
        assert side.stream == side.frames + side.skipped + side.gaps
        assert side.skipped == 0 and side.gaps == 0
    # ordered by start time
    starts = [r["request"]["ts"] if r["request"] else r["response"]["ts"] for r in rows]
    assert starts == sorted(starts)
    # every response was matched to its request
    assert not [r for r in rows if r["status"] == "request_missing"]


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.stem)
def test_unanswered_requests_are_only_the_last_on_their_connection(cap):
    """A request without a response is legitimate only when the capture ended while it waited."""
    rows, _ = export(cap)
    last_start: dict[int, float] = {}
    for r in rows:
        if r["request"]:
            cid = r["connection"]["id"]
            last_start[cid] = max(last_start.get(cid, 0.0), r["request"]["ts"])
    for r in rows:
        if r["status"] == "no_response" and r.get("acks") != 0:
            assert r["request"]["ts"] == last_start[r["connection"]["id"]], (
                r["api"],
                r["correlation_id"],
            )


def test_frames_and_times_match_packets():
    rows, _ = export(ROOT / "captures" / "lib_codecs.pcap")
    for r in rows:
        for side in ("request", "response"):
            m = r[side]
            if m:
                assert 1 <= m["first_frame"] <= m["frame"]
    ok = [r for r in rows if r["status"] == "ok" and r["response"]]
    assert all(r["response"]["frame"] > r["request"]["frame"] for r in ok)
    assert all(
        abs(r["latency_ms"] - (r["response"]["ts"] - r["request"]["ts"]) * 1000) < 0.01 for r in ok
    )


# the crafted ones too: diagnostics, inferred apis, cut headers (kanalyze/export/header_text.py)
CRAFTED = sorted((ROOT / "captures" / "crafted").glob("*.pcap*"))


@pytest.mark.parametrize("cap", CAPTURES + CRAFTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fast_header_only_lines_equal_the_generic_encoding(cap):
    from kanalyze.capture import CaptureError
    from kanalyze.export import dumps

    enc = ExchangeEncoder(decode=False)
    s = Session([str(cap)])
    try:
        exchanges = list(s.exchanges())
    except CaptureError:  # crafted to be no capture at all
        return
    for ex in exchanges:
        line = enc.line(ex)
        assert line == dumps(enc.encode(ex))
        assert json.loads(line)["schema"] == "kanalyze.exchange/1"
