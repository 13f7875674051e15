"""Decoding a body or a structure into a Node tree: the schema walker's entry points.

Each (api, version, direction) -- or (structure name, version) -- has one plan
(`dissectors.plan`), turned once into reader closures (`dissectors.readers`).
Nothing escapes `decode_body` and `decode_message`: bad bytes become diagnostics
on the nodes (partially decoded siblings stay in the tree), and an internal bug
becomes an `internal_error` diagnostic and a raw node (re-raised when
`ctx.strict`). After the walk, the body hook registered for the api (embedded
protocols, learned topic names; `dissectors.registry`) rewrites fields in place.
"""

from __future__ import annotations

from functools import cache

from dissectors import quirks, schemas
from dissectors.context import DecodeContext
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import RAW, Node
from dissectors.plan import (
    api_definition,
    body_plan,
    message_definition,
    message_plan,
    schema_module,
)
from dissectors.primitives import DecodeError
from dissectors.readers import Reader, struct_reader
from dissectors.registry import BODY_HOOKS
from dissectors.secrets import SECRET_BODIES, SecretBytes, withhold, withhold_swallowed

__all__ = [
    "api_definition",
    "body_reader",
    "decode_body",
    "decode_message",
    "message_definition",
    "message_reader",
    "schema_module",
]


@cache
def body_reader(api_key: int, version: int, is_request: bool) -> Reader | None:
    """The compiled walker of one (api, version, direction); None when unknown."""
    plan = body_plan(api_key, version, is_request)
    return None if plan is None else struct_reader(plan)


@cache
def message_reader(name: str, version: int) -> Reader | None:
    """The compiled walker of a non-API structure in one version; None when unknown."""
    plan = message_plan(name, version)
    return None if plan is None else struct_reader(plan)


# ------------------------------------------------------------------ entry points


def _unattributed(buf, start: int, end: int) -> SecretBytes:
    """Bytes no field accounts for (trailing bytes, a raw fallback, the rest after the decode
    budget): a damaged length may have pulled the next frames in -- a SASL token, a delegation
    token -- so they are redacted like a secret unless --show-secrets (docs/limits.md)."""
    return SecretBytes(buf[start:end])


def _raw(name: str, buf, offset: int, end: int, code: Code, message: str) -> Node:
    node = Node(name, RAW, offset, max(end - offset, 0), _unattributed(buf, offset, end))
    node.diagnostics.append(Diagnostic(code, offset, message))
    return node


def _walk(reader: Reader, mv: memoryview, offset: int, end: int, ctx: DecodeContext) -> Node:
    out: list[Node] = []
    try:
        pos = reader(mv, offset, end, ctx, out, "body")
    except DecodeError as err:
        node = out[0]
        if err.code is Code.DECODE_BUDGET:  # the rest of the frame stays raw
            kids = node.children
            assert kids is not None  # the body is a struct
            kids.append(Node("_undecoded", RAW, err.offset, end - err.offset,
                             _unattributed(mv, err.offset, end)))
            node.length = end - offset
        return node
    node = out[0]
    if pos < end:
        node.diagnostics.append(
            Diagnostic(Code.TRAILING_BYTES, pos, f"{end - pos} bytes after the body")
        )
        kids = node.children
        assert kids is not None  # the body is a struct
        kids.append(Node("_trailing", RAW, pos, end - pos, _unattributed(mv, pos, end)))
        node.length = end - offset
    return node


def _view(buf, end: int) -> tuple[memoryview, int]:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return mv, min(end, len(mv))


def decode_body(
    api_key: int,
    api_version: int,
    is_request: bool,
    buf: bytes | memoryview,
    offset: int,
    end: int,
    ctx: DecodeContext,
) -> Node:
    """Decode a request/response body occupying buf[offset:end] into a STRUCT node "body".

    Never raises on bad bytes; an unknown api or version keeps the body raw with a
    diagnostic; an internal bug becomes INTERNAL_ERROR (re-raised if ctx.strict)."""
    mv, end = _view(buf, end)
    own_budget = ctx.start_budget(end - offset)
    try:
        if not is_request:
            api_version = quirks.response_body_version(api_key, api_version, mv, offset, end)
        reader = body_reader(api_key, api_version, is_request)
        if reader is None:
            if schemas.API_MODULES.get(api_key) is None:
                return _raw("body", mv, offset, end, Code.UNKNOWN_API, f"unknown API key {api_key}")
            return _guard(_raw(
                "body",
                mv,
                offset,
                end,
                Code.UNSUPPORTED_VERSION,
                f"API key {api_key} version {api_version} is outside the known versions",
            ), api_key, is_request, ctx)
        node = _walk(reader, mv, offset, end, ctx)
        hook = BODY_HOOKS.get((api_key, is_request))
        if hook is not None:
            hook(node, api_version, mv, ctx)
        return _guard(node, api_key, is_request, ctx)
    except Exception as exc:  # noqa: BLE001 -- the one exception boundary per body
        if ctx.strict:
            raise
        # the type only: an exception's text may quote the bytes (a credential)
        why = f"internal error: {type(exc).__name__}"
        node = _raw("body", mv, offset, end, Code.INTERNAL_ERROR, why)
        return _guard(node, api_key, is_request, ctx)
    finally:
        if own_budget:
            ctx.end_budget()


def _guard(node: Node, api_key: int, is_request: bool, ctx: DecodeContext) -> Node:
    """A damaged body that carries credentials shows none of its bytes (secrets.withhold); a
    damaged body of another API whose undecoded bytes hold SASL frames neither. Not for a
    trial decode (`ctx.judging`): its node is judged and dropped, never output."""
    if ctx.judging:
        return node
    if (api_key, is_request) in SECRET_BODIES:
        withhold(node)
    else:
        withhold_swallowed(node)
    return node


def decode_message(
    name: str, version: int, buf: bytes | memoryview, offset: int, end: int, ctx: DecodeContext
) -> Node:
    """Decode a non-API structure (e.g. "LeaderChangeMessage") occupying buf[offset:end]."""
    mv, end = _view(buf, end)
    try:
        reader = message_reader(name, version)
        if reader is None:
            code = Code.UNSUPPORTED_VERSION if name in schemas.MESSAGE_MODULES else Code.UNKNOWN_API
            return _raw("body", mv, offset, end, code, f"no schema for {name} version {version}")
        return _walk(reader, mv, offset, end, ctx)
    except Exception as exc:  # noqa: BLE001 -- the one exception boundary per structure
        if ctx.strict:
            raise
        why = f"internal error: {type(exc).__name__}"
        return _raw("body", mv, offset, end, Code.INTERNAL_ERROR, why)
