"""Which decoded field a finding is about: a finding jump (views 2-4 -> the exchanges view)
selects that field in the tree, so the hex pane shows its bytes. Headless: no textual import.

A finding names its scope in its details (`topic` and `partition`, or `partition_key`
"topic-3"); its kind says which field shows the fact (an HW regression: `high_watermark`; a
sequence gap: the partition's `records`). The field is searched within the scope's node (the
topic entry, then its partition entry); with no such field, the scope itself is selected."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dissectors.jsonify import json_key
from dissectors.node import PRIM, STRUCT, Node

_RECORDS = ("records",)
# finding kind -> the fields that show it, best first (NDJSON keys)
FIELDS: dict[str, tuple[str, ...]] = {
    "produce_error": ("error_code",),
    "heartbeat_error": ("error_code",),
    "record_format_version": _RECORDS,
    "list_offsets_behind": ("offset", "old_style_offsets"),
    "read_committed_got_aborted": ("aborted_transactions", "records"),
    "sequence_gap": _RECORDS,
    "duplicate_sequence": _RECORDS,
    "sequence_overlap": _RECORDS,
    "reorder_risk": _RECORDS,
    "non_idempotent_retry": _RECORDS,
    "follower_truncation": ("diverging_epoch", "fetch_offset", "high_watermark"),
    "hw_regression": ("high_watermark",),
    "hw_stalled": ("high_watermark",),
    "hw_inference_ahead": ("high_watermark",),
    "commit_ahead_of_consumption": ("committed_offset",),
    "commit_rewind": ("committed_offset",),
    "epoch_end_offset": ("end_offset",),
    "leader_epoch_change": ("current_leader_epoch", "leader_epoch"),
    "isr_shrink": ("isr_nodes", "isr"),
    "isr_expand": ("isr_nodes", "isr"),
    "topic_created": ("topic_id", "name"),
    "unresolved_topic_id": ("topic_id",),
}
# finding kind -> the detail holding the value its field shows
VALUE_OF = {
    "hw_regression": "high_watermark",
    "commit_ahead_of_consumption": "committed",
    "epoch_end_offset": "end_offset",
}
# findings about a change (or a commit past what was fetched): their frames are the before, or
# the context (first), and where it happened (last)
CHANGES = frozenset(
    {
        "hw_regression",
        "follower_truncation",
        "duplicate_sequence",
        "sequence_overlap",
        "commit_rewind",
        "commit_ahead_of_consumption",
        "leader_epoch_change",
        "isr_shrink",
        "isr_expand",
    }
)
_TOPIC_KEYS = ("topic", "name", "topic_name")
_PARTITION_KEYS = ("partition_index", "partition", "partition_id", "index")


@dataclass(frozen=True, slots=True)
class Target:
    """What to look for: fields by NDJSON key, within a topic and partition when known."""

    fields: tuple[str, ...]
    topic: str | None = None
    topic_id: str | None = None
    partition: int | None = None
    value: object = None  # the value the finding reports, when it names one: preferred


def target_of(finding: Mapping[str, object]) -> Target:
    """The fields and the scope a finding (report JSON) points at."""
    topic = finding.get("topic")
    partition = finding.get("partition")
    key = finding.get("partition_key")
    if isinstance(key, str) and "-" in key and topic is None:
        t, _, p = key.rpartition("-")
        if p.isdigit():
            topic, partition = t, int(p)
    kind = str(finding.get("kind") or "")
    fields = FIELDS.get(kind, ("error_code",))
    tid = finding.get("topic_id")
    value = finding.get(VALUE_OF[kind]) if kind in VALUE_OF else None
    return Target(
        fields,
        topic if isinstance(topic, str) else None,
        tid if isinstance(tid, str) else None,
        partition if isinstance(partition, int) and not isinstance(partition, bool) else None,
        value,
    )


def jump_frame(finding: Mapping[str, object]) -> int | None:
    """The frame a finding's jump opens: the last one for a change (the first frame shows the
    value before it), else the first."""
    frames = finding.get("frames")
    if not isinstance(frames, list) or not frames:
        return None
    return frames[-1] if finding.get("kind") in CHANGES else frames[0]


def _key(node: Node) -> str:
    return json_key(node.name)[0]


def _child_value(node: Node, keys: tuple[str, ...]) -> object:
    for c in node.children or ():
        if c.kind == PRIM and _key(c) in keys:
            return c.value
    return None


def _is_topic(node: Node, t: Target, names: Mapping[str, str]) -> bool:
    if node.kind != STRUCT:
        return False
    if t.topic is not None and _child_value(node, _TOPIC_KEYS) == t.topic:
        return True
    tid = _child_value(node, ("topic_id",))
    if tid is None:
        return False
    tid = str(tid)
    return (t.topic_id is not None and tid == t.topic_id) or (
        t.topic is not None and names.get(tid) == t.topic
    )


def _is_partition(node: Node, t: Target) -> bool:
    value = _child_value(node, _PARTITION_KEYS)
    return node.kind == STRUCT and value == t.partition and not isinstance(value, bool)


def _find(root: list[Node], match) -> list[Node] | None:  # noqa: ANN001 - a predicate
    """The path (root first) to the first node, depth first, that `match`es."""
    stack: list[list[Node]] = [root]
    while stack:
        path = stack.pop()
        node = path[-1]
        if match(node):
            return path
        kids = node.children if node.kind != "records" else None
        stack.extend([*path, c] for c in reversed(kids or ()))
    return None


def locate(
    body: Node, t: Target, names: Mapping[str, str] | None = None, exact: bool = False
) -> list[Node] | None:
    """The path from `body` to the field `t` names (within its scope), or (unless `exact`) to
    the scope when the field is not there; None when the body has neither."""
    names = names or {}
    scope = [body]
    if t.topic is not None or t.topic_id is not None:
        found = _find(scope, lambda n: _is_topic(n, t, names))
        if found is None:  # not about this side's topics (or another topic's partition)
            return None
        scope = found
    if t.partition is not None:
        found = _find([scope[-1]], lambda n: _is_partition(n, t))
        if found is None:
            return None if len(scope) == 1 or exact else scope
        scope = scope[:-1] + found
    for key in t.fields:
        # an error code: the first one that is not 0 (the scope may list several)
        if key == "error_code":
            hit = _find([scope[-1]], lambda n: _key(n) == "error_code" and n.value not in (0, None))
        else:
            hit = None
            if t.value is not None:  # the field with the reported value, if the scope has it
                hit = _find([scope[-1]], lambda n, k=key: _key(n) == k and n.value == t.value)
            hit = hit or _find([scope[-1]], lambda n, k=key: _key(n) == k)
        if hit is not None:
            return scope[:-1] + hit
    return scope if len(scope) > 1 and not exact else None


def locate_any(
    bodies: list[Node], t: Target, names: Mapping[str, str] | None = None
) -> tuple[int, list[Node]] | None:
    """(which body, path) for the first body holding the field itself, else the first holding
    its scope: a Fetch request names the partition too, the response has its high watermark."""
    for exact in (True, False):
        for k, body in enumerate(bodies):
            path = locate(body, t, names, exact)
            if path:
                return k, path
    return None
