"""The compiled plan: every version question answered once, frozen, memoized."""

from __future__ import annotations

import dataclasses

import pytest

from dissectors.plan import (
    FIXED_SIZE,
    RECORDS,
    STRING,
    STRUCT,
    FixedRun,
    body_plan,
    message_plan,
)


def _field(plan, name):
    (f,) = [f for f in (*plan.fields, *plan.tagged) if f.name == name]
    return f


def test_a_plan_is_built_once_and_frozen() -> None:
    plan = body_plan(0, 9, True)
    assert plan is body_plan(0, 9, True) and plan is not body_plan(0, 8, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.label = "changed"  # type: ignore[misc]


def test_unknown_api_or_version_has_no_plan() -> None:
    assert body_plan(9999, 0, True) is None
    assert body_plan(0, 999, True) is None
    assert message_plan("NoSuchMessage", 0) is None


def test_fields_are_resolved_for_the_version() -> None:
    req = body_plan(0, 9, True)
    assert req is not None and req.flexible and req.label == "api 0 v9 request"
    assert [f.name for f in req.fields] == ["TransactionalId", "Acks", "TimeoutMs", "TopicData"]
    tid = _field(req, "TransactionalId")
    assert (tid.kind, tid.compact, tid.nullable, tid.min_size) == (STRING, True, True, 1)
    topics = _field(req, "TopicData")
    assert topics.array and topics.kind == STRUCT and topics.struct is not None
    part = _field(topics.struct, "PartitionData").struct
    assert part is not None and _field(part, "Records").kind == RECORDS
    assert req.min_size == 1 + 1 + 2 + 4 + 1  # tag section, string, int16, int32, array
    old = body_plan(0, 2, True)
    assert old is not None and not old.flexible
    assert [f.name for f in old.fields] == ["Acks", "TimeoutMs", "TopicData"]
    assert _field(old, "TopicData").compact is False


def test_presence_follows_the_version_ranges() -> None:
    def topic_fields(version):
        plan = body_plan(0, version, False)
        return [f.name for f in _field(plan, "Responses").struct.fields]

    assert topic_fields(12)[:1] == ["Name"]
    assert topic_fields(13)[:1] == ["TopicId"]


def test_fixed_size_runs_are_fused_and_tags_kept_apart() -> None:
    plan = body_plan(0, 10, False)
    parts = _field(_field(plan, "Responses").struct, "PartitionResponses").struct
    run = parts.steps[0]
    assert isinstance(run, FixedRun)
    names = ["Index", "ErrorCode", "BaseOffset", "LogAppendTimeMs", "LogStartOffset"]
    assert [f.name for f in run.fields] == names
    assert run.codec.format == ">ihqqq" and run.offsets == (0, 4, 6, 14, 22)
    assert all(f.kind == FIXED_SIZE and f.fixed for f in run.fields)
    (leader,) = parts.tagged
    assert leader.name == "CurrentLeader" and leader.tag == 0
    assert "CurrentLeader" not in [f.name for f in parts.fields]
