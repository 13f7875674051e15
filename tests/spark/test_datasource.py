"""`spark.read.format("kafka-pcap")`: exchanges by slices, stage-1 segments."""

from __future__ import annotations

import pytest

from kanalyze.capture import read_capture
from kanalyze.flows import FlowStats, decode_segment
from tests.spark.support import LONG_CAPTURE, frame_offsets, offline_keys, rotate, spark_keys

pytestmark = pytest.mark.spark


def test_load_rotated_directory_gives_the_offline_exchanges(spark, tmp_path):
    pieces = rotate(LONG_CAPTURE, tmp_path / "rot", 25)
    df = spark.read.format("kafka-pcap").option("slices", "3").load(str(tmp_path / "rot"))
    rows = [r.asDict() for r in df.collect()]
    ordered = sorted(pieces, key=lambda p: p.name.split("-", 1)[1])
    assert spark_keys(rows, frame_offsets(ordered)) == offline_keys(LONG_CAPTURE)


def test_sql_over_the_source(spark):
    spark.read.format("kafka-pcap").option("decode", "false").load(
        str(LONG_CAPTURE)
    ).createOrReplaceTempView("ex")
    got = {
        r["api"]: r["n"] for r in spark.sql("select api, count(*) n from ex group by api").collect()
    }
    expected: dict[str, int] = {}
    for k, n in offline_keys(LONG_CAPTURE).items():
        from dissectors.apis import API_NAMES

        expected[API_NAMES[k[2]]] = expected.get(API_NAMES[k[2]], 0) + n
    assert got == expected


def test_segments_table_holds_every_tcp_packet(spark):
    df = (
        spark.read.format("kafka-pcap")
        .option("table", "segments")
        .option("splitBytes", "8192")
        .load(str(LONG_CAPTURE))
    )
    tcp = sum(
        1
        for p in read_capture(str(LONG_CAPTURE))
        if decode_segment(p.linktype, p.data, FlowStats())
    )
    assert df.where("kind = 0").count() == tcp
    assert df.where("kind = 1").count() >= 5  # one statistics row per byte range


def test_auto_registration_module():
    from pyspark.sql.datasource import DataSource

    import pyspark_kafka_pcap

    assert issubclass(pyspark_kafka_pcap.DefaultSource, DataSource)
    assert pyspark_kafka_pcap.DefaultSource.name() == "kafka-pcap"
