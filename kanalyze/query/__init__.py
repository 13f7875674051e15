"""The filter language shared by export, summary, report, live and the TUI (docs/filters.md).

    f = compile_filter('api == "Fetch" and latency > 100ms')   # or FilterError(message, column)
    selected = [ex for ex in exchanges if f.match(ex)]

`try_compile` returns the FilterError instead of raising it (for an input box).
"""

from kanalyze.query.compile import Filter, compile_filter, try_compile
from kanalyze.query.parse import FilterError
from kanalyze.query.subject import Env

__all__ = ["Env", "Filter", "FilterError", "compile_filter", "try_compile"]
