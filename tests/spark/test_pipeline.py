"""The pipeline gives exactly the offline exchanges, however the capture is rotated or
range-split, on both paths: byte ranges stitched (the default) and the per-connection shuffle."""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from kanalyze.capture import read_capture
from kanalyze.export import ExchangeEncoder
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.session import Session
from tests.spark.support import (
    LONG_CAPTURE,
    frame_offsets,
    offline_keys,
    rotate,
    spark_keys,
    to_pcapng,
)

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.spark import schemas as R  # noqa: E402 - needs pyarrow
from kanalyze.spark.pipeline import run_pipeline  # noqa: E402
from kanalyze.spark.tables import AGGREGATES, TABLES  # noqa: E402

pytestmark = pytest.mark.spark
SPLIT = 4096  # bytes: the 46 KB capture becomes ~12 verified ranges


@pytest.fixture(scope="module", params=["ranges", "shuffle"])
def run(spark, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    base = tmp_path_factory.mktemp("pipeline")
    pieces = rotate(LONG_CAPTURE, base / "rotated", 40)
    (base / "rotated" / "notes.txt").write_text("not a capture\n")  # reported, not fatal
    whole_pcap = base / "ranges_pcap" / "whole.pcap"
    whole_pcap.parent.mkdir()
    shutil.copy(LONG_CAPTURE, whole_pcap)
    whole_ng = to_pcapng(LONG_CAPTURE, base / "ranges_pcapng" / "whole.pcapng")
    out = base / "out"
    ranged = request.param == "ranges"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RANGE_BYTES_ENV, str(SPLIT))  # the range path's ranges: as small
        res = run_pipeline(
            spark, [str(base / "rotated"), str(whole_pcap), str(whole_ng)], str(out),
            split_bytes=SPLIT, ranges=ranged,
        )  # fmt: skip
    assert ("ranges" in res.balance) == ranged  # the path asked for really ran
    rows = [r.asDict() for r in spark.read.parquet(str(out / "exchanges")).collect()]
    by_group = defaultdict(list)
    for r in rows:
        by_group[Path(r["capture_id"]).name].append(r)
    units = Counter(r["path"] for r in spark.read.parquet(str(out / "files")).collect()
                    for _ in range(r["units"] or 0))
    return {
        "res": res, "out": out, "rows": by_group, "pieces": pieces, "pcap": whole_pcap,
        "pcapng": whole_ng, "ranged": ranged, "units": units,
    }  # fmt: skip


def test_rotated_files_give_exactly_the_offline_exchanges(run):
    pieces = sorted(run["pieces"], key=lambda p: p.name.split("-", 1)[1])  # capture order
    assert len(pieces) >= 6
    # the pieces are cut into byte ranges too: connections cross range and file boundaries
    assert sum(run["units"][str(p)] for p in pieces) > len(pieces)
    if run["ranged"]:
        assert run["res"].balance["handovers"] >= len(pieces)  # handed across the edges
    else:
        plan = run["res"].plan
        rotated = [u for u in plan.units if plan.files[u.rank].capture_id.endswith("rotated")]
        assert sum(1 for u in rotated if not u.whole) >= len(pieces)
    expected = offline_keys(LONG_CAPTURE)
    got = spark_keys(run["rows"]["rotated"], frame_offsets(pieces))
    assert sum(expected.values()) == 93
    assert got == expected  # set equality with multiplicity: nothing lost, nothing invented


@pytest.mark.parametrize("which", ["pcap", "pcapng"])
def test_byte_range_split_gives_exactly_the_offline_exchanges(run, which):
    path = run[which]
    assert run["units"][str(path)] >= 8  # really split
    if not run["ranged"]:
        info = next(f for f in run["res"].plan.files if f.path == str(path))
        units = [u for u in run["res"].plan.units if u.rank == info.rank]
        assert not any(u.whole for u in units)  # every cut verified
    assert spark_keys(run["rows"][path.parent.name]) == offline_keys(path)


def test_connections_span_rotated_files(spark, run):
    conns = spark.read.parquet(str(run["out"] / "connections"))
    rotated = [r for r in conns.collect() if r["capture_id"].endswith("rotated") and r["kafka"]]
    assert rotated and max(r["files_spanned"] for r in rotated) > 1
    assert {r["client"] for r in rotated} == {r["client"] for r in run["rows"]["rotated"]}


def test_every_table_is_written(spark, run):
    out = run["out"]
    for name in TABLES:
        assert spark.read.parquet(str(out / name)).count() > 0, name
    for name in AGGREGATES:
        assert (out / "aggregates" / name).is_dir(), name
    cols = spark.read.parquet(str(out / "exchanges")).columns
    assert set(cols) == set(R.EXCHANGE_COLUMNS)


def test_files_table_counts_every_packet(spark, run):
    files = {r["path"]: r for r in spark.read.parquet(str(run["out"] / "files")).collect()}
    for p in [*run["pieces"], run["pcap"], run["pcapng"]]:
        row = files[str(p)]
        assert row["packets"] == sum(1 for _ in read_capture(str(p))), p
        assert row["error"] == ""
    assert files[str(run["pcapng"])]["split_verified"] and files[str(run["pcap"])]["split_verified"]
    notes = str(run["pieces"][0].parent / "notes.txt")
    assert "not a pcap or pcapng file" in files[notes]["error"]
    assert any(p.startswith(notes) for p in run["res"].problems)


def test_partitions_high_watermarks_match_offline(spark, run):
    enc = ExchangeEncoder()
    expected: dict[tuple, int] = {}
    for ex in Session([str(LONG_CAPTURE)]).exchanges():
        if ex.api != "Fetch" or ex.response is None:
            continue
        body = enc.encode(ex)["response"]["body"]
        for t in body["responses"]:
            for p in t["partitions"]:
                k = (t.get("topic_id") or t.get("topic"), p["partition_index"])
                expected[k] = max(expected.get(k, -1), p["high_watermark"])
    parts = spark.read.parquet(str(run["out"] / "partitions"))
    got: dict[tuple, int] = {}
    fetches = parts.where("api = 'Fetch' and capture_id like '%rotated'").collect()
    for r in fetches:
        k = (r["topic_id"] or r["topic"], r["partition"])
        got[k] = max(got.get(k, -1), r["high_watermark"])
    assert expected and got == expected
    # Fetch v16 names topics by id; the names come from Metadata responses on other connections
    assert {r["topic"] for r in fetches} == {"lib-group"}
    hw = {
        (r["topic"], r["partition"]): r
        for r in spark.read.parquet(str(run["out"] / "aggregates" / "partition_hw")).collect()
    }
    assert {(("lib-group"), k[1]): v for k, v in expected.items()} == {
        k: r["hw_max"] for k, r in hw.items()
    }
