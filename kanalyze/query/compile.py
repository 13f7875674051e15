"""Syntax tree → predicate: names resolved, operators and values checked against each field's
type, terms ordered cheapest first so bodies are decoded only when the answer needs them.

Semantics (docs/filters.md): a test on a field that is absent is false; on a field with
several values (`topic`, `error`, `partition`, `frame`, body paths through arrays) it is true
when any value passes, except `!=`, which needs a value and every value different.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kanalyze.query import values as V
from kanalyze.query.fields import (
    ANY,
    BODY,
    BODY_SIDES,
    BOOL,
    DURATION,
    ENUM,
    FIELDS,
    INT,
    SIZE,
    TEXT,
    TIME,
    FieldSpec,
    body_getter,
)
from kanalyze.query.parse import AllOf, AnyOf, Field, FilterError, Not, Test, Value, parse
from kanalyze.query.subject import Env, Subject

Pred = Callable[[Subject], bool]

_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_OPS_BY_KIND = {
    TEXT: ("truthy", "==", "!=", "contains", "matches", "in"),
    ENUM: ("truthy", "==", "!=", "contains", "matches", "in"),
    INT: ("truthy", "==", "!=", "<", "<=", ">", ">=", "in", "range"),
    SIZE: ("truthy", "==", "!=", "<", "<=", ">", ">=", "in", "range"),
    DURATION: ("truthy", "==", "!=", "<", "<=", ">", ">=", "in", "range"),
    TIME: ("truthy", "==", "!=", "<", "<=", ">", ">=", "in", "range"),
    BOOL: ("truthy", "==", "!="),
    ANY: ("truthy", "==", "!=", "<", "<=", ">", ">=", "contains", "matches", "in", "range"),
}


@dataclass(slots=True)
class Filter:
    """A compiled filter: `match(exchange)` with a per-run `Env` (decoder, capture start)."""

    text: str
    pred: Pred
    cost: int  # HEADER: never decodes a body; FACTS/BODY: may
    fields: frozenset[str] = field(default_factory=frozenset)
    env: Env = field(default_factory=Env)

    @property
    def needs_bodies(self) -> bool:
        return self.cost > 0

    def match(self, ex: object) -> bool:
        return self.pred(Subject(ex, self.env))  # type: ignore[arg-type]


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, [*FIELDS, "body.request", "body.response"], 1, 0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


KEYWORDS = frozenset({"and", "or", "not", "in", "contains", "matches", "true", "false"})


def resolve(f: Field) -> FieldSpec:
    """The field named by `f`, or a FilterError at its column."""
    name = f.name
    if name in KEYWORDS:
        raise FilterError(f"unexpected {name!r}: expected a field name", f.column)
    spec = FIELDS.get(name)
    if spec is not None:
        return spec
    if f.path[0] == "body":
        if len(f.path) < 3 or f.path[1] not in BODY_SIDES:
            raise FilterError(
                "a body path starts with body.request. or body.response. (e.g. body.request.acks)",
                f.column,
            )
        return FieldSpec(name, ANY, body_getter(f.path[1], f.path[2:]), BODY, multi=True)
    raise FilterError(f"unknown field {name!r}{_suggest(name)}", f.column)


def _convert(spec: FieldSpec, v: Value) -> Any:
    k = spec.kind
    if k in (TEXT, ENUM):
        return V.text(v, spec.name)
    if k == INT:
        return V.integer(v, spec.name)
    if k == SIZE:
        return V.size(v, spec.name)
    if k == DURATION:
        return V.duration_ms(v, spec.name)
    if k == TIME:
        return V.time_ns(v, spec.name)
    if k == BOOL:
        return V.boolean(v, spec.name)
    return V.body_literal(v, spec.name)


def _canonical(spec: FieldSpec, v: Value, text: str) -> str:
    """An enum value spelled as the data spells it; unknown values are an error."""
    if not spec.choices:
        return text
    for c in spec.choices:
        if c == text:
            return c
    low = text.lower()
    for c in spec.choices:
        if c.lower() == low:
            return c
    close = difflib.get_close_matches(text, spec.choices, 1, 0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    raise FilterError(f"{spec.name} has no value {text!r}{hint}", v.column)


def _same_type(a: object, b: object) -> bool:
    """Body values compare with literals of their own type (bool is not a number here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, int | float):
        return isinstance(b, int | float)
    return type(a) is type(b)


def _value_test(spec: FieldSpec, t: Test) -> Callable[[Any], bool]:  # noqa: C901
    """A test of one value (not None) against the literal(s)."""
    op = t.op
    any_kind = spec.kind == ANY
    if op == "truthy":
        if spec.kind == BOOL or any_kind:
            return lambda x: x is not None and x is not False
        return lambda x: True
    if op == "matches":
        rx = V.regex(t.values[0], spec.name)
        search = rx.search
        return lambda x: isinstance(x, str) and search(x) is not None
    if op == "contains":
        needle = _convert(spec, t.values[0]) if not any_kind else V.text(t.values[0], spec.name)
        return lambda x: isinstance(x, str) and needle in x
    if op == "range":
        lo, hi = (_convert(spec, v) for v in t.values)
        if any_kind:
            return lambda x: (
                isinstance(x, int | float) and not isinstance(x, bool) and lo <= x <= hi
            )
        return lambda x: lo <= x <= hi
    lits = []
    for v in t.values:
        lit = _convert(spec, v)
        if spec.kind == ENUM:
            lit = _canonical(spec, v, lit)
        lits.append(lit)
    if op == "in":
        if any_kind:
            return lambda x: any(_same_type(x, y) and x == y for y in lits)
        members = frozenset(lits)
        return lambda x: x in members
    lit = lits[0]
    if op in ("==", "!="):  # != is the negation of one value's ==; the caller makes it "all"
        if any_kind:
            return lambda x: _same_type(x, lit) and x == lit
        return lambda x: x == lit
    cmp = _ORDER[op]
    if any_kind:
        return lambda x: _same_type(x, lit) and cmp(x, lit)
    if spec.kind in (TEXT, ENUM, BOOL):  # pragma: no cover - rejected by _OPS_BY_KIND
        raise FilterError(f"{spec.name} cannot be ordered", t.column)
    return lambda x: cmp(x, lit)


def _test(t: Test) -> tuple[Pred, int, str]:
    spec = resolve(t.field)
    if t.op not in _OPS_BY_KIND[spec.kind]:
        allowed = " ".join(o for o in _OPS_BY_KIND[spec.kind] if o not in ("truthy", "range"))
        raise FilterError(
            f"{spec.name} ({spec.kind}) does not take {_op_name(t.op)}; it takes {allowed}",
            t.column,
        )
    get = spec.get
    negate = t.op == "!="
    one = _value_test(spec, t)
    if spec.multi:
        if negate:

            def pred(s: Subject) -> bool:
                vals = get(s)
                return bool(vals) and not any(one(x) for x in vals)
        else:

            def pred(s: Subject) -> bool:
                return any(one(x) for x in get(s))
    elif negate:

        def pred(s: Subject) -> bool:
            x = get(s)
            return x is not None and not one(x)
    else:

        def pred(s: Subject) -> bool:
            x = get(s)
            return x is not None and one(x)

    return pred, spec.cost, spec.name


def _op_name(op: str) -> str:
    return {"range": "ranges (in a..b)", "truthy": "a bare test"}.get(op, repr(op))


def build(node: object, names: set[str]) -> tuple[Pred, int]:
    """(predicate, cost) of a syntax tree; the field names used are added to `names`."""
    if isinstance(node, Test):
        pred, cost, name = _test(node)
        names.add(name)
        return pred, cost
    if isinstance(node, Not):
        inner, cost = build(node.item, names)
        return (lambda s: not inner(s)), cost
    if isinstance(node, AllOf | AnyOf):
        parts = sorted((build(n, names) for n in node.items), key=lambda pc: pc[1])
        preds = tuple(p for p, _c in parts)
        cost = max(c for _p, c in parts)
        if isinstance(node, AllOf):
            if len(preds) == 2:
                a, b = preds
                return (lambda s: a(s) and b(s)), cost
            return (lambda s: all(p(s) for p in preds)), cost
        return (lambda s: any(p(s) for p in preds)), cost
    raise TypeError(f"not a filter node: {node!r}")  # pragma: no cover


def compile_filter(text: str, env: Env | None = None) -> Filter:
    """Parse and check `text`; FilterError(message, column) when it is not a valid filter."""
    names: set[str] = set()
    pred, cost = build(parse(text), names)
    return Filter(text, pred, cost, frozenset(names), env or Env())


def try_compile(text: str, env: Env | None = None) -> Filter | FilterError:
    """`compile_filter` for callers that show the error instead of raising (the TUI's box)."""
    try:
        return compile_filter(text, env)
    except FilterError as e:
        return e
