"""The range path (shard by work): one capture cut into many byte ranges, decoded by one task
each and stitched on the driver, gives exactly the offline exchanges and the shuffle path's
connection ids, and falls back to the shuffle pipeline when it cannot be used."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from kanalyze.capture import read_capture
from tests.spark.support import LONG_CAPTURE, frame_offsets, offline_keys, rotate, spark_keys

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.parallel.range_export import RANGE_BYTES_ENV  # noqa: E402
from kanalyze.spark.pipeline import build  # noqa: E402
from kanalyze.spark.range_stage import (  # noqa: E402
    COUNTERS,
    STAGE_ENV,
    plan_file,
    plan_groups,
)
from kanalyze.spark.units import list_inputs, rank_files  # noqa: E402

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


def _build(spark, path: Path, ranges: bool) -> tuple[dict, list[dict], list[dict]]:
    """(balance, exchanges rows, files rows) without writing tables (keeps the test short)."""
    t = build(spark, [str(path)], ranges=ranges)
    try:
        rows = [r.asDict() for r in t.exchanges.collect()]
        files = [r.asDict() for r in t.files.collect()]
        conns = [r.asDict() for r in t.connections.collect()]
    finally:
        t.unpersist()
    files[0]["connections"] = conns
    return t.balance or {}, rows, files


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_many_ranges_give_exactly_the_offline_exchanges(spark, tmp_path, monkeypatch, capture):
    path = tmp_path / capture.name
    shutil.copy(capture, path)
    monkeypatch.setenv(RANGE_BYTES_ENV, "2048")  # ~20 ranges: connections cross many edges
    balance, rows, files = _build(spark, path, ranges=True)
    assert balance["ranges"] >= 15 and balance["bytes_shuffled_est"] == 0
    assert balance["handovers"] >= 2  # connections really were handed across ranges
    assert spark_keys(rows) == offline_keys(path)
    assert all(r["conn_id"] for r in rows)
    # topic names a Metadata response in an earlier range taught are filled in, as offline
    got = Counter((r["client"], r["correlation_id"], r["request_frame"], tuple(r["topics"]))
                  for r in rows)
    assert got == _offline_topics(path)
    assert files[0]["units"] == balance["ranges"] and files[0]["error"] == ""
    if capture != LONG_CAPTURE:
        return
    # the same connection ids as the shuffle path (content identity + first frame + roles)
    monkeypatch.delenv(RANGE_BYTES_ENV)
    shuffled, base, base_files = _build(spark, path, ranges=False)
    assert "ranges" not in shuffled

    def ids(rs: list[dict]) -> Counter:
        return Counter((r["conn_id"], r["correlation_id"], r["request_frame"]) for r in rs)

    assert ids(rows) == ids(base)
    assert files[0]["packets"] == base_files[0]["packets"]
    cols = ("conn_id", "client", "broker", "first_ns", "last_ns", "packets", "first_frame",
            "exchanges", "syn_seen", "fin_seen", "files_spanned", *COUNTERS, "non_kafka_bytes")

    def conns(fs: list[dict]) -> set:
        return {tuple(c[k] for k in cols) for c in fs[0]["connections"] if c["exchanges"]}

    assert len(conns(files)) >= 5 and conns(files) == conns(base_files)
    # the byte counters, summed over each connection's owners, are one process's
    assert all(c["client_stream_bytes"] for c in files[0]["connections"] if c["exchanges"])
    # the rows kept in Spark's cache (clusters) are the rows staged in files (local masters)
    monkeypatch.setenv(RANGE_BYTES_ENV, "2048")
    monkeypatch.setenv(STAGE_ENV, "0")
    cached_balance, cached, _files = _build(spark, path, ranges=True)
    assert cached_balance["ranges"] == balance["ranges"]
    assert sorted(map(repr, cached)) == sorted(map(repr, rows))


def test_local_uncompressed_captures_are_cut_unless_they_overlap_in_time(monkeypatch, tmp_path):
    monkeypatch.setenv(RANGE_BYTES_ENV, "2048")
    one = rank_files(list_inputs([str(LONG_CAPTURE)]), None)
    got = plan_file(one, 2)
    assert got is not None and len(got) == 1 and len(got[0]) > 10
    # two captures of one directory, one after the other in time: one chain, ranks numbered
    two = rank_files(list_inputs([str(p) for p in CAPTURES]), None)
    chain = plan_file(two, 2)
    assert chain is not None and len(chain) == 1
    assert {r.layout.rank for r in chain[0]} == {0, 1}
    assert all(r.then for r in chain[0] if r.layout.rank == 0)  # overlap reads on into rank 1
    assert chain[0][-1].last and not any(r.last for r in chain[0][:-1])
    # the same capture twice: the files overlap in time (one process interleaves them)
    for name in ("a.pcap", "b.pcap"):
        shutil.copy(LONG_CAPTURE, tmp_path / name)
    assert plan_file(rank_files(list_inputs([str(tmp_path)]), None), 2) is None
    gz = [replace(one[0], compressed=True)]
    assert plan_file(gz, 2) is None
    # per capture group: a group this path cannot take is left to the shuffle path alone
    mixed = [replace(one[0], capture_id="a"), replace(two[1], rank=1, capture_id="b",
                                                      compressed=True)]
    planned, left = plan_groups(mixed, 2)
    assert len(planned) == 1 and {r.layout.rank for r in planned[0]} == {0} and left == [1]
    remote = [replace(one[0], path="s3a://bucket/x.pcap")]  # no S3 connector: unreadable
    assert plan_file(remote, 2) is None


def test_a_rotated_set_cut_one_range_per_file_gives_the_offline_exchanges(spark, tmp_path):
    """The planner's own cut (no forced range size): one range per file, the files before the
    last not walked on the driver (`range_plan.UNCOUNTED`), their runs counting their packets."""
    pieces = rotate(LONG_CAPTURE, tmp_path / "rotated", 40, pcap=True)
    order = sorted(pieces, key=lambda p: p.name.split("-", 1)[1])  # capture order
    planned = plan_file(rank_files(list_inputs([str(tmp_path / "rotated")]), None), 2)
    assert planned is not None and len(planned[0]) == len(pieces) >= 6
    assert sum(not r.counted for r in planned[0]) == len(pieces) - 1
    t = build(spark, [str(tmp_path / "rotated")], ranges=True)
    try:
        rows = [r.asDict() for r in t.exchanges.collect()]
        files = {r["path"]: r["packets"] for r in t.files.collect()}
    finally:
        t.unpersist()
    assert t.balance["ranges"] == len(pieces) and t.balance["refused_files"] == 0
    assert t.balance["handovers"] >= 1
    assert spark_keys(rows, frame_offsets(order)) == offline_keys(LONG_CAPTURE)
    assert files == {str(p): sum(1 for _ in read_capture(str(p))) for p in pieces}


def test_files_overlapping_in_time_found_by_their_runs_take_the_shuffle_path(spark, tmp_path):
    """Two copies of one capture in one directory: the first is not walked, so the plan does
    not see that they overlap in time; the check on its run does, and the stitch refuses."""
    for name in ("a.pcap", "b.pcap"):
        shutil.copy(LONG_CAPTURE, tmp_path / name)
    t = build(spark, [str(tmp_path)], ranges=True)
    try:
        rows = sorted(map(repr, (r.asDict() for r in t.exchanges.collect())))
    finally:
        t.unpersist()
    assert t.balance["refused_groups"] == 1 and t.balance["refused_ranges"] == 2
    base = build(spark, [str(tmp_path)], ranges=False)
    try:
        assert rows == sorted(map(repr, (r.asDict() for r in base.exchanges.collect())))
    finally:
        base.unpersist()


def test_a_group_whose_stitch_refuses_alone_takes_the_shuffle_path(spark, tmp_path, monkeypatch):
    """Two capture groups; the stitch refuses one: only its files are shuffled and decoded per
    connection, the other keeps its range rows, and both equal one process."""
    from kanalyze.parallel.ranges import Unstitchable
    from kanalyze.spark import range_stage

    paths = []
    for group, capture in (("a", CAPTURES[0]), ("b", CAPTURES[1])):
        (tmp_path / group).mkdir()
        paths.append(tmp_path / group / capture.name)
        shutil.copy(capture, paths[-1])
    real = range_stage.stitch

    def refuse_b(results, opts, **kw):  # noqa: ANN001, ANN003, ANN202 - kp_codecs' (port 19097)
        if any(19097 in (c.key[1], c.key[3]) for r in results for c in r.conns.values()):
            raise Unstitchable("refused by the test")
        return real(results, opts, **kw)

    monkeypatch.setenv(RANGE_BYTES_ENV, "4096")
    monkeypatch.setattr(range_stage, "stitch", refuse_b)
    t = build(spark, [str(p.parent) for p in paths])
    try:
        rows = [r.asDict() for r in t.exchanges.collect()]
        files = {r["path"]: r for r in t.files.collect()}
        conns = t.connections.collect()
    finally:
        t.unpersist()
    refused = t.balance["refused_files"]
    assert refused == 1 and t.balance["ranges"] >= 4 and t.plan.units  # one group shuffled
    # the refused group's range work is counted (thrown away: the shuffle path redoes it)
    assert t.balance["refused_groups"] == 1 and t.balance["refused_ranges"] >= 2
    assert 0 < t.balance["refused_bytes"] < sum(p.stat().st_size for p in paths)
    assert t.balance["refused_task_cpu_s"] > 0
    for p in paths:
        mine = [r for r in rows if r["capture_id"] == str(p.parent)]
        assert spark_keys(mine) == offline_keys(p), p
        assert files[str(p)]["packets"] == sum(1 for _ in read_capture(str(p)))
    assert {r["conn_id"] for r in rows} <= {c["conn_id"] for c in conns}


def test_a_reused_4_tuple_has_the_shuffle_paths_connection_rows(spark, tmp_path, monkeypatch):
    """Port reuse cut into ranges: each incarnation's row has its own times and packets, and
    every column equals the shuffle path's (and the exchanges one process's)."""
    path = tmp_path / "port_reuse.pcap"
    shutil.copy(LONG_CAPTURE.parent / "crafted" / "port_reuse.pcap", path)
    monkeypatch.setenv(RANGE_BYTES_ENV, "1024")
    balance, rows, files = _build(spark, path, ranges=True)
    assert balance["ranges"] >= 4 and balance["refused_files"] == 0
    assert spark_keys(rows) == offline_keys(path)
    monkeypatch.delenv(RANGE_BYTES_ENV)
    _b, _rows, base_files = _build(spark, path, ranges=False)

    def conns(fs: list[dict]) -> list[dict]:
        return sorted(({k: v for k, v in c.items() if k != "capture_id"}
                       for c in fs[0]["connections"]), key=lambda c: c["incarnation"])

    got, want = conns(files), conns(base_files)
    assert [c["incarnation"] for c in got] == [1, 2]
    assert all(c["first_ns"] and c["packets"] for c in got)
    assert got[0]["last_ns"] < got[1]["first_ns"]  # each incarnation its own packets
    assert got == want
