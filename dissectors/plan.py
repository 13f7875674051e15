"""The compiled plan of a schema: every version question answered once.

A generated schema module describes all versions of a message at once: a field
has a version range, a nullable range, a flexible range, maybe a tag. A plan is
that description resolved for one (api, version, direction) -- or one
(structure name, version) -- into frozen, inspectable values: the fields that
are present, in wire order, each with its kind, whether its length prefixes are
compact, whether it is nullable, secret or tagged, the plan of its struct, the
fewest bytes it can take, and runs of consecutive fixed-size fields fused into
one unpack. Plans are built once and memoized.

Both back ends are built from a plan, so each schema rule lives here once: the
Node walker (`decoder`) turns it into reader closures, the export's fast path
(`fastjson`) into generated Python source.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from dissectors import schemas
from dissectors.primitives import FIXED
from dissectors.secrets import SECRET_FIELDS

Range = tuple[int, int | None] | None
Definition = dict  # one entry of a generated module's REQUEST / RESPONSE / MESSAGE

# the kinds of a field's value (of each element, for an array)
FIXED_SIZE = "fixed"
STRING = "string"
BYTES = "bytes"
RECORDS = "records"
STRUCT = "struct"
_KINDS = {"string": STRING, "bytes": BYTES, "records": RECORDS}


def in_range(r: Range, v: int) -> bool:
    """Whether version `v` is inside a schema version range (None: no version)."""
    return r is not None and r[0] <= v and (r[1] is None or v <= r[1])


# ------------------------------------------------------------------ schema lookup


@cache
def schema_module(modname: str) -> ModuleType:
    """A generated schema module by its name in `schemas.API_MODULES` / `MESSAGE_MODULES`."""
    return importlib.import_module(f"dissectors.schemas.{modname}")


def _definition(defs: tuple[Definition, ...], version: int) -> Definition | None:
    for d in defs:
        if in_range(d["valid"], version):
            return d
    return None


def api_definition(api_key: int, version: int, is_request: bool) -> Definition | None:
    """The schema definition serving this (api, version, direction), or None."""
    modname = schemas.API_MODULES.get(api_key)
    if modname is None:
        return None
    mod = schema_module(modname)
    return _definition(mod.REQUEST if is_request else mod.RESPONSE, version)


def message_definition(name: str, version: int) -> Definition | None:
    """The definition of a non-API structure (e.g. "LeaderChangeMessage"), or None."""
    modname = schemas.MESSAGE_MODULES.get(name)
    if modname is None:
        return None
    return _definition(schema_module(modname).MESSAGE, version)


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One field present in this version."""

    name: str  # the spec name ("HighWatermark")
    type: str  # the spec type of the value, of each element for an array ("int32", "Topic")
    kind: str  # FIXED_SIZE | STRING | BYTES | RECORDS | STRUCT (of each element for an array)
    array: bool
    compact: bool  # length and count prefixes are unsigned varints (the field is flexible)
    nullable: bool
    secret: bool  # a credential: bytes kept as SecretBytes, redacted in every output
    tag: int | None  # set for a tagged field (read from the tagged-field section)
    struct: StructPlan | None  # the struct of a STRUCT field (of each element for an array)
    min_size: int  # the fewest bytes the field takes on the wire
    elem_min_size: int  # the fewest bytes of one element (arrays; 0 otherwise)

    @property
    def fixed(self) -> bool:
        """A single fixed-size number / uuid / bool (not an array of them)."""
        return self.kind == FIXED_SIZE and not self.array


@dataclass(frozen=True, slots=True)
class FixedRun:
    """Two or more consecutive fixed-size fields, read with one unpack of `codec`."""

    fields: tuple[FieldPlan, ...]
    codec: struct.Struct
    offsets: tuple[int, ...]  # of each field from the start of the run


Step = FieldPlan | FixedRun


@dataclass(frozen=True, slots=True)
class StructPlan:
    """A struct (the body itself, or a nested one) in one version."""

    label: str  # "api 0 v8 request", or the struct's type name
    flexible: bool  # the message is flexible: tagged-field sections follow every struct
    fields: tuple[FieldPlan, ...]  # the in-line fields, in wire order
    steps: tuple[Step, ...]  # the same fields with fixed-size runs fused
    tagged: tuple[FieldPlan, ...]  # the tagged fields (flexible versions only)
    min_size: int  # the fewest bytes the struct takes on the wire


def _field(f: dict, structs: dict, v: int, flex: bool) -> FieldPlan:
    ftype: str = f["type"]
    array = ftype.startswith("[]")
    base = ftype[2:] if array else ftype
    compact = in_range(f["flexible"], v) if "flexible" in f else flex
    nullable = in_range(f.get("nullable"), v)
    prefix = 1 if compact else 4  # arrays, bytes and records: int32 classic prefix
    sub = None
    if base in FIXED:
        kind, elem_min = FIXED_SIZE, FIXED[base].size
    elif base in _KINDS:
        kind = _KINDS[base]
        elem_min = 1 if compact else (2 if kind == STRING else 4)
    else:
        kind = STRUCT
        sub = _struct(f.get("fields") or structs[base], base, structs, v, flex)
        elem_min = sub.min_size
    if array:
        min_size = prefix
    elif kind == STRUCT and nullable:
        min_size = 1  # the presence byte
    else:
        min_size = elem_min
    tag = f["tag"] if flex and in_range(f.get("tagged"), v) else None
    return FieldPlan(
        name=f["name"],
        type=base,
        kind=kind,
        array=array,
        compact=compact,
        nullable=nullable,
        secret=f["name"] in SECRET_FIELDS,
        tag=tag,
        struct=sub,
        min_size=min_size,
        elem_min_size=elem_min if array else 0,
    )


def _fuse(fields: tuple[FieldPlan, ...]) -> tuple[Step, ...]:
    """Consecutive fixed-size fields (two or more) become one FixedRun each."""
    steps: list[Step] = []
    run: list[FieldPlan] = []
    for f in [*fields, None]:
        if f is not None and f.fixed:
            run.append(f)
            continue
        if len(run) > 1:
            offsets, off = [], 0
            for r in run:
                offsets.append(off)
                off += FIXED[r.type].size
            fmt = ">" + "".join(FIXED[r.type].format[1:] for r in run)
            steps.append(FixedRun(tuple(run), struct.Struct(fmt), tuple(offsets)))
        else:
            steps += run
        run = []
        if f is not None:
            steps.append(f)
    return tuple(steps)


def _struct(fields: tuple, label: str, structs: dict, v: int, flex: bool) -> StructPlan:
    present = [_field(f, structs, v, flex) for f in fields if in_range(f["versions"], v)]
    inline = tuple(f for f in present if f.tag is None)
    tagged = tuple(f for f in present if f.tag is not None)
    min_size = (1 if flex else 0) + sum(f.min_size for f in inline)
    return StructPlan(label, flex, inline, _fuse(inline), tagged, min_size)


def compile_plan(defn: Definition, version: int, label: str) -> StructPlan:
    """The plan of one schema definition in one version (see the module docstring)."""
    flex = in_range(defn["flexible"], version)
    return _struct(defn["fields"], label, defn.get("structs", {}), version, flex)


@cache
def body_plan(api_key: int, version: int, is_request: bool) -> StructPlan | None:
    """The plan of one (api, version, direction); None when no schema serves it."""
    defn = api_definition(api_key, version, is_request)
    if defn is None:
        return None
    label = f"api {api_key} v{version} {'request' if is_request else 'response'}"
    return compile_plan(defn, version, label)


@cache
def message_plan(name: str, version: int) -> StructPlan | None:
    """The plan of a non-API structure in one version; None when no schema serves it."""
    defn = message_definition(name, version)
    return None if defn is None else compile_plan(defn, version, f"{name} v{version}")
