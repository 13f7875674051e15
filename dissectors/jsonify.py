"""Node trees -> JSON-ready values (the NDJSON body representation).

Names are snake_case derived mechanically from the spec names
(HighWatermark -> high_watermark). Fields absent in a version were never
decoded, so they are never emitted. Error codes get a sibling "<name>_name";
topic ids get a sibling "topic_name" when the capture has told us the name.
Secrets are redacted unless `ctx.show_secrets`.
"""

from __future__ import annotations

import base64
import math
import re

from dissectors.context import DecodeContext
from dissectors.errors import error_name
from dissectors.node import ARRAY, PRIM, RAW, RECORDS, STRUCT, Node
from dissectors.secrets import is_secret, redacted

_SNAKE_CACHE: dict[str, str] = {}
_UNKNOWN_TAG = re.compile(r"^_tag_(\d+)$")


def snake_case(name: str) -> str:
    """HighWatermark -> high_watermark, KRaftVersion -> kraft_version, ISR -> isr."""
    out = _SNAKE_CACHE.get(name)
    if out is None:
        s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.replace("KRaft", "Kraft"))
        s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
        out = _SNAKE_CACHE[name] = s.lower()
    return out


def _b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def _prim(value: object, ctx: DecodeContext) -> object:
    if value is None or value is True or value is False:
        return value
    if is_secret(value) and not ctx.show_secrets:
        return redacted(value)  # type: ignore[arg-type]
    if isinstance(value, bytes | bytearray | memoryview):
        return _b64(bytes(value))
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _is_error_key(key: str) -> bool:
    return key == "error_code" or key.endswith("_error_code")


def node_to_json(node: Node, ctx: DecodeContext) -> object:
    """STRUCT -> dict, ARRAY -> list (null -> None), RECORDS -> its JSON value,
    RAW / bytes -> {"b64": ...}, uuid -> canonical string; secrets redacted."""
    kind = node.kind
    if kind == PRIM:
        return _prim(node.value, ctx)
    if kind == STRUCT:
        if node.children is None:
            return None
        out: dict[str, object] = {}
        for child in node.children:
            if child.kind == RAW:
                m = _UNKNOWN_TAG.match(child.name)
                if m is not None:
                    tags = out.setdefault("_unknown_tags", {})
                    tags[m.group(1)] = _prim(child.value, ctx)  # type: ignore[index]
                    continue
            key = snake_case(child.name)
            value = node_to_json(child, ctx)
            out[key] = value
            if _is_error_key(key) and isinstance(value, int):
                out[f"{key}_name"] = error_name(value)
        if "topic_id" in out and "topic_name" not in out and not isinstance(out.get("name", out.get("topic")), str):
            name = ctx.topic_names.get(out["topic_id"])  # type: ignore[arg-type]
            if name is not None:
                out["topic_name"] = name
        return out
    if kind == ARRAY:
        if node.children is None:
            return None
        return [node_to_json(c, ctx) for c in node.children]
    if kind == RECORDS:
        return node.value
    if kind == RAW:
        value = node.value
        if isinstance(value, bytes | bytearray | memoryview):
            return _prim(value if is_secret(value) else bytes(value), ctx)
        return value
    return node.value
