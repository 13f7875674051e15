"""Spark's Python Data Source auto-registration hook: `spark.read.format("kafka-pcap")`."""

from kanalyze.spark.datasource import KafkaPcapDataSource as DefaultSource

__all__ = ["DefaultSource"]
