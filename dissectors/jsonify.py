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
from dissectors.node import ARRAY, PRIM, RAW, RECORDS, STRUCT, LazyNode, Node
from dissectors.secrets import SecretBytes, is_secret, redacted

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


_KEYS: dict[str, tuple[str, bool]] = {}  # spec name -> (snake_case key, is an error-code key)


def json_key(name: str) -> tuple[str, bool]:
    out = _KEYS.get(name)
    if out is None:
        key = snake_case(name)
        out = _KEYS[name] = (key, _is_error_key(key))
    return out


class JsonWalk:
    """What `node_to_json_collect` gathers besides the value: the diagnostics of every node
    of the tree (depth-first, as `Node.walk` visits them; JSON form, "source" added for
    decompressed buffers) and whether a float outside the range where every JSON encoder
    spells it the same way (0 or 1e-4 <= |x| < 1e16) was met."""

    __slots__ = ("diagnostics", "odd_float")

    def __init__(self) -> None:
        self.diagnostics: list[dict[str, object]] = []
        self.odd_float = False


def node_to_json(node: Node, ctx: DecodeContext) -> object:
    """STRUCT -> dict, ARRAY -> list (null -> None), RECORDS -> its JSON value,
    RAW / bytes -> {"b64": ...}, uuid -> canonical string; secrets redacted."""
    return _json(node, ctx, None)


def node_to_json_collect(node: Node, ctx: DecodeContext, walk: JsonWalk) -> object:
    """`node_to_json`, and in the same pass the tree's diagnostics into `walk` (see JsonWalk)."""
    return _json(node, ctx, walk)


def _diags(node: Node, walk: JsonWalk) -> None:
    out = walk.diagnostics
    source = node.source
    for d in node.diagnostics:
        item = d.to_json()
        if source:
            item["source"] = source
        out.append(item)


def _subtree_diags(node: Node, walk: JsonWalk) -> None:
    """Diagnostics of node and its descendants, in `Node.walk` order."""
    if node.diagnostics:
        _diags(node, walk)
    if type(node) is LazyNode:
        pending = node.pending
        child_diagnostics = getattr(pending, "child_diagnostics", None)
        if child_diagnostics is not None:  # children not built yet: no need to
            out = walk.diagnostics
            for source, diags in child_diagnostics():
                for d in diags:
                    item = d.to_json()
                    if source:
                        item["source"] = source
                    out.append(item)
            return
    kids = node.children
    if kids:
        for c in kids:
            if type(c) is LazyNode or c.children:
                _subtree_diags(c, walk)
            elif c.diagnostics:
                _diags(c, walk)


def json_float(value: float, walk: JsonWalk | None) -> object:
    if not math.isfinite(value):
        return str(value)
    if walk is not None and value and not 1e-4 <= abs(value) < 1e16:
        walk.odd_float = True
    return value


def _json(node: Node, ctx: DecodeContext, walk: JsonWalk | None) -> object:
    kind = node.kind
    if walk is not None:
        if kind in (PRIM, STRUCT, ARRAY):
            if node.diagnostics:
                _diags(node, walk)
            if kind == PRIM and node.children:
                for c in node.children:
                    _subtree_diags(c, walk)
        else:
            _subtree_diags(node, walk)
    if kind == PRIM:
        value = node.value
        t = type(value)
        if t is int or t is str or value is None or t is bool:
            return value
        if t is float:
            return json_float(value, walk)
        return _prim(value, ctx)
    if kind == STRUCT:
        children = node.children
        if children is None:
            return None
        out: dict[str, object] = {}
        for child in children:
            ckind = child.kind
            if ckind == PRIM:  # the common case, inline
                if walk is not None and (child.diagnostics or child.children):
                    _subtree_diags(child, walk)
                value = child.value
                t = type(value)
                if t is float:
                    value = json_float(value, walk)
                elif not (t is int or t is str or value is None or t is bool):
                    value = _prim(value, ctx)
            else:
                if ckind == RAW:
                    m = _UNKNOWN_TAG.match(child.name)
                    if m is not None:
                        if walk is not None:
                            _subtree_diags(child, walk)
                        tags = out.setdefault("_unknown_tags", {})
                        tags[m.group(1)] = _prim(child.value, ctx)  # type: ignore[index]
                        continue
                value = _json(child, ctx, walk)
            key, is_error = _KEYS.get(child.name) or json_key(child.name)
            out[key] = value
            if is_error and isinstance(value, int):
                out[f"{key}_name"] = error_name(value)
        if (
            "topic_id" in out
            and "topic_name" not in out
            and not isinstance(out.get("name", out.get("topic")), str)
        ):
            tid = out["topic_id"]
            name = ctx.topic_names.get(tid) if isinstance(tid, str) else None
            if name is not None:
                out["topic_name"] = name
        return out
    if kind == ARRAY:
        children = node.children
        if children is None:
            return None
        return [_json(c, ctx, walk) for c in children]
    if kind == RECORDS:
        return node.value
    if kind == RAW:
        value = node.value
        if isinstance(value, bytes | bytearray | memoryview):
            if isinstance(value, SecretBytes) and not ctx.show_secrets:  # an object like
                return {"redacted": redacted(value)}  # {"b64": ...}: a raw body stays an object
            return _prim(value if is_secret(value) else bytes(value), ctx)
        if walk is not None and not (value is None or type(value) in _PLAIN):
            walk.odd_float = True  # unknown content: let the caller use the reference encoder
        return value
    if walk is not None and not (node.value is None or type(node.value) in _PLAIN):
        walk.odd_float = True
    return node.value


_PLAIN = frozenset((int, str, bool))
