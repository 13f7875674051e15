"""The range path (shard by work): one capture cut into many byte ranges, decoded by one task
each and stitched on the driver, gives exactly the offline exchanges and the shuffle path's
connection ids, and falls back to the shuffle pipeline when it cannot be used."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.spark.support import LONG_CAPTURE, offline_keys, spark_keys

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.parallel.range_export import RANGE_BYTES_ENV  # noqa: E402
from kanalyze.spark.pipeline import run_pipeline  # noqa: E402

pytestmark = pytest.mark.spark
CAPTURES = [LONG_CAPTURE, LONG_CAPTURE.with_name("kp_codecs.pcap")]


def _offline_topics(path: Path) -> Counter:
    """(client, correlation id, request frame, topics) as one process's rows name them."""
    from kanalyze.session import Session
    from kanalyze.spark.rows import RowBuilder

    b = RowBuilder([str(path)])
    rows = [b.row(ex, "") for ex in Session([str(path)]).exchanges()]
    return Counter(
        (r["client"], r["correlation_id"], r["request_frame"], tuple(r["topics"])) for r in rows
    )


def _rows(spark, out: Path, table: str = "exchanges") -> list[dict]:
    return [r.asDict() for r in spark.read.parquet(str(out / table)).collect()]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_many_ranges_give_exactly_the_offline_exchanges(spark, tmp_path, monkeypatch, capture):
    path = tmp_path / capture.name
    shutil.copy(capture, path)
    monkeypatch.setenv(RANGE_BYTES_ENV, "2048")  # ~20 ranges: connections cross many edges
    res = run_pipeline(spark, [str(path)], str(tmp_path / "out"), ranges=True)
    assert res.balance["ranges"] >= 15 and res.balance["bytes_shuffled_est"] == 0
    assert res.balance["handovers"] >= 3  # connections really were handed across ranges
    rows = _rows(spark, tmp_path / "out")
    assert spark_keys(rows) == offline_keys(path)
    assert all(r["conn_id"] for r in rows)
    # topic names a Metadata response in an earlier range taught are filled in, as offline
    got = Counter((r["client"], r["correlation_id"], r["request_frame"], tuple(r["topics"]))
                  for r in rows)
    assert got == _offline_topics(path)
    files = _rows(spark, tmp_path / "out", "files")
    assert files[0]["units"] == res.balance["ranges"] and files[0]["error"] == ""
    if capture != LONG_CAPTURE:
        return
    # the same connection ids as the shuffle path (content identity + first frame + roles)
    monkeypatch.delenv(RANGE_BYTES_ENV)
    shuffled = run_pipeline(spark, [str(path)], str(tmp_path / "shuffled"), ranges=False)
    assert "ranges" not in shuffled.balance
    base = _rows(spark, tmp_path / "shuffled")

    def ids(rs: list[dict]) -> Counter:
        return Counter((r["conn_id"], r["correlation_id"], r["request_frame"]) for r in rs)

    assert ids(rows) == ids(base)
    assert files[0]["packets"] == _rows(spark, tmp_path / "shuffled", "files")[0]["packets"]


def test_several_files_fall_back_to_the_shuffle(spark, tmp_path, monkeypatch):
    monkeypatch.setenv(RANGE_BYTES_ENV, "2048")
    paths = [CAPTURES[1], LONG_CAPTURE.with_name("lib_acks.pcap")]
    res = run_pipeline(spark, [str(p) for p in paths], str(tmp_path / "out"), ranges=True)
    assert "ranges" not in res.balance and res.counts["exchanges"] > 0
