"""`spark.read.format("kafka-pcap")`: captures as a Spark table.

    spark.read.format("kafka-pcap").load("captures/")            # exchanges
    spark.read.format("kafka-pcap").option("table", "segments").load(path)

Tables (option ``table``):

* ``exchanges`` (default): one row per exchange, the `exchanges` table of the
  pipeline. A Data Source cannot shuffle, so it uses *slices*: K tasks each
  read every input of a capture group in capture order and keep the
  connections with ``crc32(key) % K == k``. Correct across rotated files and
  byte ranges; each input is read K times (option ``slices``, default the
  driver's CPU count). For big inputs use `kanalyze spark` / `run_pipeline`.
* ``segments``: stage-1 rows (each TCP segment's numbers and payload, without link or IP
  headers, with its connection key, file rank and frame number), one task per packed
  group of work units.
* ``units``: internal; counts the records of candidate byte ranges.

Other options: ``paths`` (several inputs, comma-separated or a JSON list),
``splitBytes``, ``port`` (broker ports, comma-separated), ``decode``
(``false``: header-only rows, much faster), ``captureId`` (one capture group
for all inputs), ``plan`` (internal, JSON).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kanalyze.engine import EngineOptions
from kanalyze.spark import schemas as R
from kanalyze.spark.decode import decode_slice
from kanalyze.spark.extract import extract
from kanalyze.spark.units import SPLIT_BYTES, Plan, RangeResult, list_inputs, plan_local, walk_range

UNITS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("index", pa.int32()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("count", pa.int64()),
        ("stop", pa.int64()),
        ("whole_file_needed", pa.bool_()),
        ("error", pa.string()),
    ]
)


def _paths(options: dict) -> list[str]:
    raw = options.get("paths")
    out: list[str] = []
    if raw:
        out = json.loads(raw) if raw.lstrip().startswith("[") else [p for p in raw.split(",") if p]
    if options.get("path"):
        out.append(options["path"])
    return out


def _ports(options: dict) -> frozenset[int]:
    raw = options.get("port") or options.get("ports") or ""
    return frozenset(int(p) for p in raw.split(",") if p.strip())


class KafkaPcapDataSource(DataSource):
    """Kafka exchanges (or stage-1 segments) from pcap/pcapng files."""

    @classmethod
    def name(cls) -> str:
        return "kafka-pcap"

    def schema(self) -> str:
        table = self.options.get("table", "exchanges").lower()
        if table == "segments":
            return R.spark_ddl(R.SEGMENT_SCHEMA)
        if table == "units":
            return R.spark_ddl(UNITS_SCHEMA)
        if table == "exchanges":
            return R.spark_ddl(R.EXCHANGE_SCHEMA)
        raise ValueError(f"kafka-pcap: unknown table {table!r} (exchanges, segments)")

    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001
        return KafkaPcapReader(dict(self.options))


class KafkaPcapReader(DataSourceReader):
    def __init__(self, options: dict) -> None:
        self.table = options.get("table", "exchanges").lower()
        self.options = options
        self.decode = options.get("decode", "true").lower() != "false"
        self.ports = _ports(options)

    def _plan(self) -> dict:
        if self.options.get("plan"):
            return json.loads(self.options["plan"])
        paths = _paths(self.options)
        if not paths:
            raise ValueError("kafka-pcap: no input: use .load(path) or .option('paths', ...)")
        split = int(self.options.get("splitbytes", SPLIT_BYTES))
        par = int(self.options.get("slices", os.cpu_count() or 2))
        plan = plan_local(list_inputs(paths), split, par, self.options.get("captureid"))
        return plan.to_dict()

    def partitions(self) -> list[InputPartition]:
        plan = self._plan()
        if self.table == "units":
            return [InputPartition((plan["files"][r], r, i, s, e)) for r, i, s, e in plan["ranges"]]
        if self.table == "segments":
            return [InputPartition((plan, p)) for p in plan["partitions"]] or [
                InputPartition((plan, []))
            ]
        slices = int(self.options.get("slices", os.cpu_count() or 2))
        return [InputPartition((plan, k, slices)) for k in range(slices)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        value = partition.value
        if self.table == "units":
            info_d, rank, index, start, end = value
            from kanalyze.spark.units import FileInfo

            info = FileInfo.from_dict(info_d)
            try:
                res = walk_range(info.path, info, start, end)
            except OSError as e:
                res = RangeResult(error=str(e))
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "rank": rank,
                        "index": index,
                        "start": start,
                        "end": end,
                        "count": res.count,
                        "stop": res.stop,
                        "whole_file_needed": res.whole_file_needed,
                        "error": res.error,
                    }
                ],
                schema=UNITS_SCHEMA,
            )
            return
        if self.table == "segments":
            plan_d, unit_ids = value
            yield from extract(Plan.from_dict(plan_d), unit_ids, self.ports)
            return
        plan_d, k, slices = value
        opts = EngineOptions(ports=self.ports)
        yield from decode_slice(Plan.from_dict(plan_d), k, slices, opts, self.decode)
