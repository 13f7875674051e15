"""A test-only Kafka encoder and random-instance generator, written from the specs.

Deliberately separate from `dissectors.decoder`: it shares only the schema
data (which the drift test proves equal to the upstream JSON definitions) and
interprets versions, nullability, compactness and tagged fields on its own.

Values: ints/floats/bools as Python values, strings as str, bytes/records as
bytes, uuid as the canonical string, arrays as lists, structs as dicts keyed
by spec field name; None for null; a tagged field absent from a dict is not
written.
"""

from __future__ import annotations

import importlib
import random
import struct
from dataclasses import dataclass

from dissectors import schemas

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
    "bool": struct.Struct(">?"),
}
_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_SCALARS = set(_FIXED) | {"uuid", "string", "bytes", "records"}


@dataclass(frozen=True)
class Spec:
    name: str
    type: str  # scalar type, "struct"
    array: bool
    nullable: bool
    tag: int | None  # tag number when tagged in this version
    compact: bool
    fields: tuple[Spec, ...] = ()


@dataclass(frozen=True)
class Layout:
    flexible: bool
    fields: tuple[Spec, ...]


def _covers(r, v: int) -> bool:
    if r is None:
        return False
    lo, hi = r
    return lo <= v and (hi is None or v <= hi)


def _pick(defs, v: int) -> dict | None:
    return next((d for d in defs if _covers(d["valid"], v)), None)


def api_defs(api_key: int, is_request: bool):
    mod = importlib.import_module(f"dissectors.schemas.{schemas.API_MODULES[api_key]}")
    return mod.REQUEST if is_request else mod.RESPONSE


def message_defs(name: str):
    return importlib.import_module(f"dissectors.schemas.{schemas.MESSAGE_MODULES[name]}").MESSAGE


def layout_of(defs, v: int) -> Layout | None:
    d = _pick(defs, v)
    if d is None:
        return None
    flexible = _covers(d["flexible"], v)
    structs = d.get("structs", {})

    def build(fields) -> tuple[Spec, ...]:
        out = []
        for f in fields:
            if not _covers(f["versions"], v):
                continue
            t = f["type"]
            array = t.startswith("[]")
            base = t[2:] if array else t
            sub: tuple[Spec, ...] = ()
            if base not in _SCALARS:
                sub = build(f.get("fields") or structs[base])
                base = "struct"
            compact = _covers(f["flexible"], v) if "flexible" in f else flexible
            tag = f["tag"] if flexible and _covers(f.get("tagged"), v) else None
            out.append(
                Spec(f["name"], base, array, _covers(f.get("nullable"), v), tag, compact, sub)
            )
        return tuple(out)

    return Layout(flexible, build(d["fields"]))


# ------------------------------------------------------------------ random values


def random_value(
    layout: Layout, rng: random.Random, with_tags: bool = True, tame: bool = False
) -> dict:
    """A random instance. `tame` keeps integers small and non-negative (semantic
    encoders such as kio reject out-of-enum error codes or negative timestamps)."""
    global _TAME
    _TAME = tame
    try:
        return _random_struct(layout.fields, rng, 0, with_tags)
    finally:
        _TAME = False


_TAME = False


def _random_struct(fields, rng, depth, with_tags) -> dict:
    out = {}
    for s in fields:
        if s.tag is not None and (not with_tags or rng.random() < 0.4):
            continue
        out[s.name] = _random_field(s, rng, depth, with_tags)
    return out


def _random_field(s: Spec, rng, depth, with_tags):
    if s.array:
        if s.nullable and rng.random() < 0.2:
            return None
        n = rng.randint(0, 3 if depth < 2 else 1)
        return [_random_scalar(s, rng, depth, with_tags, element=True) for _ in range(n)]
    return _random_scalar(s, rng, depth, with_tags, element=False)


def _random_scalar(s: Spec, rng, depth, with_tags, element: bool):
    nullable = s.nullable and not element
    if nullable and rng.random() < 0.2:
        return None
    t = s.type
    if t in _RANGES:
        lo, hi = _RANGES[t]
        if _TAME:
            return rng.randint(0, 10 if t == "int8" else 30)
        return rng.choice((0, -1 if lo < 0 else 1, lo, hi, rng.randint(lo, hi)))
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.choice((0.0, -1.5, rng.uniform(-1e9, 1e9)))
    if t == "uuid":
        h = f"{rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if t == "string":
        return "".join(rng.choice("abcxyz-_.é€0") for _ in range(rng.randint(0, 6)))
    if t == "bytes":
        return rng.randbytes(rng.randint(0, 8))
    if t == "records":
        return b""
    return _random_struct(s.fields, rng, depth + 1, with_tags)


# ------------------------------------------------------------------ encoding


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_FRAMING = [0]


def encode(layout: Layout, value: dict) -> bytes:
    out = bytearray()
    _encode_struct(out, layout.fields, value, layout.flexible)
    return bytes(out)


def framing_bytes(layout: Layout, value: dict) -> int:
    """How many bytes of `encode(layout, value)` are framing rather than field data:
    array counts, tag sections (count, tag numbers, sizes), nullable-struct markers
    and the length prefix of non-null records. Strings/bytes own their prefixes."""
    _FRAMING[0] = 0
    encode(layout, value)
    return _FRAMING[0]


def _encode_struct(out: bytearray, fields, value: dict, flexible: bool) -> None:
    tagged = []
    for s in fields:
        if s.tag is not None:
            if s.name in value:
                buf = bytearray()
                _encode_field(buf, s, value[s.name], flexible)
                tagged.append((s.tag, bytes(buf)))
            continue
        _encode_field(out, s, value[s.name], flexible)
    if flexible:
        head = uvarint(len(tagged))
        out += head
        _FRAMING[0] += len(head)
        for tag, data in sorted(tagged):
            head = uvarint(tag) + uvarint(len(data))
            _FRAMING[0] += len(head)
            out += head + data


def _length(out: bytearray, n: int | None, compact: bool, wide: bool) -> None:
    if compact:
        out += uvarint(0 if n is None else n + 1)
    else:
        out += struct.pack(">i" if wide else ">h", -1 if n is None else n)


def _encode_field(out: bytearray, s: Spec, v, flexible: bool) -> None:
    if s.array:
        before = len(out)
        _length(out, None if v is None else len(v), s.compact, True)
        _FRAMING[0] += len(out) - before
        for item in v or ():
            _encode_scalar(out, s, item, flexible, element=True)
        return
    _encode_scalar(out, s, v, flexible, element=False)


def _encode_scalar(out: bytearray, s: Spec, v, flexible: bool, element: bool) -> None:
    t = s.type
    if t in _FIXED:
        out += _FIXED[t].pack(v)
    elif t == "uuid":
        out += bytes.fromhex(v.replace("-", ""))
    elif t == "string":
        data = None if v is None else v.encode()
        _length(out, None if data is None else len(data), s.compact, False)
        out += data or b""
    elif t in ("bytes", "records"):
        before = len(out)
        _length(out, None if v is None else len(v), s.compact, True)
        if t == "records" and v is not None:
            _FRAMING[0] += len(out) - before
        out += v or b""
    else:  # struct
        if s.nullable and not element:
            out += struct.pack(">b", -1 if v is None else 1)
            _FRAMING[0] += 1
            if v is None:
                return
        _encode_struct(out, s.fields, v, flexible)


def random_struct(fields: tuple[Spec, ...], seed: int = 0, **overrides) -> dict:
    """A tame random struct for `fields` (no tagged fields) with some fields set explicitly."""
    global _TAME
    _TAME = True
    try:
        out = _random_struct(fields, random.Random(seed), 0, False)
    finally:
        _TAME = False
    out.update(overrides)
    return out


def field(fields: tuple[Spec, ...], name: str) -> Spec:
    return next(s for s in fields if s.name == name)


def encode_api(api_key: int, version: int, is_request: bool, value: dict) -> bytes:
    layout = layout_of(api_defs(api_key, is_request), version)
    assert layout is not None
    return encode(layout, value)


def api_layout(api_key: int, version: int, is_request: bool) -> Layout:
    layout = layout_of(api_defs(api_key, is_request), version)
    assert layout is not None
    return layout


def encode_message(name: str, version: int, value: dict) -> bytes:
    """int16 version + the structure, as embedded in group protocol bytes."""
    layout = layout_of(message_defs(name), version)
    assert layout is not None
    return struct.pack(">h", version) + encode(layout, value)
