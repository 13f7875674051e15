"""Differential test against tshark (Wireshark 4.0) on the real-client captures.

Where tshark dissects a PDU completely (no expert info at all: it flags every
version it does not support, every unknown API and every response whose
request it did not see), the values both decoders give for the same fields
must agree, compared as multisets per frame.

Intended differences, handled by the field mapping below:
- tshark files Metadata's ControllerId under kafka.node_id; we keep
  `controller_id` apart (the mapping counts both).
- tshark omits empty strings from its field output; we emit "" (dropped here).
- FindCoordinator v0's Key is a group id: tshark files it under kafka.consumer_group
  (v1+: kafka.coordinator_key, not compared).
- Consumer-protocol bytes inside JoinGroup/SyncGroup/DescribeGroups are
  decoded by us (topics, partitions, generation ids) and left opaque by
  tshark 4.0; values under those embedded structs are not compared.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = sorted((ROOT / "captures").glob("*.pcap"))
EMBEDDED_KEYS = {"metadata", "assignment", "member_metadata", "member_assignment"}


def _topic_parent(key: str | None) -> bool:
    """Arrays of per-topic structs: topics, topic_data, responses, v3_and_below_topics, ..."""
    return key is not None and ("topic" in key or key == "responses") and "forgotten" not in key


# tshark field -> (our keys holding that value, our list keys whose elements hold it)
FIELDS: dict[str, tuple[set[str], set[str]]] = {
    "kafka.error": ({"error_code"}, set()),
    "kafka.throttle_time": ({"throttle_time_ms"}, set()),
    "kafka.session_timeout": ({"session_timeout_ms"}, set()),
    "kafka.rebalance_timeout": ({"rebalance_timeout_ms"}, set()),
    "kafka.member_id": ({"member_id"}, set()),
    "kafka.generation_id": ({"generation_id", "generation_id_or_member_epoch"}, set()),
    "kafka.protocol_type": ({"protocol_type"}, set()),
    "kafka.node_id": ({"node_id", "controller_id"}, set()),
    "kafka.host": ({"host"}, set()),
    "kafka.port": ({"port"}, set()),
    "kafka.consumer_group": ({"group_id"}, {"groups"}),
    "kafka.api_versions.api_key": ({"api_key"}, set()),
    "kafka.api_versions.min_version": ({"min_version"}, set()),
    "kafka.api_versions.max_version": ({"max_version"}, set()),
    "kafka.leader_id": ({"leader_id"}, set()),
    "kafka.partition_id": (
        {"partition_index", "partition", "index"},
        {"partition_indexes", "partitions"},
    ),
    # special: name/topic inside a topic array; DeleteTopics v0-5 lists plain names
    "kafka.topic_name": (set(), {"topic_names"}),
}


def _collect(obj: object, out: dict[str, list[str]], parent: str | None = None) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in EMBEDDED_KEYS and isinstance(value, dict):
                continue
            if isinstance(value, dict | list):
                _collect(value, out, key)
                continue
            if value is None or value == "" or key.endswith("_name") and key != "name":
                continue
            for field, (keys, _) in FIELDS.items():
                if key in keys or field == "kafka.error" and key.endswith("_error_code"):
                    out[field].append(str(value))
            if key in ("name", "topic") and _topic_parent(parent):
                out["kafka.topic_name"].append(str(value))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict | list):
                _collect(item, out, parent)
            elif item is not None and item != "":
                for field, (_, list_keys) in FIELDS.items():
                    if parent in list_keys:
                        out[field].append(str(item))


def _ours(path: Path) -> tuple[dict[int, dict[str, list[str]]], set[str]]:
    from dissectors.context import DecodeContext
    from kanalyze.export import ExchangeEncoder
    from kanalyze.session import Session

    enc = ExchangeEncoder(DecodeContext(strict=True))
    frames: dict[int, dict[str, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    ports = set()
    for ex in Session([str(path)]).exchanges():
        ports.add(ex.conn.broker.rsplit(":", 1)[1])
        for msg, is_request in ex.messages():
            m = enc.message(ex, msg, is_request)
            _collect(m["body"], frames[m["frame"]])
            if ex.api_key == 10 and ex.api_version == 0 and is_request:
                # FindCoordinator v0's Key (a group id): tshark's kafka.consumer_group
                key = (m["body"] or {}).get("key")
                if key:
                    frames[m["frame"]]["kafka.consumer_group"].append(key)
    return frames, ports


def _tshark(path: Path, ports: set[str]) -> list[list[str]]:
    args = [
        "tshark",
        "-r",
        str(path),
        "-Y",
        "kafka",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=|",
    ]
    for p in sorted(ports):
        args += ["-d", f"tcp.port=={p},kafka"]
    args += ["-e", "frame.number", "-e", "_ws.expert.message"]
    for field in FIELDS:
        args += ["-e", field]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.tshark
@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.skipif(not CAPTURES, reason="no captures in the checkout")
@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_fields_agree_with_tshark(path: Path) -> None:
    pytest.importorskip("kanalyze.session")
    ours, ports = _ours(path)
    compared = 0
    mismatches = []
    for cols in _tshark(path, ports):
        if not cols[0].isdigit() or cols[1]:
            continue  # tshark did not dissect this frame completely
        frame = int(cols[0])
        for field, value in zip(FIELDS, cols[2:], strict=False):
            theirs = sorted(v for v in value.split("|") if v != "")
            mine = sorted(ours[frame][field])
            if theirs or mine:
                compared += 1
            if theirs != mine:
                mismatches.append((frame, field, theirs[:6], mine[:6]))
    if compared == 0:
        pytest.skip("tshark dissected no frame of this capture completely (versions too new)")
    assert not mismatches
