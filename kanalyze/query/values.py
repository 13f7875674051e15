"""Literal values of the filter language: numbers with units, times, and their checks.

Each converter takes a parsed `Value` and returns the Python value a field compares with,
or raises FilterError at the value's column, so a typo is never a silent match-nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from kanalyze.query.parse import FilterError, Value

_NUMBER = re.compile(r"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)([A-Za-zµ]*)")

# duration units → milliseconds (latency is compared in ms)
DURATION_MS = {
    "": 1.0,
    "ns": 1e-6,
    "us": 1e-3,
    "µs": 1e-3,
    "ms": 1.0,
    "s": 1e3,
    "m": 60e3,
    "min": 60e3,
    "h": 3600e3,
}
# size units → bytes
SIZE_BYTES = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def split_number(v: Value) -> tuple[float | int, str]:
    """(number, unit) of a numeric literal; ints stay ints."""
    m = _NUMBER.fullmatch(v.raw)
    if m is None:  # the grammar only lets numbers through here
        raise FilterError(f"not a number: {v.raw}", v.column)
    text, unit = m.groups()
    num: float | int = float(text) if any(c in text for c in ".eE") else int(text)
    return num, unit


def _need_number(v: Value, what: str) -> None:
    if v.kind == "word":
        raise FilterError(
            f'{what} needs a number; strings go in double quotes: "{v.raw}"', v.column
        )
    if v.kind != "number":
        raise FilterError(f"{what} needs a number, not {v.raw}", v.column)


def integer(v: Value, field: str) -> int:
    _need_number(v, field)
    num, unit = split_number(v)
    if unit:
        raise FilterError(f"{field} takes a plain number, not a unit ({unit!r})", v.column)
    if not isinstance(num, int):
        raise FilterError(f"{field} takes a whole number, not {v.raw}", v.column)
    return num


def size(v: Value, field: str) -> int:
    _need_number(v, field)
    num, unit = split_number(v)
    factor = SIZE_BYTES.get(unit.lower())
    if factor is None:
        raise FilterError(f"unknown size unit {unit!r} (B, KB, KiB, MB, MiB, GB, GiB)", v.column)
    return int(num * factor)


def duration_ms(v: Value, field: str) -> float:
    _need_number(v, field)
    num, unit = split_number(v)
    factor = DURATION_MS.get(unit)
    if factor is None:
        raise FilterError(
            f"unknown time unit {unit!r} (ns, us, ms, s, m, h; plain numbers are ms)", v.column
        )
    return num * factor


def parse_time(text: str) -> int | None:
    """Epoch nanoseconds of an ISO-8601 text (no zone: UTC), or None when it is not one."""
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(round(t.timestamp() * 1e6)) * 1000


def time_ns(v: Value, field: str) -> int:
    """An absolute time: a quoted ISO-8601 text or a number of epoch seconds."""
    if v.kind == "string":
        ns = parse_time(v.value)  # type: ignore[arg-type]
        if ns is None:
            raise FilterError(
                f'{field} needs an ISO-8601 time ("2026-11-22T03:37:31Z") or epoch '
                f"seconds, not {v.raw}",
                v.column,
            )
        return ns
    _need_number(v, field)
    num, unit = split_number(v)
    if unit and unit != "s":
        raise FilterError(f"{field} takes epoch seconds or a quoted ISO-8601 time", v.column)
    return int(round(num * 1e6)) * 1000


def text(v: Value, field: str) -> str:
    if v.kind == "string":
        return v.value  # type: ignore[return-value]
    if v.kind == "word":
        raise FilterError(f'strings go in double quotes: {field} == "{v.raw}"', v.column)
    raise FilterError(f"{field} compares with a quoted string, not {v.raw}", v.column)


def boolean(v: Value, field: str) -> bool:
    if v.kind != "bool":
        raise FilterError(f"{field} is true or false, not {v.raw}", v.column)
    return v.value  # type: ignore[return-value]


def regex(v: Value, field: str) -> re.Pattern[str]:
    pattern = text(v, field)
    try:
        return re.compile(pattern)
    except re.error as e:
        col = v.column + 1 + (e.pos or 0)
        raise FilterError(f"bad regular expression: {e.msg}", col) from None


def body_literal(v: Value, field: str) -> object:
    """A body path compares with a string, a plain number or true/false."""
    if v.kind in ("string", "bool"):
        return v.value
    if v.kind == "word":
        raise FilterError(f'strings go in double quotes: {field} == "{v.raw}"', v.column)
    num, unit = split_number(v)
    if unit:
        raise FilterError(
            f"body fields compare with plain numbers (units are for latency, time "
            f"and size), not {v.raw}",
            v.column,
        )
    return num
