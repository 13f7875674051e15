"""The tables a data engineer expects: TIMESTAMP (µs) columns, dt/hour partitions sorted by time,
idempotent appends, optional redacted JSON bodies, DataFrames without Parquet; and the capture
order of one file kept even when its clock steps back."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kanalyze.capture import read_capture
from kanalyze.capture.writer import PcapWriter
from kanalyze.session import Session
from tests.spark.support import LONG_CAPTURE, local_pipeline

pq = pytest.importorskip("pyarrow.parquet", reason="the Spark extra is not installed")

pytestmark = pytest.mark.spark
CRAFTED = LONG_CAPTURE.parent / "crafted"
SASL = LONG_CAPTURE.parent / "sasl_scram_rejected.pcap"


def test_response_stamped_before_its_request_pairs_as_offline(tmp_path):
    """A response 1 µs before its request (clock step) in one file: offline reads the file in
    order and pairs them; stage 2 must see the same order."""
    src = CRAFTED / "baseline.pcap"
    first = next(iter(Session([str(src)]).exchanges()))
    req_no, resp_no = first.request.pdu.last_pkt, first.response.pdu.first_pkt
    packets = list(read_capture(str(src)))
    req_ts = packets[req_no - 1].ts_ns
    path = tmp_path / "step.pcap"
    w = PcapWriter(str(path), packets[0].linktype)
    for i, p in enumerate(packets, 1):
        w.write(req_ts - 1000 if i == resp_no else p.ts_ns, bytes(p.data))
    w.close()
    offline = Counter(ex.status for ex in Session([str(path)]).exchanges())
    got = Counter(r["status"] for r in local_pipeline([str(path)]) if r["kind"] == "exchange")
    assert offline["ok"] == sum(offline.values()) > 0
    assert got == offline


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """Two appends of the same inputs: relative paths in and out (taken from the driver's
    working directory, whatever the JVM's), then absolute ones."""
    import os
    import shutil

    from kanalyze.spark.pipeline import run_pipeline

    base = tmp_path_factory.mktemp("tables")
    (base / "caps").mkdir()
    shutil.copy(LONG_CAPTURE, base / "caps" / "long.pcap")
    here = os.getcwd()
    os.chdir(base)
    try:
        first = run_pipeline(
            spark, ["caps/long.pcap", str(SASL)], "out", with_bodies=True, mode="append"
        )
    finally:
        os.chdir(here)
    inputs = [str(base / "caps" / "long.pcap"), str(SASL)]
    again = run_pipeline(spark, inputs, str(base / "out"), with_bodies=True, mode="append")
    return {"out": base / "out", "first": first, "again": again, "base": base}


def test_relative_inputs_and_output(runs):
    """Inputs are listed sorted by absolute path, so look the copy up rather than assume where a
    checkout (CI's lives under /check) sorts against the temporary directory."""
    paths = sorted(f.path for f in runs["first"].plan.files)
    assert paths == sorted([str(runs["base"] / "caps" / "long.pcap"), str(SASL)])
    assert (runs["out"] / "exchanges").is_dir()


def test_partitioned_by_date_and_hour_with_micros_timestamps(runs):
    ex = runs["out"] / "exchanges"
    hours = sorted(ex.glob("dt=*/hour=*"))
    assert hours, list(ex.iterdir())
    for part in ex.glob("dt=*/hour=*/*.parquet"):
        schema = pq.read_schema(part)
        assert str(schema.field("request_ts").type) == "timestamp[us, tz=UTC]"  # not INT96
        ns = [
            a if a is not None else b
            for a, b in zip(
                *pq.read_table(part, columns=["request_last_ns", "response_last_ns"]).to_pydict()
                .values(), strict=True,
            )
        ]  # fmt: skip
        assert ns == sorted(ns), part  # sorted by time within each file
    conns = pq.read_table(runs["out"] / "connections")
    assert str(conns.schema.field("first_ts").type) == "timestamp[us, tz=UTC]"


def test_append_of_the_same_input_adds_nothing(spark, runs):
    first, again = runs["first"], runs["again"]
    assert first.counts["exchanges"] > 93 and not first.skipped
    assert len(again.skipped) == 2 and again.counts["exchanges"] == 0
    total = spark.read.parquet(str(runs["out"] / "exchanges")).count()
    assert total == first.counts["exchanges"]
    assert spark.read.parquet(str(runs["out"] / "files")).count() == 2


def test_bodies_are_json_and_redacted(spark, runs):
    rows = spark.read.parquet(str(runs["out"] / "exchanges")).collect()
    assert all(r["request_body"] for r in rows if r["request_size"] and r["api"] != "unknown")
    bodies = [json.loads(r["request_body"]) for r in rows if r["request_body"]]
    assert any(isinstance(b, dict) for b in bodies)
    proofs = [r["request_body"] for r in rows if "client_proof" in (r["request_body"] or "")]
    assert proofs  # the SCRAM client-final message: its proof is never in the output
    for body in proofs:
        assert json.loads(body)["auth_bytes"]["client_proof"] == "<redacted 44 bytes>", body


def test_api_returns_dataframes_without_writing(spark, tmp_path, monkeypatch):
    from kanalyze.spark import exchanges

    monkeypatch.chdir(tmp_path)
    df = exchanges(spark, str(LONG_CAPTURE), decode_bodies=False)
    assert df.count() == 93
    assert set(df.columns) >= {"conn_id", "request_ts", "dt", "hour"}
    assert list(tmp_path.iterdir()) == []


def test_api_logs_the_groups_the_range_path_refused(spark, monkeypatch, caplog):
    """`exchanges(...)` returns one DataFrame: a capture group the stitch refused (decoded by
    the shuffle path) is said on the `kanalyze.spark` logger, not lost with `Tables.notes`."""
    from kanalyze.parallel.range_export import RANGE_BYTES_ENV
    from kanalyze.parallel.ranges import Unstitchable
    from kanalyze.spark import exchanges, pipeline, range_stage

    def refuse(*a, **kw):  # noqa: ANN002, ANN003, ANN202 - a stitch that takes nothing
        raise Unstitchable("a test's refusal")

    monkeypatch.setattr(range_stage, "stitch", refuse)
    monkeypatch.setenv(RANGE_BYTES_ENV, "65536")  # several ranges, so the stitch is asked
    seen: list[list[str]] = []
    build = pipeline.build
    monkeypatch.setattr(pipeline, "build", lambda *a, **kw: _noted(build(*a, **kw), seen))
    with caplog.at_level("WARNING", logger="kanalyze.spark"):
        df = exchanges(spark, str(LONG_CAPTURE), decode_bodies=False)
    assert df.count() == 93  # the shuffle path's rows
    assert seen and len(seen[0]) == 1 and "a test's refusal" in seen[0][0]
    assert [r.getMessage() for r in caplog.records if r.name == "kanalyze.spark"] == seen[0]


def _noted(t, seen: list[list[str]]):  # noqa: ANN001, ANN202
    seen.append(list(t.notes))
    return t


DATASOURCE_SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .getOrCreate())
n = spark.read.format("kafka-pcap").option("decode", "false").load(sys.argv[1]).count()
print("rows", n)
spark.stop()
"""


@pytest.mark.slow  # a new Python process and JVM: ~25 s on an idle 2-core machine
def test_datasource_in_a_fresh_session_after_editable_install(tmp_path):
    """The README's editable install (`--config-settings editable_mode=compat`): a new Python
    process, a new session, no `register()` call, run outside the repository. When pip cannot
    build here (offline, no `wheel`), the test installs what compat mode installs: a `.pth`
    naming the project root, which is what Spark's `pkgutil.iter_modules` lookup needs."""
    import os

    root = Path(__file__).resolve().parents[2]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pip = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "-e", str(root), "--config-settings", "editable_mode=compat"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    if pip.returncode != 0:
        site = subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        Path(site, "__editable__.kanalyze-compat.pth").write_text(f"{root}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py, SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run(
        [py, "-c", DATASOURCE_SCRIPT, str(LONG_CAPTURE)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "rows 93" in out.stdout, out.stderr[-2000:]


def test_api_names_survive_the_submodules():
    import kanalyze.spark
    import kanalyze.spark.tables  # noqa: F401 - a submodule import must not shadow the API

    assert callable(kanalyze.spark.build_tables) and callable(kanalyze.spark.exchanges)


@pytest.mark.parametrize("table", [
    "exchanges", "partitions", "connections", "files", "aggregates/api_latency",
    "aggregates/partition_hw", "aggregates/client_topic_usage", "aggregates/errors"])
def test_tasks_write_the_tables_spark_would_write(spark, written, table):
    """On a local master the range tasks write `exchanges` and `partitions` themselves and the
    driver `connections` and `files` (pyarrow): the same rows, Spark schema, partition
    directories and Parquet types as Spark's own writer."""
    ours, theirs = written["direct"] / table, written["spark"] / table
    a, b = spark.read.parquet(str(ours)), spark.read.parquet(str(theirs))
    assert a.schema == b.schema
    rows = sorted(map(repr, a.collect()))
    assert rows == sorted(map(repr, b.collect()))
    assert len(rows) > 0
    assert {p.parent.relative_to(ours) for p in ours.rglob("*.parquet")} == {
        p.parent.relative_to(theirs) for p in theirs.rglob("*.parquet")}
    mine = pq.read_schema(next(ours.rglob("*.parquet")))
    spark_s = pq.read_schema(next(theirs.rglob("*.parquet")))
    assert [(f.name, f.type) for f in mine] == [(f.name, f.type) for f in spark_s]


@pytest.fixture(scope="module")
def written(spark, runs, tmp_path_factory):
    """The same inputs (a topic-id capture among them: names filled from Metadata) written
    by the tasks and the driver (the range path's default on a local master) and by Spark
    (rows kept in Spark's cache)."""
    from kanalyze.spark.pipeline import run_pipeline
    from kanalyze.spark.range_stage import STAGE_ENV

    base = tmp_path_factory.mktemp("written")
    inputs = [str(runs["base"] / "caps" / "long.pcap"), str(SASL),
              str(LONG_CAPTURE.parent / "replication" / "mixed_ids.pcap")]
    direct = run_pipeline(spark, inputs, str(base / "direct"), with_bodies=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STAGE_ENV, "0")  # rows in Spark's cache, written by Spark
        by_spark = run_pipeline(spark, inputs, str(base / "spark"), with_bodies=True)
    assert direct.counts == by_spark.counts
    assert direct.counts["partitions"] > 0
    return {"direct": base / "direct", "spark": base / "spark"}


def _fact(**kw):
    from kanalyze.spark.schemas import PARTITION_FIELDS

    return {**dict.fromkeys(PARTITION_FIELDS), "topic": "t", "partition": 0, **kw}


def test_partition_rows_match_spark_partitions_table(spark):
    """The tasks' pyarrow partition facts (`arrow_partitions`) equal Spark's
    `partitions_table` on the same exchanges: LEO rules, names filled from the topics table,
    facts without an offset and exchanges without facts dropped."""
    import pyarrow as pa

    from kanalyze.spark.arrow_partitions import PARTITIONS_SCHEMA, partition_rows
    from kanalyze.spark.schemas import EXCHANGE_SCHEMA
    from kanalyze.spark.tables import partitions_table

    def ex(api, parts, replica=None, ts=1_700_000_000_000_000_000):
        row = dict.fromkeys(EXCHANGE_SCHEMA.names)
        row.update(api=api, partitions=parts, replica_id=replica, request_last_ns=ts,
                   conn_id="c", hour=3)
        return row

    rows = [
        ex("Produce", [_fact(error_code=0, base_offset=10, record_count=5),
                       _fact(error_code=6, base_offset=10, record_count=5),
                       _fact(error_code=None, base_offset=7, record_count=1),
                       _fact(error_code=0, base_offset=-1, record_count=1),
                       _fact(error_code=0)]),  # no offset at all: dropped
        ex("Fetch", [_fact(fetch_offset=40, high_watermark=50)], replica=1),
        ex("Fetch", [_fact(topic=None, topic_id="id-a", fetch_offset=3, high_watermark=9),
                     _fact(topic=None, topic_id="id-b", high_watermark=1)], replica=-1),
        ex("ListOffsets", [_fact(offset=12)], ts=None),
        ex("Metadata", []),
        ex("Metadata", None),
    ]
    table = pa.Table.from_pylist(rows, schema=EXCHANGE_SCHEMA)
    names = {"id-a": "topic-a"}
    ours = partition_rows(table, names)
    topics = spark.createDataFrame(list(names.items()), "topic_id STRING, topic_name STRING")
    theirs = partitions_table(spark.createDataFrame(table), topics)
    assert theirs.columns == PARTITIONS_SCHEMA.names
    want = sorted(map(repr, (tuple(r) for r in theirs.collect())))
    got = sorted(map(repr, (tuple(r.values()) for r in ours.to_pylist())))
    assert [r["leo"] for r in ours.to_pylist()] == [15, None, None, None, 40, None, None, None]
    assert {r["topic"] for r in ours.to_pylist()} == {"t", "topic-a", None}
    assert len(got) == 8
    assert got == want


def test_driver_aggregates_match_spark(spark, tmp_path):
    """Every aggregate computed on the driver (`driver_aggregates`) equals Spark's
    (`tables.aggregates`) on hand-made rows: LEO-only and null-topic groups (a full outer
    join never matches null keys), negative or missing HWs, missing times, error codes,
    repeated and half-null (conn, correlation) pairs, latency percentiles of 11 values (exact
    in Spark too below ~5,000), groups without a latency."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kanalyze.spark.arrow_partitions import PARTITIONS_SCHEMA
    from kanalyze.spark.driver_aggregates import (
        api_latency,
        client_topic_usage,
        errors,
        partition_hw,
    )
    from kanalyze.spark.driver_tables import write_table
    from kanalyze.spark.schemas import EXCHANGE_SCHEMA
    from kanalyze.spark.tables import AGGREGATES, aggregates

    t0 = 1_700_000_000_000_000_000

    def fact(topic, part, hw=None, ns=None, **kw):
        row = dict.fromkeys(PARTITIONS_SCHEMA.names)
        ts = None if ns is None else t0 + ns
        row.update(topic=topic, partition=part, high_watermark=hw, ts_ns=ts, api="Fetch",
                   client_id="c", ts=None if ts is None else
                   pa.scalar(ts // 1000, pa.timestamp("us", tz="UTC")).as_py(), **kw)
        return row

    parts = pa.Table.from_pylist([
        fact("a", 0, 10, 3_000_000, last_stable_offset=9), fact("a", 0, 12, 1_000_000),
        fact("a", 0, 20, 7_500_000, log_start_offset=2), fact("a", 0, -1, 9_000_000),
        fact("a", 0, 30, None), fact("a", 1, None, 5, leo=44), fact("a", 1, None, 6, leo=40),
        fact("b", 0, 5, 8), fact(None, 0, 1, 9), fact(None, 0, None, 9, leo=3),
        fact("a", 0, None, 10, leo=99),
        fact("a", 0, None, 4, error_code=6), fact("a", 1, None, 2, error_code=6),
        fact("b", 1, None, 3, error_code=6), fact("b", 0, None, 4, error_code=0),
        fact("c", 2, None, 5, error_code=None, leo=1),
        # client_topic_usage: distinct (conn, correlation) pairs and partitions, null parts
        fact("u", 0, None, 11, conn_id="k1", correlation_id=7, record_count=3,
             records_bytes=70, client="10.0.0.1:5000"),
        fact("u", 1, None, 12, conn_id="k1", correlation_id=7, record_count=2,
             client="10.0.0.1:5000", error_code=3),
        fact("u", 1, None, 13, conn_id="k2", correlation_id=7, client="10.0.0.1:5000"),
        fact("u", 2, None, 14, conn_id=None, correlation_id=8, client="10.0.0.1:5000"),
        fact("u", None, None, 15, conn_id="k3", correlation_id=None, client="10.0.0.1:5000"),
        fact("u", 0, None, 16, conn_id=None, correlation_id=None, client=None),
    ], schema=PARTITIONS_SCHEMA)
    ex = dict.fromkeys(EXCHANGE_SCHEMA.names)

    def call(api, version, status, ms, **kw):  # api_latency: binary fractions sum exactly
        return {**ex, "api": api, "api_version": version, "broker": "b:9092", "status": status,
                "latency_ms": ms, "request_size": 100, **kw}

    exchanges = pa.Table.from_pylist([
        {**ex, "api": "Produce", "client_id": "p", "error_code": 2},
        {**ex, "api": "Produce", "client_id": "p", "error_code": 0},
        {**ex, "api": "Metadata", "client_id": None, "error_code": None},
        *[call("Fetch", 12, "ok", ms, response_size=10 * i, error_code=0,
               partition_error_count=i % 3) for i, ms in
          enumerate([0.5, 8.25, 1.0, 0.25, 2.0, 64.0, 0.5, 3.75, 1.5, 0.125, 16.0])],
        call("Fetch", 12, "no_response", None), call("Fetch", 11, "no_response", None),
        call("Fetch", 11, "ok", 4.0, error_code=None, partition_error_count=None),
        call("Fetch", 11, "ok", 2.5, broker=None, error_code=7),
    ], schema=EXCHANGE_SCHEMA)
    theirs = aggregates(spark.createDataFrame(exchanges), spark.createDataFrame(parts),
                        AGGREGATES)
    ours = {"partition_hw": partition_hw(parts), "errors": errors(exchanges, parts),
            "client_topic_usage": client_topic_usage(parts), "api_latency": api_latency(exchanges)}
    assert set(ours) == set(theirs) == set(AGGREGATES)  # the driver computes every one
    for name, df in theirs.items():
        assert df.columns == ours[name].column_names
        want = sorted(map(repr, df.toArrow().to_pylist()))
        got = sorted(map(repr, ours[name].to_pylist()))
        assert len(got) >= 3
        assert got == want, name
        # and the files: the Parquet types Spark's writer gives, read back alike by Spark
        write_table(ours[name], str(tmp_path / "ours" / name), "overwrite")
        df.coalesce(1).write.parquet(str(tmp_path / "theirs" / name))
        mine, spark_s = (pq.read_schema(next((tmp_path / side / name).glob("*.parquet")))
                         for side in ("ours", "theirs"))
        assert [(f.name, f.type) for f in mine] == [(f.name, f.type) for f in spark_s], name
        assert (spark.read.parquet(str(tmp_path / "ours" / name)).schema
                == spark.read.parquet(str(tmp_path / "theirs" / name)).schema), name


def test_task_sort_is_spark_order_without_a_warning():
    """The tasks sort their rows as Spark's sortWithinPartitions (ascending, nulls first) and
    print nothing: pyarrow 25 warns (FutureWarning, on the user's terminal) for the global
    null placement the first version passed."""
    import warnings

    import pyarrow as pa

    from kanalyze.spark.direct_write import nulls_first_order

    keys = pa.table({"dt": [2, None, 1, 1], "hour": [0, 5, 3, None], "ts": [9, 1, None, 4]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        order = nulls_first_order(keys).to_pylist()
    assert order == [1, 3, 2, 0]
