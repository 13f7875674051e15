"""Adapter between the TUI and the analysis (issue 5): the one place the views get the report
document (docs/report.schema.json) from. Swap the implementation here, nothing else changes."""

from __future__ import annotations

from collections.abc import Iterable

from kanalyze.analysis.report import analyze
from kanalyze.correlation import Exchange


def analyze_exchanges(exchanges: Iterable[Exchange]) -> dict[str, object]:
    """The report document for these exchanges (start-time order)."""
    return analyze(exchanges)
