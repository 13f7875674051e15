"""Protocols carried inside body fields, decoded in place after the schema walk.

- Consumer protocol: JoinGroup / SyncGroup / DescribeGroups member metadata and
  assignments (protocol type "consumer") become ConsumerProtocolSubscription /
  ConsumerProtocolAssignment structs (version = the first int16 of the bytes).
- DefaultPrincipalData: the Envelope request's RequestPrincipal; the Envelope's
  RequestData is decoded as a full request (header + body).
- SASL: SaslAuthenticate auth_bytes parsed for PLAIN, SCRAM and OAUTHBEARER with
  the secret parts marked; anything unparsed stays secret as a whole. Also the
  un-headered SASL frames v0 SaslHandshake clients send (`decode_raw_sasl`).
- Topic ids learned from Metadata / CreateTopics / DescribeTopicPartitions
  responses into `ctx.topic_names`.

An embedded struct keeps the offsets of the bytes field it replaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from dissectors import quirks, schemas
from dissectors.apis import ApiKey
from dissectors.context import DecodeContext
from dissectors.decoder import decode_body, decode_message, message_reader
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import ARRAY, PRIM, STRUCT, Node
from dissectors.plan import schema_module
from dissectors.primitives import INT16, DecodeError
from dissectors.registry import register_body_hook
from dissectors.secrets import SecretBytes, SecretStr

NULL_UUID = "00000000-0000-0000-0000-000000000000"


def _each(node: Node, *path: str) -> Iterator[Node]:
    """Nodes reached from `node` by field names; "*" steps into every array element."""
    if not path:
        yield node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if node.kind == ARRAY and node.children:
            for c in node.children:
                yield from _each(c, *rest)
        return
    named = node.child(head) if node.children else None
    if named is not None:
        yield from _each(named, *rest)


def _value(node: Node, name: str) -> object:
    c = node.child(name) if node.children else None
    return None if c is None else c.value


def _data_span(node: Node) -> tuple[int, int]:
    """(start, end) of a bytes field's data, after its length prefix."""
    end = node.offset + node.length
    return end - len(node.value), end


# ------------------------------------------------------------------ versioned structures


def _max_version(name: str) -> int:
    mod = schema_module(schemas.MESSAGE_MODULES[name])
    return mod.MESSAGE[-1]["valid"][1]


def embed_versioned(
    node: Node, message: str, buf: bytes | memoryview, ctx: DecodeContext, require_clean: bool
) -> bool:
    """Replace a bytes node by `message` decoded from it (int16 version first), only when the
    version is one the schema knows and the bytes decode without any diagnostic: never a partial
    decode that looks valid. Otherwise the bytes stay as they are, with a diagnostic saying why --
    unless `require_clean` (the bytes may not be this structure at all: no complaint)."""
    value = node.value
    if not isinstance(value, bytes) or not value:
        return False
    start, end = _data_span(node)

    def keep_raw(code: Code, why: str) -> bool:
        if not require_clean:
            node.diagnostics.append(Diagnostic(code, start, f"{message} {why}: kept as bytes"))
        return False

    if len(value) < 2:
        return keep_raw(Code.TRUNCATED, "shorter than its int16 version")
    version = INT16.unpack_from(buf, start)[0]
    if not 0 <= version <= _max_version(message):
        return keep_raw(Code.UNSUPPORTED_VERSION, f"version {version} is not one the schema knows")
    sub = decode_message(message, version, buf, start + 2, end, ctx)
    problems = [d for n in sub.walk() for d in n.diagnostics]
    if sub.kind != STRUCT or problems:
        first = problems[0] if problems else None
        why = first.message if first else "not a structure"
        code = first.code if first else Code.BAD_LENGTH
        return keep_raw(code, f"v{version} does not decode ({why})")
    node.kind = STRUCT
    node.value = None
    node.children = [Node("Version", PRIM, start, 2, version), *(sub.children or ())]
    return True


def _consumer(node: Node, protocol_type: object, message: str, buf, ctx: DecodeContext) -> None:
    if protocol_type == quirks.CONSUMER_PROTOCOL_TYPE:
        embed_versioned(node, message, buf, ctx, require_clean=False)
    elif protocol_type is None:  # older versions do not repeat the protocol type
        embed_versioned(node, message, buf, ctx, require_clean=True)


SUB = "ConsumerProtocolSubscription"
ASSIGN = "ConsumerProtocolAssignment"


def _join_group_request(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    ptype = _value(body, "ProtocolType")
    for n in _each(body, "Protocols", "*", "Metadata"):
        _consumer(n, ptype, SUB, buf, ctx)


def _join_group_response(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    ptype = _value(body, "ProtocolType")
    for n in _each(body, "Members", "*", "Metadata"):
        _consumer(n, ptype, SUB, buf, ctx)


def _sync_group_request(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    ptype = _value(body, "ProtocolType")
    for n in _each(body, "Assignments", "*", "Assignment"):
        _consumer(n, ptype, ASSIGN, buf, ctx)


def _sync_group_response(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    for n in _each(body, "Assignment"):
        _consumer(n, _value(body, "ProtocolType"), ASSIGN, buf, ctx)


def _describe_groups_response(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    for group in _each(body, "Groups", "*"):
        ptype = _value(group, "ProtocolType")
        if ptype != quirks.CONSUMER_PROTOCOL_TYPE:
            continue
        for m in _each(group, "Members", "*"):
            for n in _each(m, "MemberMetadata"):
                _consumer(n, ptype, SUB, buf, ctx)
            for n in _each(m, "MemberAssignment"):
                _consumer(n, ptype, ASSIGN, buf, ctx)


def _envelope_request(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    for n in _each(body, "RequestPrincipal"):
        embed_versioned(n, "DefaultPrincipalData", buf, ctx, require_clean=False)
    for n in _each(body, "RequestData"):
        if isinstance(n.value, bytes) and len(n.value) >= 8:
            start, end = _data_span(n)
            inner = decode_request(buf, start, end, ctx)
            if inner is not None:
                n.kind, n.value, n.children = STRUCT, None, inner


def decode_request(
    buf: bytes | memoryview, start: int, end: int, ctx: DecodeContext
) -> list[Node] | None:
    """A full request (header + body) inside `buf[start:end]`: [header, body] nodes."""
    api_key = INT16.unpack_from(buf, start)[0]
    api_version = INT16.unpack_from(buf, start + 2)[0]
    if api_key == quirks.API_ENVELOPE:
        return None
    reader = message_reader("RequestHeader", quirks.request_header_version(api_key, api_version))
    if reader is None:
        return None
    out: list[Node] = []
    try:
        pos = reader(buf, start, end, ctx, out, "header")
    except DecodeError:
        return out
    return [out[0], decode_body(api_key, api_version, True, buf, pos, end, ctx)]


# ------------------------------------------------------------------ topic ids


def _learn_topics(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    for topic in _each(body, "Topics", "*"):
        tid, name = _value(topic, "TopicId"), _value(topic, "Name")
        if isinstance(tid, str) and isinstance(name, str) and tid != NULL_UUID:
            ctx.topic_names[tid] = name


# ------------------------------------------------------------------ SASL

_SCRAM_NAMES = {
    "a": "AuthorizationId",
    "n": "Username",
    "r": "Nonce",
    "c": "ChannelBinding",
    "s": "Salt",
    "i": "Iterations",
    "p": "ClientProof",
    "v": "ServerSignature",
    "e": "Error",
    "m": "Reserved",
}
# SCRAM attributes shown in clear; the proof (p), the server signature (v) and anything else
# (an unknown or damaged key may hold either) are secret
_SCRAM_PUBLIC = frozenset({"a", "n", "r", "c", "s", "i", "e", "m"})
_OAUTH_PUBLIC = frozenset({b"host", b"port"})  # RFC 7628; `auth` and extensions are secret
# a public value holding one of these was merged with a secret attribute by damage (a flipped
# separator: "r=<nonce>-p=<proof>")
_SECRET_MARKERS = re.compile(r"(?:p|v|auth)=")


def _public(text: str) -> str:
    return SecretStr(text) if _SECRET_MARKERS.search(text) else text


# a GS2 header as it should be (RFC 5801: flag, optional authzid, and OAUTHBEARER's closing
# comma); anything else there is a damaged message whose separators no longer split off the
# secret after it (a flipped \x01 left "n,,\x11auth=Bearer <token>" in the header)
_GS2 = re.compile(r"[ny],(?:a=[^,]*)?,?")


def _gs2(text: str) -> str:
    return _public(text) if _GS2.fullmatch(text) else SecretStr(text)
_SCRAM_START = re.compile(rb"^(?:[ny],|p=[^,]*,|c=|r=|v=|e=)")


def _text_parts(raw: bytes, start: int, sep: bytes) -> list[tuple[int, bytes]]:
    parts, pos = [], 0
    for piece in raw.split(sep):
        parts.append((start + pos, piece))
        pos += len(piece) + len(sep)
    return parts


def parse_sasl(raw: bytes, start: int) -> tuple[str, list[Node]] | None:
    """Recognize a SASL token: ("PLAIN" | "SCRAM" | "OAUTHBEARER", field nodes) or None."""
    try:
        raw.decode()
    except UnicodeDecodeError:
        return None
    if raw.count(b"\0") == 2 and not raw.startswith((b"n,", b"y,")):
        (a_off, authz), (u_off, user), (p_off, pw) = _text_parts(raw, start, b"\0")
        return "PLAIN", [
            Node("AuthorizationId", PRIM, a_off, len(authz), authz.decode()),
            Node("Username", PRIM, u_off, len(user), user.decode()),
            Node("Password", PRIM, p_off, len(pw), SecretStr(pw.decode())),
        ]
    if raw.startswith((b"n,", b"y,")) and b"\x01" in raw:
        head, _, rest = raw.partition(b"\x01")
        nodes = [Node("Gs2Header", PRIM, start, len(head), _gs2(head.decode()))]
        for off, kv in _text_parts(rest, start + len(head) + 1, b"\x01"):
            if not kv:
                continue
            key, _, val = kv.partition(b"=")
            text = val.decode()
            nodes.append(
                Node(key.decode(), PRIM, off, len(kv),
                     _public(text) if key in _OAUTH_PUBLIC else SecretStr(text))
            )
        return "OAUTHBEARER", nodes
    if _SCRAM_START.match(raw) and b"\0" not in raw:
        nodes = []
        parts = _text_parts(raw, start, b",")
        if raw.startswith((b"n,", b"y,", b"p=")):  # gs2 header: flag, authzid, then the message
            flag_off, flag = parts[0]
            az_off, az = parts[1] if len(parts) > 1 else (flag_off + len(flag), b"")
            gs2 = (flag + b"," + az).decode()
            nodes.append(
                Node(
                    "Gs2Header",
                    PRIM,
                    flag_off,
                    az_off + len(az) - flag_off,
                    # "p=<cb name>" is rare; a damaged client-final message may start with
                    # p=<proof>: secret, as any header of another form
                    _gs2(gs2),
                )
            )
            parts = parts[2:]
        for off, kv in parts:
            key, eq, val = kv.partition(b"=")
            if not eq:
                nodes.append(Node("_unparsed", PRIM, off, len(kv), SecretStr(kv.decode())))
                continue
            k = key.decode()
            text = val.decode()
            name = _SCRAM_NAMES.get(k, k)
            nodes.append(
                Node(name, PRIM, off, len(kv),
                     _public(text) if k in _SCRAM_PUBLIC else SecretStr(text))
            )
        return "SCRAM", nodes
    return None


def _sasl_node(node: Node) -> None:
    """Turn an auth_bytes PRIM node into a parsed struct, or mark it secret as a whole."""
    value = node.value
    if not isinstance(value, bytes) or not value:
        return
    start, _ = _data_span(node)
    parsed = parse_sasl(bytes(value), start)
    if parsed is None:
        node.value = SecretBytes(value)
        return
    mechanism, children = parsed
    node.kind = STRUCT
    node.value = None
    node.children = [Node("Mechanism", PRIM, start, 0, mechanism), *children]


def _sasl_authenticate(body: Node, version: int, buf, ctx: DecodeContext) -> None:
    for n in _each(body, "AuthBytes"):
        _sasl_node(n)


def decode_raw_sasl(buf: bytes | memoryview, offset: int, end: int, ctx: DecodeContext) -> Node:
    """An un-headered SASL token (what v0 SaslHandshake clients send after the handshake):
    a STRUCT "sasl" with one AuthBytes child, parsed when recognized, secret otherwise."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = min(end, len(mv))
    auth = Node("AuthBytes", PRIM, offset, max(end - offset, 0), bytes(mv[offset:end]))
    _sasl_node(auth)
    return Node("sasl", STRUCT, offset, auth.length, None, [auth])


HOOKS = {
    (ApiKey.METADATA, False): _learn_topics,
    (ApiKey.JOIN_GROUP, True): _join_group_request,
    (ApiKey.JOIN_GROUP, False): _join_group_response,
    (ApiKey.SYNC_GROUP, True): _sync_group_request,
    (ApiKey.SYNC_GROUP, False): _sync_group_response,
    (ApiKey.DESCRIBE_GROUPS, False): _describe_groups_response,
    (ApiKey.CREATE_TOPICS, False): _learn_topics,
    (ApiKey.SASL_AUTHENTICATE, True): _sasl_authenticate,
    (ApiKey.SASL_AUTHENTICATE, False): _sasl_authenticate,
    (ApiKey.ENVELOPE, True): _envelope_request,
    (ApiKey.DESCRIBE_TOPIC_PARTITIONS, False): _learn_topics,
}
for (_api_key, _is_request), _hook in HOOKS.items():
    register_body_hook(_api_key, _is_request, _hook)

__all__ = ["HOOKS", "decode_raw_sasl", "decode_request", "embed_versioned", "parse_sasl"]
