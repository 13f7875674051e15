"""The filter language shared by export, summary, report, live and the TUI (docs/filters.md).

    f = compile_filter('api == "Fetch" and latency > 100ms')   # or FilterError(message, column)
    selected = [ex for ex in exchanges if f.match(ex)]

`try_compile` returns the FilterError instead of raising it (for an input box). The names
load on first use, so commands run without a filter never load the language.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kanalyze.query.compile import Filter, compile_filter, try_compile
    from kanalyze.query.parse import FilterError
    from kanalyze.query.subject import Env

_WHERE = {
    "Filter": "compile",
    "compile_filter": "compile",
    "try_compile": "compile",
    "FilterError": "parse",
    "Env": "subject",
}
__all__ = ["Env", "Filter", "FilterError", "compile_filter", "try_compile"]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kanalyze.query' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kanalyze.query.{module}"), name)
