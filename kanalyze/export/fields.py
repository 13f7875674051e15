"""`export -T fields -e NAME ...`: one line of chosen fields per exchange, tab-separated (or
CSV), for `cut`, `sort`, spreadsheets and shell loops; the field names are the filter's
(docs/filters.md), body paths included.

Values: several values of one field joined by the aggregator (`,`); an absent field is
empty; `time` is ISO-8601 UTC with microseconds; true/false for booleans; a JSON object or
array from a body path as compact JSON.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from kanalyze.query.compile import resolve
from kanalyze.query.fields import FACTS, TIME, FieldSpec
from kanalyze.query.parse import Field, FilterError
from kanalyze.query.subject import Env, Subject

_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"})


def field_specs(names: Sequence[str]) -> list[FieldSpec]:
    """The specs of `-e` names; FilterError naming the bad one."""
    out = []
    for name in names:
        path = tuple(name.strip().split("."))
        if not all(p.isidentifier() for p in path):
            raise FilterError(f"-e {name!r}: not a field name", 1)
        try:
            out.append(resolve(Field(path, 1)))
        except FilterError as e:
            raise FilterError(f"-e {name}: {e.message}", 1) from None
    return out


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _one(value: object, kind: str) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if kind == TIME and isinstance(value, int):
        return _iso(value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


class FieldWriter:
    """Writes the chosen fields of each exchange as TSV (escaped) or CSV (quoted)."""

    def __init__(
        self,
        out: TextIO,
        specs: list[FieldSpec],
        env: Env,
        *,
        header: bool = False,
        separator: str = "\t",
        aggregator: str = ",",
        as_csv: bool = False,
    ) -> None:
        self.specs = specs
        self.env = env
        self.aggregator = aggregator
        self.learn = any(s.cost >= FACTS for s in specs)
        self.out = out
        self._csv = (
            csv.writer(out, delimiter="," if separator == "\t" else separator, lineterminator="\n")
            if as_csv
            else None
        )
        self.separator = separator
        if header:
            self._row([s.name for s in specs])

    def _row(self, cells: list[str]) -> None:
        if self._csv is not None:
            self._csv.writerow(cells)
        else:
            self.out.write(self.separator.join(c.translate(_ESCAPES) for c in cells) + "\n")

    def cells(self, ex: object) -> list[str]:
        s = Subject(ex, self.env)  # type: ignore[arg-type]
        cells = []
        for spec in self.specs:
            v = spec.get(s)
            if spec.multi:
                values: tuple = v  # type: ignore[assignment]
                cells.append(self.aggregator.join(_one(x, spec.kind) for x in values))
            else:
                cells.append(_one(v, spec.kind))
        return cells

    def write(self, ex: object) -> None:
        self._row(self.cells(ex))
