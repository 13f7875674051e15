"""Structured Streaming over a directory that rotated files land in: once the stream has seen
every file and the connections have gone idle, the table holds exactly `kanalyze export`'s
exchanges; exchanges appear while files are still arriving; a connection's state survives
being pickled between micro-batches."""

from __future__ import annotations

import os
import pickle
import shutil
import time
from pathlib import Path

import pytest

from kanalyze.capture import read_capture
from kanalyze.cli import main
from tests.spark.support import LONG_CAPTURE, frame_offsets, offline_keys, rotate, spark_keys

pytest.importorskip("pandas", reason="the Spark extra is not installed")
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402

from kanalyze.engine import EngineOptions  # noqa: E402
from kanalyze.flows import FlowStats, decode_segment  # noqa: E402
from kanalyze.spark import schemas as R  # noqa: E402
from kanalyze.spark.payload import FROM_FIRST  # noqa: E402
from kanalyze.spark.payload import conn_key as payload_key  # noqa: E402
from kanalyze.spark.streaming import (  # noqa: E402
    ConnState,
    StreamConfig,
    file_packets,
    local_or_uri,
    start_stream,
)

pytestmark = pytest.mark.spark
EXPECTED = 93  # exchanges of LONG_CAPTURE (test_pipeline checks the same count)
DEADLINE_S = 240  # the whole stream, on a loaded 2-core machine; a hang fails, never waits
IDLE_S = 15


def _pieces(tmp_path: Path) -> list[Path]:
    """The capture rotated into 8 files, in capture order."""
    pieces = rotate(LONG_CAPTURE, tmp_path / "pieces", 40)
    return sorted(pieces, key=lambda p: p.name.split("-", 1)[1])


def _publish(piece: Path, watched: Path) -> Path:
    """Appear whole: written under a hidden name (Spark lists none), then renamed."""
    hidden = watched / f".{piece.name}"
    shutil.copy(piece, hidden)
    os.rename(hidden, watched / piece.name)
    return watched / piece.name


def _count(spark, table: Path) -> int:
    if not (table / "_spark_metadata").is_dir():
        return 0
    return spark.read.schema(R.spark_ddl(R.EXCHANGE_SCHEMA)).parquet(str(table)).count()


def _wait(spark, query, table: Path, expected: int, deadline: float, progress: dict) -> None:
    n = 0
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        progress.update((p["batchId"], p) for p in query.recentProgress)
        n = _count(spark, table)
        if n >= expected:
            return
        time.sleep(0.5)
    pytest.fail(f"the stream did not get there in time ({n} exchanges)")


@pytest.mark.slow
def test_stream_over_rotating_directory_equals_offline_export(spark, tmp_path):
    pieces = _pieces(tmp_path)
    assert len(pieces) >= 6
    watched = tmp_path / "watched"
    watched.mkdir()
    out = tmp_path / "out"
    table = out / "exchanges"
    deadline = time.monotonic() + DEADLINE_S
    # one file per micro-batch, as when tcpdump closes one file per rotation; the idle timeout
    # is wall-clock time, so it must outlast a micro-batch on a loaded machine
    config = StreamConfig(idle_timeout_s=IDLE_S)
    query = start_stream(
        spark, str(watched), str(out), config=config, trigger_s=0.5, max_files_per_trigger=1
    )
    progress: dict[int, dict] = {}
    compact = "spark.sql.streaming.fileSink.log.compactInterval"
    spark.conf.set(compact, "1000")  # the sink keeps one log file per micro-batch (read below)
    try:
        published = []
        for p in pieces:  # the files arrive while the stream runs
            published.append(_publish(p, watched))
            time.sleep(0.5)
        _wait(spark, query, table, EXPECTED, deadline, progress)
        time.sleep(1.5)  # a late duplicate would show in the comparison below
        progress.update((p["batchId"], p) for p in query.recentProgress)
    finally:
        query.stop()
        spark.conf.unset(compact)
    rows = [r.asDict() for r in spark.read.parquet(str(table)).collect()]
    assert spark_keys(rows, frame_offsets(published)) == offline_keys(LONG_CAPTURE)
    assert len({r["request_file"] for r in rows}) > len(published) // 2
    # exchanges were written while files were still to be read, not all at the end
    reads = [b for b, p in sorted(progress.items()) if p["numInputRows"] > 0]
    assert sum(progress[b]["numInputRows"] for b in reads) == len(pieces)
    assert min(_batches_that_wrote(table)) < reads[-1]


def _batches_that_wrote(table: Path) -> list[int]:
    """Micro-batches whose entry in the file sink's log lists Parquet files."""
    log = table / "_spark_metadata"
    return [
        int(f.name)
        for f in log.iterdir()
        if f.name.isdigit() and len(f.read_text().strip().splitlines()) > 1
    ]


def test_cli_stream_until_drained(spark, tmp_path, capsys):
    pieces = _pieces(tmp_path)
    watched = tmp_path / "watched"
    watched.mkdir()
    published = [_publish(p, watched) for p in pieces]
    out = tmp_path / "out"
    rc = main(["spark", "--stream", str(watched), "--out", str(out), "--idle-timeout", "1",
               "--trigger", "0.5", "--until-drained", "--duration", str(DEADLINE_S)])  # fmt: skip
    assert rc == 0
    assert capsys.readouterr().out.strip() == f"{EXPECTED} exchanges in {out}/exchanges"
    rows = [r.asDict() for r in spark.read.parquet(str(out / "exchanges")).collect()]
    assert spark_keys(rows, frame_offsets(published)) == offline_keys(LONG_CAPTURE)
    assert (out / "_checkpoint" / "state").is_dir()  # the connections' state store
    # the same rows as the batch table of the same directory, connection ids included
    from kanalyze.spark import build_tables

    cols = ["conn_id", "client", "broker", "api_key", "correlation_id", "status", "request_file",
            "request_frame", "response_file", "response_frame", "dt", "hour", "error_code",
            "topics", "latency_ms"]  # fmt: skip
    t = build_tables(spark, [str(watched)])
    try:
        batch = sorted(map(tuple, t.exchanges.select(*cols).collect()), key=repr)
    finally:
        t.unpersist()
    stream = sorted((tuple(r[c] for c in cols) for r in rows), key=repr)
    assert stream == batch


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stream", "a", "b"], "--stream watches one directory, got 2 paths"),
        (["--stream", "a/x.pcap"], "a/x.pcap: --stream needs an existing directory"),
        (["a/x.pcap", "--until-drained"], "--until-drained needs --stream"),
    ],
)
def test_bad_stream_arguments_are_one_line_and_exit_2(
    argv, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.pcap").write_bytes(LONG_CAPTURE.read_bytes())
    assert main(["spark", *argv, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"kanalyze: error: {message}\n"


def _packets_by_connection(pieces: list[Path]) -> dict[bytes, list[dict]]:
    flows = FlowStats()
    out: dict[bytes, list[dict]] = {}
    for rank, piece in enumerate(pieces):
        for pkt in read_capture(str(piece)):
            seg = decode_segment(pkt.linktype, pkt.data, flows)
            if seg is None:
                continue
            key, from_first = payload_key(seg)  # payload only, as file_packets ships it
            out.setdefault(key, []).append(
                {"conn_key": key, "file": str(piece), "file_id": f"id-{rank}",
                 "file_first_ns": rank, "file_no": pkt.file_no, "ts_ns": pkt.ts_ns,
                 "flags": seg.flags | FROM_FIRST if from_first else seg.flags, "seq": seg.seq,
                 "ack": seg.ack, "cut": seg.cut, "data": bytes(seg.payload)}
            )  # fmt: skip
    return out


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_connection_state_survives_pickling_between_micro_batches(tmp_path, chunk):
    """Without Spark: each connection's packets fed in chunks (shuffled within a chunk, as a
    micro-batch delivers them), the state pickled after each, give the offline exchanges."""
    pieces = _pieces(tmp_path)
    rows = []
    for packets in _packets_by_connection(pieces).values():
        state = ConnState("cap", EngineOptions(), False).dumps()
        for i in range(0, len(packets), chunk):
            conn = ConnState.loads(state)
            rows += conn.feed(pd.DataFrame(packets[i : i + chunk][::-1]))
            state = conn.dumps()
        rows += ConnState.loads(state).close()
    assert spark_keys(rows, frame_offsets(pieces)) == offline_keys(LONG_CAPTURE)


def test_state_from_another_version_is_a_clear_error():
    with pytest.raises(RuntimeError, match="new --checkpoint"):
        ConnState.loads(pickle.dumps({"old": "layout"}))


@pytest.mark.parametrize(
    ("listed", "opened"),
    [("file:/tmp/a%20b/x.pcap", "/tmp/a b/x.pcap"), ("file:///tmp/x.pcap", "/tmp/x.pcap"),
     ("hdfs://nn/caps/x.pcap", "hdfs://nn/caps/x.pcap"), ("/tmp/x.pcap", "/tmp/x.pcap")],
)  # fmt: skip
def test_spark_listed_paths_are_opened_locally_or_as_uris(listed, opened):
    assert local_or_uri(listed) == opened


def test_a_file_that_is_not_a_capture_is_skipped_with_one_line(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a capture\n")
    assert list(file_packets(str(notes), "cap")) == []
    err = capsys.readouterr().err
    assert err.startswith(f"kanalyze: {notes}: ") and err.endswith("(skipped)\n")
    batches = list(file_packets(str(LONG_CAPTURE), "cap"))
    packets = list(read_capture(str(LONG_CAPTURE)))
    assert sum(b.num_rows for b in batches) == len(packets)  # every packet is TCP here
    # only the TCP payloads cross the shuffle, not the link and IP headers
    flows = FlowStats()
    payload = sum(len(decode_segment(p.linktype, p.data, flows).payload) for p in packets)
    assert sum(len(d) for b in batches for d in b.column("data").to_pylist()) == payload


def _mixed_capture(path: Path) -> tuple[set[bytes], bytes]:
    """LONG_CAPTURE with HTTP conversations interleaved: complete ones (SYN .. FIN both ways,
    or RST) and one found mid-stream (no SYN: it may go on into the next file). Returns the
    complete ones' keys and the mid-stream one's."""
    from kanalyze.capture.writer import PcapWriter
    from tests.spark.test_inputs import _eth_tcp

    packets = list(read_capture(str(LONG_CAPTURE)))
    w = PcapWriter(str(path), packets[0].linktype)
    a, b = bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2])
    done: set[bytes] = set()
    req, resp = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\nhello"
    for i, p in enumerate(packets):
        w.write(p.ts_ns, bytes(p.data))
        if i % 20 == 5:  # a whole conversation between two Kafka packets
            port = 40000 + i
            rst = i % 40 == 5
            ts = p.ts_ns
            for frame in (
                _eth_tcp(a, port, b, 80, 100, 0x02, b""),
                _eth_tcp(b, 80, a, port, 500, 0x12, b""),
                _eth_tcp(a, port, b, 80, 101, 0x18, req),
                _eth_tcp(b, 80, a, port, 501, 0x18, resp),
                *((_eth_tcp(a, port, b, 80, 101 + len(req), 0x14, b""),) if rst else (
                    _eth_tcp(a, port, b, 80, 101 + len(req), 0x11, b""),
                    _eth_tcp(b, 80, a, port, 501 + len(resp), 0x11, b""))),
            ):
                w.write(ts, frame)
            done.add(payload_key(decode_segment(1, _eth_tcp(a, port, b, 80, 0, 2, b""),
                                                FlowStats()))[0])
        if i % 30 == 3:  # mid-stream: never a SYN
            w.write(p.ts_ns, _eth_tcp(a, 39999, b, 80, 7000 + i, 0x18, resp))
    w.close()
    mid = payload_key(decode_segment(1, _eth_tcp(a, 39999, b, 80, 0, 0x18, b""), FlowStats()))
    return done, mid[0]


def test_finished_non_kafka_flows_stay_out_of_the_state_step(tmp_path):
    """A file's flows that began and ended in it without a Kafka request are not shipped to
    the state step; a flow found mid-stream is (it may be Kafka in a later file); the
    exchanges are still the offline ones."""
    path = tmp_path / "mixed.pcap"
    done, mid = _mixed_capture(path)
    assert len(done) >= 5
    batches = list(file_packets(str(path), "cap"))
    keys = {k for b in batches for k in b.column("conn_key").to_pylist()}
    assert not keys & done and mid in keys
    kafka = {payload_key(s)[0] for p in read_capture(str(LONG_CAPTURE))
             if (s := decode_segment(p.linktype, p.data, FlowStats())) is not None}
    assert kafka <= keys
    table = pa.Table.from_batches(batches).to_pandas()
    rows = []
    for _key, packets in table.groupby("conn_key", sort=False):
        conn = ConnState("cap", EngineOptions(), False)
        rows += conn.feed(packets) + conn.close()
    assert spark_keys(rows) == offline_keys(path)
    # on a --port every flow may be Kafka: nothing is left out
    ported = list(file_packets(str(path), "cap", EngineOptions(ports=frozenset({80}))))
    assert done <= {k for b in ported for k in b.column("conn_key").to_pylist()}


def test_a_checkpoint_of_another_stream_layout_is_one_line_and_exit_2(spark, tmp_path, capsys):
    from kanalyze.spark.streaming import CHECKPOINT_MARK

    watched = tmp_path / "watched"
    watched.mkdir()
    cp = tmp_path / "cp"
    cp.mkdir()
    (cp / CHECKPOINT_MARK).write_text('{"layout": "an older one"}\n')
    rc = main(["spark", "--stream", str(watched), "--out", str(tmp_path / "o"),
               "--checkpoint", str(cp), "--duration", "30"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"kanalyze: error: {cp}: ") and "new --checkpoint" in err
    assert not (tmp_path / "o").exists()


def test_restarting_on_a_checkpoint_from_before_the_current_state_schema(spark, tmp_path,
                                                                        capsys):
    """A checkpoint an older stream wrote (another state schema, no layout mark): the restart
    fails with one line saying to use a new checkpoint, not the JVM's stack."""
    from kanalyze.spark.streaming import BINARY_FILE_DDL, PACKET_SCHEMA, extract_new_files

    pieces = _pieces(tmp_path)
    watched = tmp_path / "watched"
    watched.mkdir()
    cp = tmp_path / "cp"
    _publish(pieces[0], watched)

    def old_step(_key, pdfs, state):  # noqa: ANN001, ANN202 - an older layout's state
        for _ in pdfs:
            pass
        state.update(("old", 1))
        return iter([])

    paths = spark.readStream.format("binaryFile").schema(BINARY_FILE_DDL).load(str(watched))
    old = (
        paths.select("path")
        .mapInArrow(extract_new_files(str(watched)), R.spark_ddl(PACKET_SCHEMA))
        .groupBy("capture_id", "conn_key")
        .applyInPandasWithState(old_step, "n INT", "state STRING, version INT", "append",
                                "NoTimeout")  # no timeout: no endless empty micro-batches
        .writeStream.format("parquet").option("path", str(tmp_path / "old"))
        .option("checkpointLocation", str(cp)).start()
    )
    try:
        old.processAllAvailable()
    finally:
        old.stop()
    assert (cp / "offsets").is_dir() and (cp / "state").is_dir()
    _publish(pieces[1], watched)  # something for the restarted query to read
    rc = main(["spark", "--stream", str(watched), "--out", str(tmp_path / "o"),
               "--checkpoint", str(cp), "--trigger", "0.5", "--until-drained",
               "--duration", str(DEADLINE_S)])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if line.startswith("kanalyze: error:")]
    assert rc == 2, err
    assert errors == [f"kanalyze: error: {cp}: " + errors[0].split(": ", 3)[-1]]
    assert "new --checkpoint" in errors[0]
