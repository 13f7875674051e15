"""Outputs: NDJSON exchanges and JSON documents; the dashboard formats (events, OpenMetrics)
and the HTML report (docs/dashboards.md). Only encoders live here: bodies are decoded by
`kanalyze.bodies`, JSON spelling is `kanalyze.jsontext`. Import from the package."""

from kanalyze.export.ndjson import SCHEMA_VERSION, ExchangeEncoder
from kanalyze.jsontext import dumps, ts_seconds

# the cap on one `-T events` line: below Loki's default line limit (256 KiB) with room for a
# shipper's own fields. Here, not in kanalyze.export.events: the option's help needs it, and
# that module is imported only when the format is chosen (it brings datetime and orjson, a
# tenth of the header index's start-up)
DEFAULT_MAX_LINE = 200_000

__all__ = ["DEFAULT_MAX_LINE", "SCHEMA_VERSION", "ExchangeEncoder", "dumps", "ts_seconds"]
