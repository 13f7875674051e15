"""Text → syntax tree for the filter language (docs/filters.md), through a lark LALR grammar.

A grammar in a well-kept parsing library instead of a hand-written tokenizer: operator
precedence, keywords that are also prefixes of field names (`in` / `index`), and error
positions come from one declarative table, and every parse error carries its column, so
the CLI can put a caret under the bad token and the TUI can colour it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr (_or and_expr)*          -> any_of
?and_expr: not_expr (_and not_expr)*        -> all_of
?not_expr: _not not_expr                    -> negate
         | atom
_or: _OR_W | _OR_S
_and: _AND_W | _AND_S
_not: _NOT_W | _NOT_S
?atom: "(" or_expr ")"
     | test

test: field                                 -> truthy
    | field CMP value                       -> compare
    | field CONTAINS value                  -> contains
    | field MATCHES value                   -> matches
    | field IN "{" value ("," value)* ","? "}"  -> in_set
    | field IN QUANTITY RANGE QUANTITY      -> in_range

field: NAME ("." NAME)*
value: STRING | QUANTITY | TRUE | FALSE | NAME

_OR_W: "or"
_OR_S: "||"
_AND_W: "and"
_AND_S: "&&"
_NOT_W: "not"
_NOT_S: "!"
IN: "in"
CONTAINS: "contains"
MATCHES: "matches"
TRUE: "true"
FALSE: "false"
CMP: "==" | "!=" | "<=" | ">=" | "<" | ">"
RANGE: ".."
NAME: /[A-Za-z_][A-Za-z0-9_]*/
QUANTITY: /-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?[A-Za-zµ]*/
STRING: /"(?:[^"\\]|\\.)*"/

%ignore /[ \t\r\n]+/
"""


class FilterError(ValueError):
    """A filter that does not parse or does not make sense; `column` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.column = max(1, column)

    def render(self, text: str, indent: str = "  ") -> str:
        """The message, the expression, and a caret under the offending column."""
        return f"{self.message}\n{indent}{text}\n{indent}{' ' * (self.column - 1)}^"


# -- the syntax tree: small frozen records, positions kept for type errors ----------------


@dataclass(frozen=True, slots=True)
class Value:
    kind: str  # "string", "number", "bool", "word"
    raw: str  # the text as written (number with its unit)
    value: object
    column: int


@dataclass(frozen=True, slots=True)
class Field:
    path: tuple[str, ...]
    column: int

    @property
    def name(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True, slots=True)
class Test:
    op: str  # truthy == != < <= > >= contains matches in range
    field: Field
    values: tuple[Value, ...]
    column: int  # of the operator (the field's for truthy)


@dataclass(frozen=True, slots=True)
class Not:
    item: object


@dataclass(frozen=True, slots=True)
class AllOf:
    items: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    items: tuple[object, ...]


Node = Test | Not | AllOf | AnyOf


@functools.cache
def _parser() -> tuple[Any, Any]:
    """The LALR parser and the tree builder, made on first use: commands that get no filter
    do not pay for importing lark and building the tables (about 45 ms: lark compiles its own
    grammar-of-grammars on first use, then ours)."""
    from lark import Lark, Token, Transformer, v_args

    class _Build(Transformer):
        @v_args(inline=True)
        def field(self, *names: Token) -> Field:
            return Field(tuple(str(n) for n in names), _col(names[0]))

        @v_args(inline=True)
        def value(self, tok: Token) -> Value:
            t = tok.type
            if t == "STRING":
                return Value("string", str(tok), _string(tok), _col(tok))
            if t == "QUANTITY":
                return Value("number", str(tok), str(tok), _col(tok))
            if t in ("TRUE", "FALSE"):
                return Value("bool", str(tok), t == "TRUE", _col(tok))
            return Value("word", str(tok), str(tok), _col(tok))

        @v_args(inline=True)
        def truthy(self, f: Field) -> Test:
            return Test("truthy", f, (), f.column)

        @v_args(inline=True)
        def compare(self, f: Field, op: Token, v: Value) -> Test:
            return Test(str(op), f, (v,), _col(op))

        @v_args(inline=True)
        def contains(self, f: Field, op: Token, v: Value) -> Test:
            return Test("contains", f, (v,), _col(op))

        @v_args(inline=True)
        def matches(self, f: Field, op: Token, v: Value) -> Test:
            return Test("matches", f, (v,), _col(op))

        def in_set(self, items: list) -> Test:
            f, op, *values = items
            return Test("in", f, tuple(values), _col(op))

        @v_args(inline=True)
        def in_range(self, f: Field, op: Token, lo: Token, _dots: Token, hi: Token) -> Test:
            vals = tuple(Value("number", str(t), str(t), _col(t)) for t in (lo, hi))
            return Test("range", f, vals, _col(op))

        @v_args(inline=True)
        def negate(self, item: object) -> Not:
            return Not(item)

        def all_of(self, items: list) -> object:
            return items[0] if len(items) == 1 else AllOf(tuple(items))

        def any_of(self, items: list) -> object:
            return items[0] if len(items) == 1 else AnyOf(tuple(items))

    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=False), _Build()


def _col(tok: Any) -> int:
    """A token's 1-based column (lark types it as optional)."""
    return tok.column or 1


def _string(tok: Any) -> str:
    try:
        return json.loads(tok)
    except ValueError:
        raise FilterError(f"bad escape in string {tok}", _col(tok)) from None


_NAMES = {
    "CMP": "a comparison (== != < <= > >=)",
    "NAME": "a field name",
    "STRING": "a quoted string",
    "QUANTITY": "a number",
    "LPAR": "'('",
    "RPAR": "')'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "COMMA": "','",
    "_AND_W": "'and'",
    "_AND_S": "'&&'",
    "_OR_W": "'or'",
    "_OR_S": "'||'",
    "_NOT_W": "'not'",
    "_NOT_S": "'!'",
    "IN": "'in'",
    "RANGE": "'..'",
    "CONTAINS": "'contains'",
    "MATCHES": "'matches'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "DOT": "'.'",
}


def _expected(expected: Any) -> str:
    names = {str(n) for n in expected}
    if "_AND_W" in names and "CMP" in names:
        return "an operator (== != < <= > >= contains matches in), and, or, or the end"
    if "_AND_W" in names:
        return "and, or, or the end of the expression"
    wanted = sorted({_NAMES.get(n, n) for n in names if not n.startswith("__")})
    if len(wanted) > 5:
        return "an expression"
    return " or ".join(wanted) if wanted else "nothing"


def _describe(tok: Any) -> str:
    return "end of the expression" if tok.type == "$END" else repr(str(tok))


def parse(text: str) -> Node:
    """The syntax tree of `text`; FilterError with the column of the first bad token."""
    if not text.strip():
        raise FilterError("empty filter", 1)
    from lark.exceptions import (
        UnexpectedCharacters,
        UnexpectedEOF,
        UnexpectedInput,
        UnexpectedToken,
    )

    parser, build = _parser()
    try:
        tree = parser.parse(text)
    except UnexpectedCharacters as e:
        pos = e.pos_in_stream or 0
        ch = text[pos] if pos < len(text) else ""
        hint = " (strings go in double quotes)" if ch == "'" else ""
        if ch == "=":
            hint = " (equality is ==)"
        elif ch and ch in "&|":
            hint = " (use && or ||, or the words and/or)"
        raise FilterError(f"unexpected character {ch!r}{hint}", pos + 1) from None
    except UnexpectedEOF as e:
        raise FilterError(
            f"the expression ends too early: expected {_expected(e.expected)}", len(text) + 1
        ) from None
    except UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            raise FilterError(
                f"the expression ends too early: expected {_expected(e.expected)}", len(text) + 1
            ) from None
        raise FilterError(
            f"unexpected {_describe(tok)}: expected {_expected(e.expected)}", _col(tok)
        ) from None
    except UnexpectedInput as e:  # pragma: no cover - the three above are the concrete kinds
        raise FilterError("cannot parse the filter", getattr(e, "column", 1)) from None
    try:
        return build.transform(tree)
    except Exception as e:  # lark wraps errors raised inside the transformer  # noqa: BLE001
        inner = getattr(e, "orig_exc", e)
        if isinstance(inner, FilterError):
            raise inner from None
        raise
