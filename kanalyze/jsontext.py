"""How every output spells JSON: compact separators, UTF-8 as is, epoch seconds to the µs.

Shared by the NDJSON export, the report and summary documents, live mode and the TUI, so the
spelling is decided once; orjson (a dependency) writes the same bytes for what
`kanalyze.export.ndjson` hands it (see there).
"""

from __future__ import annotations

import json

# json's encoder with the project's spelling: no spaces, non-ASCII text as is
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def ts_seconds(ts_ns: int) -> float:
    """Epoch seconds with microsecond precision."""
    return round(ts_ns / 1e9, 6)
