"""The Node walker: a plan (`dissectors.plan`) turned into reader closures.

A reader is `reader(buf, pos, end, ctx, out, name) -> new_pos`: it appends the
node(s) it decoded to `out`. Every version question was answered by the plan,
so decoding a body is a walk over closures with no version checks. Bad bytes
raise the internal `DecodeError`, which the innermost struct/array records as a
diagnostic before the walk unwinds, so partially decoded siblings stay in the
tree; `decoder` is the boundary that nothing escapes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from dissectors.context import NODE_COST, TAG_COST
from dissectors.diagnostics import Code, Diagnostic
from dissectors.node import ARRAY, PRIM, RAW, STRUCT, Node
from dissectors.plan import BYTES, FIXED_SIZE, RECORDS, STRING, FieldPlan, FixedRun, StructPlan
from dissectors.primitives import (
    FIXED,
    INT8,
    DecodeError,
    read_length,
    read_uvarint,
    short,
    uuid_str,
)
from dissectors.registry import decode_records_field
from dissectors.secrets import SecretBytes

Reader = Callable[..., int]


# ------------------------------------------------------------------ failure helper


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


# ------------------------------------------------------------------ reader factories


def _fixed_reader(ftype: str) -> Reader:
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

        return read_uuid

    def read_fixed(buf, pos, end, ctx, out, name):
        nxt = pos + size
        if nxt > end:
            raise short(pos, size, end, name)
        out.append(Node(name, PRIM, pos, size, unpack(buf, pos)[0]))
        return nxt

    return read_fixed


def _null(name: str, kind: str, start: int, end: int, nullable: bool, what: str) -> Node:
    """The node of a null value (length or count -1); a diagnostic if it may not be null."""
    node = Node(name, kind, start, end - start, None, None)
    if not nullable:
        node.diagnostics.append(Diagnostic(Code.BAD_LENGTH, start, f"{name}: null in {what}"))
    return node


def _string_reader(compact: bool, nullable: bool) -> Reader:
    def read_string(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, False)
        if n < 0:
            out.append(_null(name, PRIM, pos, p, nullable, "a non-nullable string"))
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

    return read_string


def _bytes_reader(compact: bool, nullable: bool, secret: bool) -> Reader:
    wrap = SecretBytes if secret else bytes

    def read_bytes(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, True)
        if n < 0:
            out.append(_null(name, PRIM, pos, p, nullable, "non-nullable bytes"))
            return p
        nxt = p + n
        if nxt > end:
            raise short(p, n, end, name)
        out.append(Node(name, PRIM, pos, nxt - pos, wrap(buf[p:nxt])))
        return nxt

    return read_bytes


def _records_reader(compact: bool) -> Reader:
    def read_records(buf, pos, end, ctx, out, name):
        n, p = read_length(buf, pos, end, compact, True)
        if n < 0:
            out.append(Node(name, PRIM, pos, p - pos, None))  # null records
            return p
        nxt = p + n
        if nxt > end:
            raise short(p, n, end, name)
        node = decode_records_field(buf, p, n, ctx)
        node.name = name
        out.append(node)
        return nxt

    return read_records


def _struct_reader(ops: tuple, tagged: dict | None, cost: int) -> Reader:
    """`cost`: what the struct's field nodes are charged to the frame's decode budget."""

    def read_struct(buf, pos, end, ctx, out, name):
        if ctx.budget is not None:
            ctx.budget -= cost
            if ctx.budget < 0:
                raise _spent(pos)
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
            out.append(_null(name, ARRAY, start, pos, nullable, "a non-nullable array"))
            return pos
        if n > end - pos or n > ctx.limits.max_array_count:  # a count bomb: not even 1 byte each
            raise DecodeError(
                Code.ARRAY_TOO_LARGE, start, f"{name}: {n} elements cannot fit in {end - pos} bytes"
            )
        if n * elem_min > end - pos:
            raise short(pos, n * elem_min, end, f"{name}: {n} elements")
        if ctx.budget is not None:  # the element nodes (a struct element charges its fields)
            ctx.budget -= NODE_COST * n
            if ctx.budget < 0:
                raise _spent(start)
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
            out.append(_null(name, ARRAY, start, pos, nullable, "a non-nullable array"))
            return pos
        if n > end - pos or n > ctx.limits.max_array_count:
            raise DecodeError(
                Code.ARRAY_TOO_LARGE, start, f"{name}: {n} elements cannot fit in {end - pos} bytes"
            )
        nxt = pos + n * size
        if nxt > end:
            children: list[Node] = []
            node = Node(name, ARRAY, start, 0, n, children)
            out.append(node)
            err = short(pos, n * size, end, f"{name}: {n} elements")
            _fail(node, err)
            raise err
        if ctx.budget is not None:
            ctx.budget -= NODE_COST * n
            if ctx.budget < 0:
                raise _spent(start)
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


def _spent(pos: int) -> DecodeError:
    return DecodeError(
        Code.DECODE_BUDGET, pos, "decode budget of this frame spent: the rest is kept raw"
    )


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
            if ctx.judging:  # a trial decode fails at its first diagnostic: stop here
                raise DecodeError(Code.UNKNOWN_TAG, tag_at, f"unknown tag {tag}")
            if ctx.budget is not None:  # an unknown tag costs ~1 KB from 2 wire bytes
                if ctx.budget < TAG_COST:
                    raise DecodeError(Code.DECODE_BUDGET, tag_at, "decode budget of this frame "
                                      "spent (unknown tagged fields): the rest is kept raw")
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


# ------------------------------------------------------------------ from the plan


def _fixed_run_reader(run: FixedRun) -> Reader:
    """Consecutive fixed-size fields read with one unpack (the same nodes as reading them one
    by one; when they do not all fit, they are read one by one for the same error)."""
    size = run.codec.size
    unpack = run.codec.unpack_from
    fields = tuple(
        (f.name, off, FIXED[f.type].size) for f, off in zip(run.fields, run.offsets, strict=True)
    )
    singles = tuple((f.name, _fixed_reader(f.type)) for f in run.fields)
    uuids = tuple(i for i, f in enumerate(run.fields) if f.type == "uuid")

    def read_fixed_run(buf, pos, end, ctx, out, name):
        if pos + size > end:
            for fname, op in singles:
                pos = op(buf, pos, end, ctx, out, fname)
            return pos
        append = out.append
        for (fname, off, n), value in zip(fields, unpack(buf, pos), strict=True):
            append(Node(fname, PRIM, pos + off, n, value))
        return pos + size

    if not uuids:
        return read_fixed_run

    def read_fixed_run_uuids(buf, pos, end, ctx, out, name):
        first = len(out)
        nxt = read_fixed_run(buf, pos, end, ctx, out, name)
        if nxt == pos + size:  # read as one run: the uuids are still raw bytes
            for i in uuids:
                out[first + i].value = uuid_str(out[first + i].value)
        return nxt

    return read_fixed_run_uuids


def _value_reader(f: FieldPlan, nullable: bool) -> Reader:
    """Reads one value of `f` (one element, for an array)."""
    kind = f.kind
    if kind == FIXED_SIZE:
        return _fixed_reader(f.type)
    if kind == STRING:
        return _string_reader(f.compact, nullable)
    if kind == BYTES:
        return _bytes_reader(f.compact, nullable, f.secret)
    if kind == RECORDS:
        return _records_reader(f.compact)
    assert f.struct is not None
    reader = struct_reader(f.struct)
    return _nullable_struct_reader(reader) if nullable else reader


def field_reader(f: FieldPlan) -> Reader:
    """Reads field `f` (see the module docstring for the reader protocol)."""
    if not f.array:
        return _value_reader(f, f.nullable)
    if f.kind == FIXED_SIZE and f.type != "uuid":
        return _fixed_array_reader(f.type, f.compact, f.nullable)
    return _array_reader(_value_reader(f, False), f.elem_min_size, f.compact, f.nullable)


def struct_reader(plan: StructPlan) -> Reader:
    """Reads one struct of this plan into a STRUCT node."""
    ops = tuple(
        (step.fields[0].name, _fixed_run_reader(step))
        if isinstance(step, FixedRun)
        else (step.name, field_reader(step))
        for step in plan.steps
    )
    tagged = {f.tag: (f.name, field_reader(f)) for f in plan.tagged} if plan.flexible else None
    return _struct_reader(ops, tagged, NODE_COST * len(plan.fields))
