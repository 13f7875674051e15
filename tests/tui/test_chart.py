"""The replication chart's x axis is capture time; the legend names every line."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from kanalyze.tui.widgets.chart import StepChart  # noqa: E402


def test_columns_follow_time_not_entries():
    chart = StepChart()
    # three entries in the first 10 ms, one 990 ms later: most columns show the third entry
    chart.set_series({"HW": [0, 1, 2, 3]}, xs=[0.0, 0.005, 0.01, 1.0])
    cols = chart.positions(100, 4)
    assert cols[0] == 0 and cols[-1] == 3 and cols.count(2) >= 95
    chart.set_series({"HW": [0, 1, 2, 3]})  # no times: spread evenly
    assert chart.positions(100, 4).count(2) == 25


def test_legend_names_every_line():
    chart = StepChart()
    chart.set_series({"leader LEO": [1, 1], "HW": [0, 0], "follower 2 LEO": [0, 0]}, xs=[0.0, 1.0])
    legend = chart.legend().plain
    assert "leader LEO" in legend and "HW" in legend and "● follower 2 LEO" in legend
