"""Consistency of the committed captures and their truth/expect files (no broker, no kanalyze).

These tests check the test material itself: every real capture has its truth, the crafted cases
match what their expect files say, and tshark (where installed) agrees with the expect files on
the cases it can read without help.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
CRAFTED = CAPTURES / "crafted"
TRUTH_KEYS = {
    "schema",
    "scenario",
    "description",
    "pcap",
    "broker",
    "clients",
    "topics",
    "produced",
    "consumed",
    "committed",
    "groups",
    "producer_ids",
    "transactions",
    "secrets",
    "notes",
    "tcpdump",
    "tshark_requests",
    "duration_s",
    "packets",
}
REAL = sorted(CAPTURES.glob("*.truth.json"))
EXPECTS = sorted(CRAFTED.glob("*.expect.json"))


@functools.cache
def _load_crafted_module():
    spec = importlib.util.spec_from_file_location("make_crafted", CAPTURES / "make_crafted.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_crafted"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_there_is_material() -> None:
    assert len(REAL) >= 10
    assert len(EXPECTS) >= 30


@pytest.mark.parametrize("truth_path", REAL, ids=lambda p: p.name)
def test_truth_file(truth_path: Path) -> None:
    truth = json.loads(truth_path.read_text())
    assert set(truth) >= TRUTH_KEYS
    pcap = CAPTURES / truth["pcap"]
    assert pcap.exists() and pcap.stat().st_size < 200_000
    assert truth["packets"] > 0
    for rec in truth["produced"]:
        assert {"client", "codec", "topic", "key", "value", "headers", "offset", "error"} <= set(
            rec
        )
        assert rec["offset"] is None or rec["offset"] >= 0
    for rec in truth["consumed"]:
        assert {
            "client",
            "group",
            "topic",
            "partition",
            "offset",
            "key",
            "value",
            "headers",
        } <= set(rec)
    # the password of a secret never appears in the truth's client configs
    for secret in truth["secrets"]:
        assert secret["value"] not in json.dumps(truth["clients"])


@pytest.mark.parametrize("truth_path", REAL, ids=lambda p: p.name)
def test_real_capture_streams_walk(truth_path: Path) -> None:
    """The crafted-case walker frames every real connection's client stream completely."""
    mk = _load_crafted_module()
    truth = json.loads(truth_path.read_text())
    conns = mk.read_connections(CAPTURES / truth["pcap"], truth["broker"]["port"])
    total = 0
    for segs in conns.values():
        c2s = mk.stream_of(segs, "c2s")
        frames = mk.walk_requests(c2s)
        assert (frames[-1].end if frames else 0) == len(c2s)
        total += len(frames)
    assert total == sum(truth["tshark_requests"].values()) or not truth["tshark_requests"]


@pytest.mark.parametrize("expect_path", EXPECTS, ids=lambda p: p.name)
def test_expect_file(expect_path: Path) -> None:
    expect = json.loads(expect_path.read_text())
    assert expect["schema"] == "kanalyze-crafted-expect/1"
    for f in expect["files"]:
        assert (CRAFTED / f).exists()
        assert (CRAFTED / f).stat().st_size < 64_000
    for x in expect["exchanges"]:
        assert x["expected_status"] in {
            "ok",
            "no_response",
            "request_missing",
            "response_lost",
            "lost",
        }
        assert x["connection"] < max(1, len(expect["connections"]))


TSHARK_CASES = [
    p for p in EXPECTS if not p.name.startswith(("bad_", "gap", "midstream", "rotated"))
]


@pytest.mark.tshark
@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed")
@pytest.mark.parametrize("expect_path", TSHARK_CASES, ids=lambda p: p.name)
def test_crafted_against_tshark(expect_path: Path) -> None:
    expect = json.loads(expect_path.read_text())
    port = expect["kafka_port"]
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(CRAFTED / expect["files"][0]),
            "-o",
            "tcp.reassemble_out_of_order:TRUE",
            "-d",
            f"tcp.port=={port},kafka",
            "-Y",
            f"kafka.request_key && tcp.dstport=={port}",
            "-T",
            "fields",
            "-e",
            "kafka.request_key",
            "-e",
            "kafka.api_version",
            "-e",
            "kafka.correlation_id",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = []
    for line in out.splitlines():
        cols = [c.split(",") for c in line.split("\t")]
        seen += [(int(k), int(v), int(c)) for k, v, c in zip(*cols, strict=True)]
    want = [
        (x["api_key"], x["api_version"], x["correlation_id"])
        for x in expect["exchanges"]
        if x["expected_status"] in ("ok", "no_response")
    ]
    assert sorted(seen) == sorted(want)
