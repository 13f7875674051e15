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


def test_partition_labels_tell_topic_ids_apart():
    """Unresolved topic ids are cut to distinct prefixes; the partition number always shows."""
    from kanalyze.tui.screens.replication import NAME_ROOM, partition_labels

    a = "7a3c9e21-54b8-4f0d-8e6a-1c2d3e4f5a6b"
    b = "7a3c9e21-99b8-4f0d-8e6a-1c2d3e4f5a6b"  # the same first 8 digits
    c = "0b1c2d3e-0000-4000-8000-000000000000"
    long = "a-topic-name-much-longer-than-the-pane-allows"
    parts = [{"topic": t, "partition": i} for t in (a, b, c, "orders", long) for i in (0, 11)]
    labels = partition_labels(parts)
    assert len(set(labels)) == len(labels)
    assert labels[0] == "7a3c9e21-5…-0" and labels[2] == "7a3c9e21-9…-0"
    assert labels[4] == "0b1c2d3e…-0" and labels[6] == "orders-0" and labels[7] == "orders-11"
    assert all(len(x) <= NAME_ROOM + 3 for x in labels[8:]) and labels[9].endswith("allows-11")
