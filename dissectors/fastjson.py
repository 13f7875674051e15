"""Bodies straight to their JSON value: the NDJSON export's fast path.

`decode_body` builds a `Node` tree (offsets for the TUI hex view, diagnostics on
every node) and `jsonify` then walks it into the JSON value. For a well-formed
body the export needs only that value, so each (api, version, direction) plan is
also compiled, once, into Python source -- one function per struct, fixed-size
fields read with one `struct` unpack, the dict built as one literal with its
final keys -- and `exec`uted. `json_source` shows the generated code.

The fast path vouches only for bodies it can decode without a single
diagnostic: a short read, a bad length, a null where none is allowed, invalid
UTF-8, a tagged field, trailing bytes or records with a diagnostic
(`records_json`) make it give up (`FALLBACK`) and the caller takes the
reference path (`decode_body` + `node_to_json_collect`) on a fresh context. Any
other exception is a bug of the fast path: re-raised when `ctx.strict` (tests),
else the reference path serves the body. APIs with embedded-protocol hooks (and
bodies with secrets) always take the reference path. The generated code comes
from the same plan as the Node walker (`dissectors.plan`), so each schema rule
lives in one place; tests compare both paths on every schema and capture.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from functools import cache

from dissectors import quirks
from dissectors.context import NODE_COST, DecodeContext
from dissectors.errors import error_name
from dissectors.jsonify import JsonWalk, json_float, json_key
from dissectors.plan import (
    BYTES,
    FIXED_SIZE,
    RECORDS,
    STRING,
    STRUCT,
    FieldPlan,
    FixedRun,
    StructPlan,
    body_plan,
)
from dissectors.primitives import FIXED, DecodeError, read_uvarint, uuid_str
from dissectors.records_json import NotClean, records_json
from dissectors.registry import BODY_HOOKS

FALLBACK = object()  # "take the reference path"

JsonReader = Callable[..., tuple[object, int]]


class GiveUp(Exception):  # noqa: N818 -- control flow, not an error
    """Raised by generated code on anything the reference path would diagnose."""


class Unsupported(Exception):  # noqa: N818
    """A plan the fast path does not compile (the reference path serves it)."""


# ------------------------------------------------------------------ runtime helpers


def _b64(data) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def _topic_name(out: dict, ctx: DecodeContext) -> None:
    """The "topic_name" sibling of a known topic id (as `jsonify` adds it)."""
    if "topic_name" not in out and not isinstance(out.get("name", out.get("topic")), str):
        name = ctx.topic_names.get(out["topic_id"])
        if name is not None:
            out["topic_name"] = name


_ARRAY_FORMATS: dict[tuple[str, int], struct.Struct] = {}


def _fixed_list(code: str, n: int, buf, pos: int) -> list:
    fmt = _ARRAY_FORMATS.get((code, n))
    if fmt is None:
        if len(_ARRAY_FORMATS) > 256:
            _ARRAY_FORMATS.clear()
        fmt = _ARRAY_FORMATS[code, n] = struct.Struct(f">{n}{code}")
    return list(fmt.unpack_from(buf, pos))


def _records(buf: bytes, pos: int, n: int, ctx: DecodeContext, walk: JsonWalk) -> object:
    """A records field; records with a diagnostic raise `NotClean` (the reference path decides)."""
    return records_json(buf, memoryview(buf), pos, n, ctx)


_RUNTIME = {
    "GiveUp": GiveUp,
    "read_uvarint": read_uvarint,
    "uuid_str": uuid_str,
    "error_name": error_name,
    "b64": _b64,
    "topic_name": _topic_name,
    "fixed_list": _fixed_list,
    "records": _records,
    "as_float": json_float,
    "I16": FIXED["int16"].unpack_from,
    "I32": FIXED["int32"].unpack_from,
}

# what generated code raises on bytes the reference path would diagnose: short or bad
# lengths and varints, tags present, invalid UTF-8, records with a diagnostic
_EXPECTED = (GiveUp, NotClean, DecodeError, UnicodeDecodeError)

_INT_TYPES = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})


# ------------------------------------------------------------------ code generation


class _Gen:
    """Generates the source of one plan: `_s0` is the body struct."""

    def __init__(self) -> None:
        self.funcs: list[list[str]] = []
        self.consts: dict[str, object] = {}
        self.tmp = 0

    # -- helpers
    def _const(self, prefix: str, value: object) -> str:
        name = f"{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name

    def _var(self) -> str:
        self.tmp += 1
        return f"v{self.tmp}"

    # -- lengths
    @staticmethod
    def _length(out: list[str], ind: str, var: str, compact: bool, wide: bool) -> None:
        """var = a length/count prefix at pos (-1 = null), as `read_length`."""
        if compact:
            out += [
                f"{ind}if pos >= end: raise GiveUp",
                f"{ind}{var} = buf[pos]",
                f"{ind}if {var} < 0x80:",
                f"{ind}    {var} -= 1",
                f"{ind}    pos += 1",
                f"{ind}else:",
                f"{ind}    {var}, pos = read_uvarint(buf, pos, end)",
                f"{ind}    {var} -= 1",
            ]
        else:
            size, unpack = (4, "I32") if wide else (2, "I16")
            out += [
                f"{ind}if pos + {size} > end: raise GiveUp",
                f"{ind}{var} = {unpack}(buf, pos)[0]",
                f"{ind}pos += {size}",
            ]

    @staticmethod
    def _null(out: list[str], ind: str, var: str, n: str, nullable: bool) -> None:
        """The null branch of a length-prefixed value; the `else:` block reads the value."""
        if nullable:
            out += [
                f"{ind}if {n} == -1:",
                f"{ind}    {var} = None",
                f"{ind}elif {n} < 0:",
                f"{ind}    raise GiveUp",
            ]
        else:
            out += [f"{ind}if {n} < 0:", f"{ind}    raise GiveUp"]
        out.append(f"{ind}else:")

    # -- one value: appends statements that set `var` and advance pos
    def field(self, out: list[str], ind: str, var: str, f: FieldPlan) -> None:
        if f.array:
            self._array(out, ind, var, f)
        else:
            self._value(out, ind, var, f, f.nullable)

    def _value(self, out: list[str], ind: str, var: str, f: FieldPlan, nullable: bool) -> None:
        """One value of `f` (one element, for an array)."""
        if f.kind == FIXED_SIZE:
            self._fixed_run(out, ind, [(var, f.type)])
        elif f.kind != STRUCT:
            self._prim(out, ind, var, f, nullable)
        else:
            assert f.struct is not None
            fn = self.struct(f.struct)
            if nullable:
                out += [
                    f"{ind}if pos >= end: raise GiveUp",
                    f"{ind}if buf[pos] >= 0x80:",
                    f"{ind}    {var} = None",
                    f"{ind}    pos += 1",
                    f"{ind}else:",
                    f"{ind}    {var}, pos = {fn}(buf, pos + 1, end, ctx, walk)",
                ]
            else:
                out.append(f"{ind}{var}, pos = {fn}(buf, pos, end, ctx, walk)")

    def _prim(self, out: list[str], ind: str, var: str, f: FieldPlan, nullable: bool) -> None:
        """A string, bytes or records value."""
        if f.kind == BYTES and f.secret:
            raise Unsupported(f.name)
        n = self._var()
        self._length(out, ind, n, f.compact, f.kind != STRING)
        self._null(out, ind, var, n, nullable or f.kind == RECORDS)
        if f.kind == RECORDS:
            read = f"records(buf, pos, {n}, ctx, walk)"
        elif f.kind == STRING:
            read = (
                f"buf[pos:pos + {n}].decode()"  # invalid UTF-8 raises: the reference path decides
            )
        else:
            read = f"b64(buf[pos:pos + {n}])"
        out += [
            f"{ind}    if pos + {n} > end: raise GiveUp",
            f"{ind}    {var} = {read}",
            f"{ind}    pos += {n}",
        ]

    def _fixed_run(self, out: list[str], ind: str, run: list[tuple[str, str]]) -> None:
        """Consecutive fixed-size fields: one bounds check, one unpack."""
        st = struct.Struct(">" + "".join(FIXED[t].format[1:] for _, t in run))
        unpack = self._const("U", st.unpack_from)
        targets = ", ".join(v for v, _ in run) + ("," if len(run) == 1 else "")
        out += [
            f"{ind}if pos + {st.size} > end: raise GiveUp",
            f"{ind}{targets} = {unpack}(buf, pos)",
            f"{ind}pos += {st.size}",
        ]
        for v, t in run:
            if t == "uuid":
                out.append(f"{ind}{v} = uuid_str({v})")
            elif t == "float64":
                out.append(f"{ind}{v} = as_float({v}, walk)")

    def _array(self, out: list[str], ind: str, var: str, f: FieldPlan) -> None:
        n = self._var()
        self._length(out, ind, n, f.compact, True)
        self._null(out, ind, var, n, f.nullable)
        out.append(f"{ind}    if {n} > end - pos or {n} > ctx.limits.max_array_count: raise GiveUp")
        body = ind + "    "
        # the decode budget (dissectors.context.NODE_COST): spent, the Node walker decides
        out += [
            f"{body}if ctx.budget is not None:",
            f"{body}    ctx.budget -= {n} * {NODE_COST}",
            f"{body}    if ctx.budget < 0: raise GiveUp",
        ]
        if f.kind == FIXED_SIZE and f.type != "uuid":
            if f.type == "float64":
                raise Unsupported("float64 array")
            size = FIXED[f.type].size
            code = FIXED[f.type].format[1:]
            out += [
                f"{body}if pos + {n} * {size} > end: raise GiveUp",
                f"{body}{var} = fixed_list({code!r}, {n}, buf, pos)",
                f"{body}pos += {n} * {size}",
            ]
            return
        elem = self._var()
        out += [f"{body}{var} = []", f"{body}for _ in range({n}):"]
        self._value(out, body + "    ", elem, f, False)
        out.append(f"{body}    {var}.append({elem})")

    # -- a struct: one function, returns (dict, pos)
    def struct(self, plan: StructPlan) -> str:
        name = f"_s{len(self.funcs)}"
        lines: list[str] = []
        self.funcs.append(lines)  # reserve the index (nested structs come after)
        body: list[str] = []
        items: list[str] = []  # the dict literal's entries
        has_topic_id = False
        for step in plan.steps:
            fields = step.fields if isinstance(step, FixedRun) else (step,)
            names = [self._var() for _ in fields]
            if isinstance(step, FixedRun):
                self._fixed_run(
                    body, "    ", [(v, f.type) for v, f in zip(names, fields, strict=True)]
                )
            else:
                self.field(body, "    ", names[0], step)
            for var, f in zip(names, fields, strict=True):
                key, is_error = json_key(f.name)
                items.append(f"{key!r}: {var}")
                if is_error:
                    if not (f.fixed and f.type in _INT_TYPES):
                        raise Unsupported(f"error key {f.name} of type {f.type}")
                    items.append(f"{key + '_name'!r}: error_name({var})")
                has_topic_id |= key == "topic_id"
        if plan.flexible:  # tagged fields: present only when the tag count is not 0 (give up)
            body += [
                "    if pos >= end or buf[pos]: raise GiveUp  # tagged fields present",
                "    pos += 1",
            ]
        lines.append(f"def {name}(buf, pos, end, ctx, walk):  # {plan.label}")
        if plan.fields:  # charged as the Node walker does (dissectors.readers)
            lines += [
                "    if ctx.budget is not None:",
                f"        ctx.budget -= {NODE_COST * len(plan.fields)}",
                "        if ctx.budget < 0: raise GiveUp",
            ]
        lines += body
        lines.append(f"    out = {{{', '.join(items)}}}")
        if has_topic_id:
            lines.append("    topic_name(out, ctx)")
        lines.append("    return out, pos")
        return name

    def source(self) -> str:
        return "\n\n".join("\n".join(f) for f in self.funcs) + "\n"


def _generate(api_key: int, version: int, is_request: bool) -> tuple[str, dict] | None:
    if (api_key, is_request) in BODY_HOOKS:
        return None
    plan = body_plan(api_key, version, is_request)
    if plan is None:
        return None
    gen = _Gen()
    try:
        gen.struct(plan)
    except Unsupported:
        return None
    return gen.source(), gen.consts


def json_source(api_key: int, version: int, is_request: bool) -> str | None:
    """The generated source of one plan (None: the reference path serves it)."""
    got = _generate(api_key, version, is_request)
    return None if got is None else got[0]


@cache
def json_reader(api_key: int, version: int, is_request: bool) -> JsonReader | None:
    """The compiled fast path of one (api, version, direction), or None."""
    got = _generate(api_key, version, is_request)
    if got is None:
        return None
    source, consts = got
    namespace = dict(_RUNTIME, **consts)
    exec(
        compile(
            source, f"<fastjson {api_key}/{version}/{'req' if is_request else 'resp'}>", "exec"
        ),
        namespace,
    )
    return namespace["_s0"]


# ------------------------------------------------------------------ entry point


def decode_body_json(
    api_key: int,
    api_version: int,
    is_request: bool,
    buf: bytes | memoryview,
    offset: int,
    end: int,
    ctx: DecodeContext,
    walk: JsonWalk,
) -> object:
    """`node_to_json_collect(decode_body(...), ctx, walk)` for a body that decodes cleanly;
    FALLBACK (walk and ctx.buffers as they were) when the reference path must decide."""
    mark = len(walk.diagnostics)
    odd = walk.odd_float
    nbuf = len(ctx.buffers)
    own_budget = ctx.start_budget(end - offset)
    try:
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        end = min(end, len(mv))
        if not is_request:
            api_version = quirks.response_body_version(api_key, api_version, mv, offset, end)
        reader = json_reader(api_key, api_version, is_request)
        if reader is not None:
            obj = mv.obj
            data = (
                obj
                if type(obj) is bytes and mv.nbytes == len(obj) and mv.format == "B"
                else bytes(mv)
            )
            value, pos = reader(data, offset, end, ctx, walk)
            if pos == end:
                return value
    except _EXPECTED:  # what the reference path would diagnose: it decides
        pass
    except Exception:  # a bug here: it must not hide as a slowdown when testing
        if ctx.strict:
            raise
    finally:
        if own_budget:
            ctx.end_budget()
    del walk.diagnostics[mark:]
    walk.odd_float = odd
    del ctx.buffers[nbuf:]
    return FALLBACK
