"""Adapter between the TUI and the analysis (issue 5): the one place the views get the report
document (docs/report.schema.json) from. Swap the implementation here, nothing else changes."""

from __future__ import annotations

from collections.abc import Iterable

from dissectors.context import DecodeContext
from kanalyze.analysis.report import analyze
from kanalyze.correlation import Exchange


def analyze_exchanges(
    exchanges: Iterable[Exchange], topic_ids: dict[str, str] | None = None
) -> dict[str, object]:
    """The report document for these exchanges (start-time order); `topic_ids` (--topic-ids)
    preloads the analysis's topic-name registry."""
    return analyze(exchanges, DecodeContext(topic_names=dict(topic_ids or {})))
