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


def ts_text(ts_ns: int) -> str:
    """`repr(ts_seconds(ts_ns))`, the JSON text of a time, at twice the speed for whole
    microseconds (every pcap in µs) from 1 s to 2^32 s: there decimals of 6 places are 1e-6
    apart, more than a float's spacing, so each is its own float and its shortest spelling,
    and rounding to them is exact. Other times take the float route."""
    if not ts_ns % 1000 and 1_000_000_000 <= ts_ns < 4_000_000_000_000_000_000:
        sec, us = divmod(ts_ns // 1000, 1_000_000)
        return f"{sec}.{us:06d}".rstrip("0") if us else f"{sec}.0"
    return repr(round(ts_ns / 1e9, 6))
