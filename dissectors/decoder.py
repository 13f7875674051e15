"""The generic schema walker.

Each (api, version, direction) -- or (structure name, version) -- compiles once
into a plan: a tuple of `(field name, reader)` per struct with every version
question already answered (present? nullable? compact? tagged?), plus the
tagged fields of that struct keyed by tag. Decoding a body is then a walk over
closures with no version checks.

A reader is `reader(buf, pos, end, ctx, out, name) -> new_pos`: it appends the
node(s) it decoded to `out`. Bad bytes raise the internal `DecodeError`, which
the innermost struct/array records as a diagnostic before the walk unwinds,
so partially decoded siblings stay in the tree. Nothing escapes `decode_body`
and `decode_message`; an internal bug becomes an `internal_error` diagnostic
and a raw node (re-raised when `ctx.strict`).
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from functools import cache, lru_cache
from types import ModuleType

from dissectors import quirks, schemas
from dissectors.context import TAG_COST, DecodeContext
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import ARRAY, PRIM, RAW, STRUCT, Node
from dissectors.primitives import (
    FIXED,
    INT8,
    DecodeError,
    read_length,
    read_uvarint,
    short,
    uuid_str,
)
from dissectors.secrets import SECRET_BODIES, SECRET_FIELDS, SecretBytes, withhold

Reader = Callable[..., int]
Range = tuple[int, int | None] | None

# ------------------------------------------------------------------ schema lookup


def _in(r: Range, v: int) -> bool:
    return r is not None and r[0] <= v and (r[1] is None or v <= r[1])


@cache
def _module(modname: str) -> ModuleType:
    return importlib.import_module(f"dissectors.schemas.{modname}")


def _definition(defs: tuple[dict, ...], version: int) -> dict | None:
    for d in defs:
        if _in(d["valid"], version):
            return d
    return None


def api_definition(api_key: int, version: int, is_request: bool) -> dict | None:
    """The schema definition serving this (api, version, direction), or None."""
    modname = schemas.API_MODULES.get(api_key)
    if modname is None:
        return None
    mod = _module(modname)
    return _definition(mod.REQUEST if is_request else mod.RESPONSE, version)


def message_definition(name: str, version: int) -> dict | None:
    modname = schemas.MESSAGE_MODULES.get(name)
    if modname is None:
        return None
    return _definition(_module(modname).MESSAGE, version)


# ------------------------------------------------------------------ failure helpers


def _fail(node: Node, err: DecodeError) -> None:
    if not err.recorded:
        node.diagnostics.append(Diagnostic(err.code, err.offset, err.message))
        err.recorded = True
    kids = node.children
    if kids:
        last = kids[-1]
        node.length = max(last.offset + last.length - node.offset, 0)
    else:
        node.length = max(err.offset - node.offset, 0)


_records_fn: Callable | None = None
_records_missing = False


def _decode_records(buf, offset: int, length: int, ctx: DecodeContext) -> Node:
    """Delegate to dissectors.records (written separately); raw bytes if it is absent."""
    global _records_fn, _records_missing
    if _records_fn is None and not _records_missing:
        try:
            from dissectors.records import decode_records
        except ImportError:
            _records_missing = True
        else:
            _records_fn = decode_records
    if _records_fn is None:
        return Node("records", RAW, offset, length, bytes(buf[offset : offset + length]))
    return _records_fn(buf, offset, length, ctx)


# ------------------------------------------------------------------ reader factories


def _fixed_reader(ftype: str, secret: bool) -> tuple[Reader, int]:
    st = FIXED[ftype]
    size = st.size
    unpack = st.unpack_from
    if ftype == "uuid":

        def read_uuid(buf, pos, end, ctx, out, name):
            nxt = pos + 16
            if nxt > end:
                raise short(pos, 16, end, name)
            out.append(Node(name, PRIM, pos, 16, uuid_str(unpack(buf, pos)[0])))
            return nxt

        return read_uuid, 16

    def read_fixed(buf, pos, end, ctx, out, name):
        nxt = pos + size
        if nxt > end:
            raise short(pos, size, end, name)
        out.append(Node(name, PRIM, pos, size, unpack(buf, pos)[0]))
        return nxt

    return read_fixed, size


def _string_reader(compact: bool, nullable: bool, secret: bool) -> tuple[Reader, int]:
    def read_string(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, False)
        if n < 0:
            node = Node(name, PRIM, pos, p - pos, None)
            if not nullable:
                node.diagnostics.append(
                    Diagnostic(Code.BAD_LENGTH, pos, f"{name}: null in a non-nullable string")
                )
            out.append(node)
            return p
        nxt = p + n
        if nxt > end:
            raise short(p, n, end, name)
        raw = bytes(buf[p:nxt])
        try:
            value = raw.decode()
        except UnicodeDecodeError:
            node = Node(name, PRIM, pos, nxt - pos, raw.decode(errors="replace"))
            node.diagnostics.append(Diagnostic(Code.INVALID_UTF8, p, f"{name}: invalid UTF-8"))
            out.append(node)
            return nxt
        out.append(Node(name, PRIM, pos, nxt - pos, value))
        return nxt

    return read_string, 1 if compact else 2


def _bytes_reader(compact: bool, nullable: bool, secret: bool) -> tuple[Reader, int]:
    wrap = SecretBytes if secret else bytes

    def read_bytes(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, True)
        if n < 0:
            node = Node(name, PRIM, pos, p - pos, None)
            if not nullable:
                node.diagnostics.append(
                    Diagnostic(Code.BAD_LENGTH, pos, f"{name}: null in non-nullable bytes")
                )
            out.append(node)
            return p
        nxt = p + n
        if nxt > end:
            raise short(p, n, end, name)
        out.append(Node(name, PRIM, pos, nxt - pos, wrap(buf[p:nxt])))
        return nxt

    return read_bytes, 1 if compact else 4


def _records_reader(compact: bool) -> tuple[Reader, int]:
    def read_records(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, True)
        if n < 0:
            out.append(Node(name, PRIM, pos, p - pos, None))  # null records
            return p
        nxt = p + n
        if nxt > end:
            raise short(p, n, end, name)
        node = _decode_records(buf, p, n, ctx)
        node.name = name
        out.append(node)
        return nxt

    return read_records, 1 if compact else 4


def _struct_reader(ops: tuple, tagged: dict | None) -> Reader:
    def read_struct(buf, pos, end, ctx, out, name):
        children: list[Node] = []
        node = Node(name, STRUCT, pos, 0, None, children)
        out.append(node)
        start = pos
        try:
            for fname, op in ops:
                pos = op(buf, pos, end, ctx, children, fname)
            if tagged is not None:
                pos = _read_tagged(buf, pos, end, ctx, children, tagged, node)
        except DecodeError as err:
            _fail(node, err)
            raise
        node.length = pos - start
        return pos

    return read_struct


def _nullable_struct_reader(inner: Reader) -> Reader:
    def read_nullable_struct(buf, pos, end, ctx, out, name):
        if pos + 1 > end:
            raise short(pos, 1, end, name)
        if INT8.unpack_from(buf, pos)[0] < 0:
            out.append(Node(name, STRUCT, pos, 1, None, None))
            return pos + 1
        try:
            p = inner(buf, pos + 1, end, ctx, out, name)
        except DecodeError:
            node = out[-1]
            node.offset, node.length = pos, node.length + 1  # include the presence byte
            raise
        node = out[-1]
        node.offset = pos
        node.length = p - pos
        return p

    return read_nullable_struct


def _array_reader(elem: Reader, elem_min: int, compact: bool, nullable: bool) -> Reader:
    elem_min = max(elem_min, 1)

    def read_array(buf, pos, end, ctx, out, name):
        start = pos
        n, pos = read_length(buf, pos, end, compact, True)
        if n < 0:
            node = Node(name, ARRAY, start, pos - start, None, None)
            if not nullable:
                node.diagnostics.append(
                    Diagnostic(Code.BAD_LENGTH, start, f"{name}: null in a non-nullable array")
                )
            out.append(node)
            return pos
        if n > end - pos or n > ctx.limits.max_array_count:  # a count bomb: not even 1 byte each
            raise DecodeError(
                Code.ARRAY_TOO_LARGE, start, f"{name}: {n} elements cannot fit in {end - pos} bytes"
            )
        if n * elem_min > end - pos:
            raise short(pos, n * elem_min, end, f"{name}: {n} elements")
        children: list[Node] = []
        node = Node(name, ARRAY, start, 0, n, children)
        out.append(node)
        try:
            for i in range(n):
                pos = elem(buf, pos, end, ctx, children, _index(i))
        except DecodeError as err:
            _fail(node, err)
            raise
        node.length = pos - start
        return pos

    return read_array


_INDEX = tuple(str(i) for i in range(4096))  # element names, shared


def _index(i: int) -> str:
    return _INDEX[i] if i < 4096 else str(i)


def _fixed_array_reader(ftype: str, compact: bool, nullable: bool) -> Reader:
    """Arrays of fixed-size numbers: one unpack for all elements."""
    st = FIXED[ftype]
    size = st.size
    code = st.format[1:]
    formats: dict[int, struct.Struct] = {}

    def read_fixed_array(buf, pos, end, ctx, out, name):
        start = pos
        n, pos = read_length(buf, pos, end, compact, True)
        if n < 0:
            node = Node(name, ARRAY, start, pos - start, None, None)
            if not nullable:
                node.diagnostics.append(Diagnostic(Code.BAD_LENGTH, start, f"{name}: null in a non-nullable array"))
            out.append(node)
            return pos
        if n > end - pos or n > ctx.limits.max_array_count:
            raise DecodeError(Code.ARRAY_TOO_LARGE, start, f"{name}: {n} elements cannot fit in {end - pos} bytes")
        nxt = pos + n * size
        if nxt > end:
            children: list[Node] = []
            node = Node(name, ARRAY, start, 0, n, children)
            out.append(node)
            err = short(pos, n * size, end, f"{name}: {n} elements")
            _fail(node, err)
            raise err
        fmt = formats.get(n)
        if fmt is None:
            fmt = formats[n] = struct.Struct(f">{n}{code}")
            if len(formats) > 256:
                formats.clear()
        vals = fmt.unpack_from(buf, pos)
        children = [Node(_index(i), PRIM, pos + i * size, size, v) for i, v in enumerate(vals)]
        out.append(Node(name, ARRAY, start, nxt - start, n, children))
        return nxt

    return read_fixed_array


def _read_tagged(buf, pos, end, ctx, children, tagged, node):
    count, pos = read_uvarint(buf, pos, end)
    if count * 2 > end - pos:
        raise DecodeError(
            Code.ARRAY_TOO_LARGE, pos, f"{count} tagged fields cannot fit in {end - pos} bytes"
        )
    last = -1
    for _ in range(count):
        tag_at = pos
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        fend = pos + size
        if fend > end:
            raise short(pos, size, end, f"tagged field {tag}")
        if tag <= last:
            node.diagnostics.append(
                Diagnostic(Code.DUPLICATE_TAG, tag_at, f"tag {tag} after tag {last}")
            )
        last = tag
        entry = tagged.get(tag)
        if entry is None:
            if ctx.budget is not None:  # an unknown tag costs ~1 KB from 2 wire bytes
                if ctx.budget < TAG_COST:
                    raise DecodeError(Code.DECODE_BUDGET, tag_at, "decode budget of this frame spent "
                                      "(unknown tagged fields): the rest is kept raw")
                ctx.budget -= TAG_COST
            raw = Node(f"_tag_{tag}", RAW, pos, size, bytes(buf[pos:fend]))
            raw.diagnostics.append(
                Diagnostic(Code.UNKNOWN_TAG, tag_at, f"unknown tag {tag}, {size} bytes kept")
            )
            children.append(raw)
        else:
            fname, op = entry
            try:
                p = op(buf, pos, fend, ctx, children, fname)
            except DecodeError as err:  # resync on the declared size
                if not err.recorded:
                    node.diagnostics.append(Diagnostic(err.code, err.offset, err.message))
            else:
                if p < fend:
                    node.diagnostics.append(
                        Diagnostic(
                            Code.TRAILING_BYTES, p, f"tagged field {fname}: {fend - p} bytes left"
                        )
                    )
                    children.append(
                        Node(f"_tag_{tag}_trailing", RAW, p, fend - p, bytes(buf[p:fend]))
                    )
        pos = fend
    return pos


# ------------------------------------------------------------------ compilation

_PRIMS = frozenset(FIXED) | {"string", "bytes", "records"}


def _field_reader(f: dict, structs: dict, v: int, flex: bool) -> tuple[Reader, int]:
    ftype: str = f["type"]
    fflex = _in(f["flexible"], v) if "flexible" in f else flex
    nullable = _in(f.get("nullable"), v)
    secret = f["name"] in SECRET_FIELDS
    if ftype.startswith("[]"):
        base = ftype[2:]
        if base in FIXED and base != "uuid":
            return _fixed_array_reader(base, fflex, nullable), 1 if fflex else 4
        if base in _PRIMS:
            elem, emin = _prim_reader(base, fflex, False, secret)
        else:
            elem, emin = _compile_struct(f.get("fields") or structs[base], structs, v, flex)
        return _array_reader(elem, emin, fflex, nullable), 1 if fflex else 4
    if ftype in _PRIMS:
        return _prim_reader(ftype, fflex, nullable, secret)
    reader, smin = _compile_struct(f.get("fields") or structs[ftype], structs, v, flex)
    if nullable:
        return _nullable_struct_reader(reader), 1
    return reader, smin


def _prim_reader(ftype: str, compact: bool, nullable: bool, secret: bool) -> tuple[Reader, int]:
    if ftype == "string":
        return _string_reader(compact, nullable, secret)
    if ftype == "bytes":
        return _bytes_reader(compact, nullable, secret)
    if ftype == "records":
        return _records_reader(compact)
    return _fixed_reader(ftype, secret)


def _fixed_run_reader(run: list[tuple[str, Reader, str]]) -> Reader:
    """Consecutive fixed-size number fields read with one unpack (the same nodes as reading
    them one by one; when they do not all fit, they are read one by one for the same error)."""
    st = struct.Struct(">" + "".join(FIXED[ftype].format[1:] for _, _, ftype in run))
    size = st.size
    unpack = st.unpack_from
    layout = []
    off = 0
    for fname, _, ftype in run:
        layout.append((fname, off, FIXED[ftype].size))
        off += FIXED[ftype].size
    fields = tuple(layout)
    singles = tuple((fname, op) for fname, op, _ in run)

    def read_fixed_run(buf, pos, end, ctx, out, name):
        if pos + size > end:
            for fname, op in singles:
                pos = op(buf, pos, end, ctx, out, fname)
            return pos
        append = out.append
        for (fname, off, n), value in zip(fields, unpack(buf, pos), strict=True):
            append(Node(fname, PRIM, pos + off, n, value))
        return pos + size

    return read_fixed_run


def _group_fixed(ops: list[tuple[str, Reader, str | None]]) -> tuple:
    """Merge runs of two or more fixed-size number fields into one reader each."""
    out: list[tuple[str, Reader]] = []
    run: list[tuple[str, Reader, str]] = []
    for fname, op, ftype in [*ops, ("", None, None)]:
        if ftype is not None:
            run.append((fname, op, ftype))
            continue
        if len(run) > 1:
            out.append((run[0][0], _fixed_run_reader(run)))
        elif run:
            out.append((run[0][0], run[0][1]))
        run = []
        if op is not None:
            out.append((fname, op))
    return tuple(out)


def _compile_struct(fields: tuple, structs: dict, v: int, flex: bool) -> tuple[Reader, int]:
    ops: list[tuple[str, Reader, str | None]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    min_size = 1 if flex else 0
    for f in fields:
        if not _in(f["versions"], v):
            continue
        reader, fmin = _field_reader(f, structs, v, flex)
        if flex and _in(f.get("tagged"), v):
            tagged[f["tag"]] = (f["name"], reader)
        else:
            ftype = f["type"]
            fixed = ftype in FIXED and ftype != "uuid" and not _in(f.get("nullable"), v)
            ops.append((f["name"], reader, ftype if fixed else None))
            min_size += fmin
    return _struct_reader(_group_fixed(ops), tagged if flex else None), min_size


def compile_definition(defn: dict, version: int) -> Reader:
    flex = _in(defn["flexible"], version)
    reader, _ = _compile_struct(defn["fields"], defn.get("structs", {}), version, flex)
    return reader


@cache
def body_reader(api_key: int, version: int, is_request: bool) -> Reader | None:
    """The compiled plan for one (api, version, direction); None when unknown."""
    defn = api_definition(api_key, version, is_request)
    return None if defn is None else compile_definition(defn, version)


@cache
def message_reader(name: str, version: int) -> Reader | None:
    defn = message_definition(name, version)
    return None if defn is None else compile_definition(defn, version)


# ------------------------------------------------------------------ entry points


def _raw(name: str, buf, offset: int, end: int, code: Code, message: str) -> Node:
    node = Node(name, RAW, offset, max(end - offset, 0), bytes(buf[offset:end]))
    node.diagnostics.append(Diagnostic(code, offset, message))
    return node


def _walk(reader: Reader, mv: memoryview, offset: int, end: int, ctx: DecodeContext) -> Node:
    out: list[Node] = []
    try:
        pos = reader(mv, offset, end, ctx, out, "body")
    except DecodeError as err:
        node = out[0]
        if err.code is Code.DECODE_BUDGET:  # the rest of the frame stays raw
            node.children.append(Node("_undecoded", RAW, err.offset, end - err.offset,
                                      bytes(mv[err.offset:end])))
            node.length = end - offset
        return node
    node = out[0]
    if pos < end:
        node.diagnostics.append(
            Diagnostic(Code.TRAILING_BYTES, pos, f"{end - pos} bytes after the body")
        )
        node.children.append(Node("_trailing", RAW, pos, end - pos, bytes(mv[pos:end])))
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
            ), api_key, is_request)
        node = _walk(reader, mv, offset, end, ctx)
        hook = _hooks().get((api_key, is_request))
        if hook is not None:
            hook(node, api_version, mv, ctx)
        return _guard(node, api_key, is_request)
    except Exception as exc:  # noqa: BLE001 -- the one exception boundary per body
        if ctx.strict:
            raise
        # the type only: an exception's text may quote the bytes (a credential)
        node = _raw("body", mv, offset, end, Code.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
        return _guard(node, api_key, is_request)
    finally:
        if own_budget:
            ctx.end_budget()


def _guard(node: Node, api_key: int, is_request: bool) -> Node:
    """A damaged body that carries credentials shows none of its bytes (secrets.withhold)."""
    if (api_key, is_request) in SECRET_BODIES:
        withhold(node)
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
        return _raw("body", mv, offset, end, Code.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")


@lru_cache(maxsize=1)
def _hooks() -> dict:
    from dissectors.embedded import HOOKS

    return HOOKS
