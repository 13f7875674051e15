"""JSON rendering: names, error names, topic ids, uuids, bytes; error table; quirks; the command."""

from __future__ import annotations

import argparse
import inspect
import json
import warnings

import pytest

from dissectors import quirks
from dissectors.context import DecodeContext
from dissectors.decoder import decode_body
from dissectors.errors import ERROR_NAMES, error_name
from dissectors.jsonify import node_to_json, snake_case
from dissectors.node import RECORDS, Node
from tests.support import spec_encoder as se

TOPIC_ID = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.mark.parametrize(
    ("name", "snake"),
    [
        ("HighWatermark", "high_watermark"),
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("TopicId", "topic_id"),
        ("KRaftVersion", "kraft_version"),
        ("ErrorCode", "error_code"),
        ("ISRNodes", "isr_nodes"),
    ],
)
def test_snake_case_is_mechanical(name: str, snake: str) -> None:
    assert snake_case(name) == snake


def _metadata_response(version: int = 12) -> bytes:
    layout = se.api_layout(3, version, False)
    topic_spec = se.field(layout.fields, "Topics")
    part_spec = se.field(topic_spec.fields, "Partitions")
    part = se.random_struct(part_spec.fields, ErrorCode=9)
    topic = se.random_struct(
        topic_spec.fields, Name="orders", TopicId=TOPIC_ID, ErrorCode=3, Partitions=[part]
    )
    return se.encode(layout, se.random_struct(layout.fields, Topics=[topic], ClusterId=None))


def test_error_codes_get_their_names_at_every_level() -> None:
    data = _metadata_response()
    j = node_to_json(
        decode_body(3, 12, False, data, 0, len(data), DecodeContext()), DecodeContext()
    )
    topic = j["topics"][0]
    assert topic["error_code_name"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert topic["partitions"][0]["error_code_name"] == "REPLICA_NOT_AVAILABLE"
    assert topic["topic_id"] == TOPIC_ID  # canonical 8-4-4-4-12


def test_topic_ids_resolve_from_metadata_seen_earlier() -> None:
    ctx = DecodeContext()
    data = _metadata_response()
    decode_body(3, 12, False, data, 0, len(data), ctx)
    assert ctx.topic_names == {TOPIC_ID: "orders"}
    layout = se.api_layout(1, 13, True)
    topic_spec = se.field(layout.fields, "Topics")
    topic = se.random_struct(topic_spec.fields, TopicId=TOPIC_ID, Partitions=[])
    other = se.random_struct(
        topic_spec.fields, TopicId="00000000-0000-0000-0000-00000000abcd", Partitions=[]
    )
    fetch = se.encode(
        layout, se.random_struct(layout.fields, Topics=[topic, other], ForgottenTopicsData=[])
    )
    j = node_to_json(decode_body(1, 13, True, fetch, 0, len(fetch), ctx), ctx)
    assert j["topics"][0]["topic_id"] == TOPIC_ID and j["topics"][0]["topic_name"] == "orders"
    assert "topic_name" not in j["topics"][1]


def test_bytes_records_and_unknown_nodes() -> None:
    ctx = DecodeContext()
    assert node_to_json(Node("x", "prim", 0, 3, b"abc"), ctx) == {"b64": "YWJj"}
    assert node_to_json(Node("r", RECORDS, 0, 0, {"batches": []}), ctx) == {"batches": []}
    assert node_to_json(Node("f", "prim", 0, 8, float("nan")), ctx) == "nan"


def test_error_table() -> None:
    assert ERROR_NAMES[-1] == "UNKNOWN_SERVER_ERROR" and ERROR_NAMES[0] == "NONE"
    assert ERROR_NAMES[6] == "NOT_LEADER_OR_FOLLOWER" and ERROR_NAMES[35] == "UNSUPPORTED_VERSION"
    assert ERROR_NAMES[100] == "UNKNOWN_TOPIC_ID" and ERROR_NAMES[127] == "VOTER_NOT_FOUND"
    assert sorted(ERROR_NAMES) == list(range(-1, 134))
    assert len(set(ERROR_NAMES.values())) == len(ERROR_NAMES)
    assert error_name(5000) == "UNKNOWN_ERROR_CODE_5000" and error_name(None) is None


def test_error_table_agrees_with_kafka_python() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.errors as kerr
    # kafka-python keeps a few pre-KIP names; Kafka renamed them since
    renamed = {
        -1: "UNKNOWN",
        0: "NO_ERROR",
        6: "NOT_LEADER_FOR_PARTITION",
        10: "MESSAGE_SIZE_TOO_LARGE",
        17: "INVALID_TOPIC",
        39: "INVALID_REPLICATION_ASSIGNMENT",
    }
    seen = 0
    for _, cls in inspect.getmembers(kerr, inspect.isclass):
        code = getattr(cls, "errno", None)
        if isinstance(code, int) and isinstance(getattr(cls, "message", None), str):
            seen += 1
            assert code in ERROR_NAMES
            assert cls.message == renamed.get(code, ERROR_NAMES[code]), code
    assert seen >= 128


@pytest.mark.parametrize(
    ("api", "version", "header"),
    [
        (7, 0, 0),
        (7, 1, 1),
        (7, 3, 2),
        (0, 8, 1),
        (0, 9, 2),
        (1, 12, 2),
        (18, 2, 1),
        (18, 3, 2),
        (17, 1, 1),
    ],
)
def test_request_header_version(api: int, version: int, header: int) -> None:
    assert quirks.request_header_version(api, version) == header


@pytest.mark.parametrize(
    ("api", "version", "header"),
    [
        (18, 0, 0),
        (18, 3, 0),
        (18, 4, 0),
        (0, 8, 0),
        (0, 9, 1),
        (3, 9, 1),
        (17, 1, 0),
        (1, 11, 0),
        (1, 12, 1),
    ],
)
def test_response_header_version(api: int, version: int, header: int) -> None:
    assert quirks.response_header_version(api, version) == header


def test_schemas_command_lists_every_api_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kanalyze.commands import schemas as cmd

    parser = argparse.ArgumentParser()
    cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["schemas", "--json"])
    assert args.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["apis"]) == 88
    assert sum(len(a["request_versions"]) + len(a["response_versions"]) for a in doc["apis"]) == 686
    fetch = next(a for a in doc["apis"] if a["api_key"] == 1)
    assert fetch["name"] == "Fetch" and fetch["request_versions"] == list(range(19))
    assert {m["name"] for m in doc["messages"]} >= {
        "ConsumerProtocolSubscription",
        "LeaderChangeMessage",
    }
    args = parser.parse_args(["schemas"])
    assert args.run(args) == 0
    text = capsys.readouterr().out
    assert "Produce" in text and "0-13" in text
