"""Structured Streaming over a directory that `tcpdump -C/-G` rotates into: exchanges are
appended to a Parquet table as they complete, with each connection's state carried across files.

    readStream binaryFile DIR    the new files of each micro-batch (paths only: the JVM never
                                 holds file contents)
    mapInArrow                   stage 1: every TCP segment of each new file, keyed by connection
                                 (numbers and payload only: `kanalyze.spark.payload`), but
                                 for the flows the file shows are not Kafka (begun and ended
                                 in it without a Kafka request: `_finished_non_kafka`)
    groupBy(capture, connection) Spark's state store holds, per connection, the pickled engine
     .applyInPandasWithState     (`ConnState`); each micro-batch feeds the connection's new
                                 packets in capture order and emits the exchanges that completed
    writeStream parquet          OUT/exchanges (the batch table's columns and partitions, by dt
                                 and hour), exactly once through
                                 the checkpoint

Why this state store: a connection's decoding state is the offline engine itself (reassembly
heaps, a partial frame, the requests waiting for answers), a pure-Python object whose size is the
data in flight, not the connection's history. Pickled into the group state it rides on Spark's
versioned, checkpointed state store, so a restarted query resumes each connection exactly where
the last committed micro-batch left it, with no store of our own to keep consistent.

Order: within a micro-batch a connection's packets are fed by (file's first packet time, file
path, frame): the capture order of a rotation chain, which is the order `kanalyze export` reads
those files in. Files are taken in arrival order (Spark lists new files by modification time),
so a file must appear whole, after the files it follows: tcpdump's `-z` post-rotate command can
move each closed file into the watched directory (`docs/spark.md`). Spark ignores names that
start with `.` or `_`, so a writer may also write `.name` and rename it.

A connection with no packet for `idle_timeout` seconds of wall-clock time is closed: requests
still unanswered become `no_response`, exactly as at the end of an offline run. Once the stream
has seen every file and the connections have gone idle, the table holds the exchanges of
`kanalyze export FILES...` over the same files.
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa

from kanalyze.capture import CaptureError, CaptureStats, Packet
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.flows import ACK, FIN, RST, SYN, FlowStats, decode_segment
from kanalyze.spark import schemas as R
from kanalyze.spark.payload import FROM_FIRST, RAW_LINKTYPE, kafka_hint, rebuild
from kanalyze.spark.payload import conn_key as payload_key
from kanalyze.spark.rows import RowBuilder, row_context, stable_conn_id
from kanalyze.spark.units import Plan, Unit, iter_unit, probe

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.state import GroupState

STATE_TAG = b"kanalyze-conn-1\n"  # a checkpoint from an incompatible version fails clearly
STATE_DDL = "state BINARY"
# the binaryFile source's fixed schema (a streaming source must be given one); only `path` is
# selected, so file contents are never read into the JVM
BINARY_FILE_DDL = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"

PACKET_SCHEMA = pa.schema(
    [
        ("capture_id", pa.string()),
        ("conn_key", pa.binary()),
        ("file", pa.string()),
        ("file_id", pa.string()),  # content identity: connection ids as in the batch tables
        ("file_first_ns", pa.int64()),
        ("file_no", pa.int64()),
        ("ts_ns", pa.int64()),
        # the TCP segment without link and IP headers (`kanalyze.spark.payload`): what crosses
        # the shuffle into the state step, as in the batch pipeline's stage 1
        ("flags", pa.int32()),
        ("seq", pa.int64()),
        ("ack", pa.int64()),
        ("cut", pa.int32()),
        ("data", pa.binary()),
    ]
)
NS_PER_HOUR = 3_600 * 10**9
CHECKPOINT_MARK = "kanalyze-stream.json"  # in the checkpoint: the layout that wrote it
# Spark's errors for a checkpoint whose state does not fit the query (names across versions)
STATE_MISMATCH = ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMP",
                  "StateSchemaNotCompatible", "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
                  "schema is not compatible", "from another kanalyze version")


class CheckpointError(ValueError):
    """A checkpoint written by another layout of the stream (its state or its rows): one line
    saying to start with a new checkpoint."""


def stream_layout() -> str:
    """What a checkpoint's state and output depend on: the state's tag and schema, the grouping
    key and the rows' schema. A change to any gives another value."""
    import hashlib

    parts = [STATE_TAG.decode(), STATE_DDL, "capture_id STRING, conn_key BINARY",
             R.spark_ddl(PACKET_SCHEMA), R.spark_ddl(R.EXCHANGE_SCHEMA)]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def check_checkpoint(checkpoint: str) -> None:
    """Before the query starts: a local checkpoint another stream layout wrote raises
    CheckpointError; a new one is marked with this layout. A checkpoint without the mark
    (older kanalyze) is left to Spark, whose state-schema errors `checkpoint_problem` turns
    into the same line. URIs are left to Spark too."""
    import json

    p = local_or_uri(checkpoint)
    if "://" in p:
        return
    mark = os.path.join(p, CHECKPOINT_MARK)
    if os.path.isfile(mark):
        try:
            with open(mark, encoding="utf-8") as f:
                got = json.loads(f.read()).get("layout")
        except (OSError, ValueError, AttributeError):
            got = None
        if got != stream_layout():
            raise CheckpointError(f"{checkpoint}: {_MESSAGE}")
        return
    if os.path.isdir(os.path.join(p, "offsets")):
        return  # written before the mark existed
    os.makedirs(p, exist_ok=True)
    with open(mark, "w", encoding="utf-8") as f:
        f.write(json.dumps({"layout": stream_layout()}) + "\n")


_MESSAGE = ("this checkpoint was written by another version of the kanalyze stream (its state "
            "or rows differ): start the stream with a new --checkpoint directory")


def checkpoint_problem(error: str, checkpoint: str) -> str | None:
    """The one line for a query that failed on an incompatible checkpoint, else None."""
    if any(tag in error for tag in STATE_MISMATCH):
        return f"{checkpoint}: {_MESSAGE}"
    return None
ORDER = ["file_first_ns", "file", "file_no"]  # capture order of a rotation chain


def local_or_uri(path: str) -> str:
    """A path as Spark lists it (`file:/x`, `file:///x`, `hdfs://...`) as kanalyze opens it:
    local files as plain paths, other URIs unchanged."""
    if path.startswith("file:"):
        return unquote(urlparse(path).path)
    return path


# --------------------------------------------------------------------------- stage 1
def _finished_non_kafka(plan: Plan, opts: EngineOptions) -> set[bytes]:
    """The flows of the file that began in it (their first segment a SYN), ended in it (a RST,
    or a FIN each way) and never showed a plausible Kafka request (`payload.kafka_hint`, which
    also keeps every flow on a --port): no later file can make them Kafka, so they need not
    reach the state step. (A flow that continues into another file is kept: its request may
    come later, and its state must see every packet.)"""
    seen: dict[bytes, int] = {}  # key -> bits: 1 began with a SYN, 2 FIN from the first
    # endpoint, 4 FIN from the second, 8 RST, 16 a Kafka hint
    flows = FlowStats()
    ports, max_frame = frozenset(opts.ports), opts.max_frame
    for pkt in iter_unit(plan, plan.units[0], CaptureStats()):
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is None:
            continue
        key, from_first = payload_key(seg)
        bits = seen.get(key)
        if bits is None:
            bits = 1 if seg.flags & (SYN | ACK) == SYN else 0
        if seg.flags & FIN:
            bits |= 2 if from_first else 4
        if seg.flags & RST:
            bits |= 8
        if not bits & 16 and kafka_hint(seg, ports, max_frame):
            bits |= 16
        seen[key] = bits
    return {k for k, b in seen.items() if b & 17 == 1 and (b & 8 or b & 6 == 6)}


def file_packets(path: str, capture_id: str,
                 opts: EngineOptions | None = None) -> Iterator[pa.RecordBatch]:
    """Every TCP segment of one file as rows keyed by connection: its numbers and payload,
    not its link and IP headers; without the flows that began and ended in the file and are
    not Kafka (`_finished_non_kafka`: the file is read twice). A file that is not a capture
    gives no rows and one line on the task's stderr: the stream goes on."""
    info = probe(path, capture_id)
    cols: dict[str, list] = {f.name: [] for f in PACKET_SCHEMA}
    if info.error:
        sys.stderr.write(f"kanalyze: {path}: {info.error} (skipped)\n")
        return
    plan = Plan([info], [Unit(0)], [[0]])
    flows = FlowStats()
    try:
        drop = _finished_non_kafka(plan, opts or EngineOptions())
        for pkt in iter_unit(plan, plan.units[0], CaptureStats()):
            seg = decode_segment(pkt.linktype, pkt.data, flows)
            if seg is None:
                continue
            key, from_first = payload_key(seg)
            if key in drop:
                continue
            cols["capture_id"].append(capture_id)
            cols["conn_key"].append(key)
            cols["file"].append(path)
            cols["file_id"].append(info.file_id)
            cols["file_first_ns"].append(info.first_ts_ns)
            cols["file_no"].append(pkt.file_no)
            cols["ts_ns"].append(pkt.ts_ns)
            cols["flags"].append(seg.flags | FROM_FIRST if from_first else seg.flags)
            cols["seq"].append(seg.seq)
            cols["ack"].append(seg.ack)
            cols["cut"].append(seg.cut)
            cols["data"].append(bytes(seg.payload))
            if len(cols["data"]) >= R.BATCH_ROWS:
                yield pa.RecordBatch.from_pydict(cols, schema=PACKET_SCHEMA)
                cols = {f.name: [] for f in PACKET_SCHEMA}
    except CaptureError as e:  # damage ends the file, as offline; what was read is kept
        sys.stderr.write(f"kanalyze: {path}: {e}\n")
    if cols["data"]:
        yield pa.RecordBatch.from_pydict(cols, schema=PACKET_SCHEMA)


def extract_new_files(capture_id: str,  # noqa: ANN201 - a mapInArrow function
                      opts: EngineOptions | None = None):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for path in b.column("path").to_pylist():
                yield from file_packets(local_or_uri(path), capture_id, opts)

    return run


# --------------------------------------------------------------------------- stage 2 state
class ConnState:
    """One connection (4-tuple, all its incarnations) between micro-batches: the offline engine,
    the row builder with the topic names it learned, and the files its packets came from
    (`Packet.no` is `index in files << 40 | frame`, as in the batch pipeline)."""

    def __init__(
        self,
        capture_id: str,
        opts: EngineOptions,
        decode_bodies: bool = True,
        with_bodies: bool = False,
    ) -> None:
        self.files: list[str] = []
        self.out: list[Exchange] = []
        self.engine = Engine(self.out.append, opts)
        self.builder = RowBuilder(
            self.files, capture_id, decode_bodies, row_context(), with_bodies=with_bodies
        )
        self.firsts: dict[int, tuple[str, int]] = {}  # incarnation -> (file id, frame) it began

    def feed(self, pdf: pd.DataFrame) -> list[dict]:
        """Feed new packets (any order: sorted here into capture order); the rows of the
        exchanges that completed."""
        pdf = pdf.sort_values(ORDER, kind="stable")
        index = {f: i for i, f in enumerate(self.files)}
        eng = self.engine
        rows: list[dict] = []
        for key, file, fid, fno, ts, flg, sq, ak, cut, data in zip(
            pdf["conn_key"], pdf["file"], pdf["file_id"], pdf["file_no"], pdf["ts_ns"],
            pdf["flags"], pdf["seq"], pdf["ack"], pdf["cut"], pdf["data"], strict=True,
        ):  # fmt: skip
            rank = index.get(file)
            if rank is None:
                rank = index[file] = len(self.files)
                self.files.append(file)
            before = eng.next_id
            raw = rebuild(key, int(flg), int(sq), int(ak), int(cut), data)
            eng.feed(Packet((rank << R.FRAME_BITS) | int(fno), int(ts), RAW_LINKTYPE, raw, rank,
                            int(fno)))  # fmt: skip
            if eng.next_id != before:  # this packet began a new incarnation (or held flow)
                self.firsts[before] = (fid, int(fno))
            if self.out:
                self._rows(rows)
        return rows

    def close(self) -> list[dict]:
        """End of the connection (idle): pending requests become `no_response`, as offline."""
        self.engine.close()
        rows: list[dict] = []
        self._rows(rows)
        return rows

    def _rows(self, rows: list[dict]) -> None:
        b = self.builder
        for ex in self.out:
            c = ex.conn
            first = self.firsts.get(c.id)
            cid = stable_conn_id(*first, c.client, c.broker) if first else None
            rows.append(b.row(ex, cid))  # type: ignore[arg-type]
        self.out.clear()

    def dumps(self) -> bytes:
        return STATE_TAG + pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(blob: bytes) -> ConnState:
        if not blob.startswith(STATE_TAG):
            raise RuntimeError(
                "the stream's checkpoint holds connection state from another kanalyze version: "
                "start the stream with a new --checkpoint directory"
            )  # `checkpoint_problem` finds this text in the failed query's error
        return pickle.loads(blob[len(STATE_TAG) :])  # noqa: S301 - our own checkpoint


@dataclass(frozen=True, slots=True)
class StreamConfig:
    idle_timeout_s: float = 600.0
    opts: EngineOptions = field(default_factory=EngineOptions)
    decode_bodies: bool = True
    with_bodies: bool = False


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pa.RecordBatch.from_pylist(rows, schema=R.EXCHANGE_SCHEMA).to_pandas()


def make_step(config: StreamConfig):  # noqa: ANN201 - an applyInPandasWithState function
    idle_ms = max(1, int(config.idle_timeout_s * 1000))

    def step(
        key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        # pyspark's worker concatenates our frames, whose all-null columns (no error code, ...)
        # make pandas 2 warn on every batch
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)
        if state.hasTimedOut:
            conn = ConnState.loads(state.get[0])
            state.remove()
            rows = conn.close()
        else:
            import pandas as pd

            conn = (
                ConnState.loads(state.get[0])
                if state.exists
                else ConnState(key[0], config.opts, config.decode_bodies, config.with_bodies)
            )
            rows = conn.feed(pd.concat(list(pdfs), ignore_index=True))
            state.update((conn.dumps(),))
            state.setTimeoutDuration(idle_ms)
        if rows:
            yield _frame(rows)

    return step


# --------------------------------------------------------------------------- the query
def exchanges_stream(
    spark: SparkSession,
    directory: str,
    config: StreamConfig | None = None,
    capture_id: str | None = None,
    max_files_per_trigger: int | None = None,
) -> DataFrame:
    """The streaming DataFrame of exchanges over the files appearing in `directory`."""
    config = config or StreamConfig()
    cap = capture_id if capture_id is not None else directory.rstrip("/")
    reader = spark.readStream.format("binaryFile").schema(BINARY_FILE_DDL)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    paths = reader.load(directory).select("path")
    packets = paths.mapInArrow(extract_new_files(cap, config.opts),
                               R.spark_ddl(PACKET_SCHEMA))
    ex = packets.groupBy("capture_id", "conn_key").applyInPandasWithState(
        make_step(config),
        R.spark_ddl(R.EXCHANGE_SCHEMA),
        STATE_DDL,
        "append",
        "ProcessingTimeTimeout",
    )
    # `dt` and `hour` (UTC, of the request, else the response) are computed again by Spark from
    # the exact ns times: a real projection, which the file sink's sort by partition columns
    # needs (the Python operator's rows are columnar views: ClassCastException ColumnarBatchRow)
    from pyspark.sql import functions as F

    hours = F.floor(F.coalesce("request_last_ns", "response_last_ns") / F.lit(NS_PER_HOUR))
    return ex.withColumns(
        {
            "dt": F.date_from_unix_date(F.floor(hours / 24).cast("int")),
            "hour": F.pmod(hours, F.lit(24)).cast("tinyint"),
        }
    )


def start_stream(
    spark: SparkSession,
    directory: str,
    out_dir: str,
    *,
    checkpoint: str | None = None,
    config: StreamConfig | None = None,
    trigger_s: float = 10.0,
    capture_id: str | None = None,
    max_files_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the query: exchanges appended to `out_dir`/exchanges (Parquet, by `dt` and `hour`),
    state and progress in `checkpoint` (default `out_dir`/_checkpoint). Returns the running
    query. Raises CheckpointError for a checkpoint another layout of the stream wrote
    (`check_checkpoint`)."""
    if not is_directory(directory):
        raise FileNotFoundError(f"{directory}: not a directory to watch")
    out = out_dir.rstrip("/")
    checkpoint = checkpoint or f"{out}/_checkpoint"
    check_checkpoint(checkpoint)
    df = exchanges_stream(spark, directory, config, capture_id, max_files_per_trigger)
    return (
        df.writeStream.format("parquet")
        .option("path", f"{out}/exchanges")
        .option("checkpointLocation", checkpoint)
        .partitionBy("dt", "hour")
        .outputMode("append")
        .trigger(processingTime=f"{trigger_s} seconds")
        .queryName("kanalyze-exchanges")
        .start()
    )


def is_directory(path: str) -> bool:
    """Local directories are checked here; URIs are left to Spark."""
    p = local_or_uri(path)
    return "://" in p or os.path.isdir(p)
