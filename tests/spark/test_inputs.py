"""Inputs: missing or unreadable paths fail at once; connection ids come from the file's content,
not from how its path was typed; every exchange has its connection row, port reuse included."""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

from kanalyze.cli import main
from tests.spark.support import LONG_CAPTURE, local_pipeline

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.spark.inputs import InputError, resolve_inputs  # noqa: E402

pytestmark = pytest.mark.spark
PORT_REUSE = LONG_CAPTURE.parent / "crafted" / "port_reuse.pcap"


def test_missing_path_raises(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        resolve_inputs([str(tmp_path / "nope.pcap")])
    with pytest.raises(InputError, match="no file matches"):
        resolve_inputs([str(tmp_path / "*.pcap")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no files"):
        resolve_inputs([str(tmp_path / "empty")])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file_raises(tmp_path):
    p = tmp_path / "locked.pcap"
    shutil.copy(LONG_CAPTURE, p)
    p.chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        resolve_inputs([str(p)])


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    shutil.copy(LONG_CAPTURE, tmp_path / "a.pcap")
    monkeypatch.chdir(tmp_path)
    assert resolve_inputs(["a.pcap", "file://" + str(tmp_path / "a.pcap")]) == [
        str(tmp_path / "a.pcap")
    ]


def test_cli_missing_path_is_one_line_and_exit_2(tmp_path, capsys):
    rc = main(["spark", str(tmp_path / "missing.pcap"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "missing.pcap" in err and "no such file" in err.lower()
    assert not (tmp_path / "o").exists()


def test_relative_and_absolute_runs_share_connection_ids(tmp_path, monkeypatch):
    d = tmp_path / "caps"
    d.mkdir()
    shutil.copy(LONG_CAPTURE, d / "x.pcap")
    copy = tmp_path / "elsewhere" / "renamed.pcap"
    copy.parent.mkdir()
    shutil.copy(LONG_CAPTURE, copy)
    monkeypatch.chdir(tmp_path)

    def ids(path: str) -> Counter:
        return Counter(r["conn_id"] for r in local_pipeline([path]) if r["kind"] == "exchange")

    absolute = ids(str(d / "x.pcap"))
    assert len(absolute) >= 10 and None not in absolute
    assert ids("caps/x.pcap") == absolute
    assert ids("./caps/../caps/x.pcap") == absolute
    assert ids(str(copy)) == absolute  # a copy under another name is the same capture


def test_port_reuse_every_exchange_has_its_connection_row():
    rows = local_pipeline([str(PORT_REUSE)])
    exchanges = [r for r in rows if r["kind"] == "exchange"]
    conns = [r for r in rows if r["kind"] == "connection"]
    import json

    conn_ids = {json.loads(r["extra"])["conn_id"] for r in conns}
    assert len({r["conn_id"] for r in exchanges}) == 2  # one 4-tuple, two incarnations
    assert {r["conn_id"] for r in exchanges} <= conn_ids
    incarnations = sorted(json.loads(r["extra"])["incarnation"] for r in conns)
    assert incarnations == [1, 2]


def test_datasource_missing_path_raises(spark, tmp_path):
    with pytest.raises(Exception, match="no such file"):
        spark.read.format("kafka-pcap").load(str(tmp_path / "gone.pcap")).collect()


def _eth_tcp(src: bytes, sport: int, dst: bytes, dport: int, seq: int, flags: int, data: bytes):
    import struct

    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + len(data), 0, 0, 64, 6, 0, src, dst)
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + data


def test_non_kafka_flows_stay_out_of_the_shuffle(tmp_path):
    """An HTTP-like flow next to Kafka: its packets never reach stage 2, the exchanges are the
    offline ones."""
    from kanalyze.capture import read_capture
    from kanalyze.capture.writer import PcapWriter
    from kanalyze.spark.extract import extract
    from kanalyze.spark.units import plan_local
    from tests.spark.support import offline_keys, spark_keys

    packets = list(read_capture(str(LONG_CAPTURE)))
    path = tmp_path / "mixed.pcap"
    w = PcapWriter(str(path), packets[0].linktype)
    a, b = bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2])
    for i, p in enumerate(packets):
        w.write(p.ts_ns, bytes(p.data))
        if i % 10 == 0:  # interleave a plain-text conversation on port 8080
            line = f"GET /item/{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            w.write(p.ts_ns, _eth_tcp(a, 40000, b, 8080, 1000 + 100 * i, 0x18, line))
    w.close()
    plan = plan_local([str(path)])
    hints: dict[bytes, bool] = {}
    for batch in extract(plan, range(len(plan.units))):
        d = batch.to_pydict()
        for kind, key, hint in zip(d["kind"], d["conn_key"], d["hint"], strict=True):
            if kind == 0:
                hints[key] = hints.get(key, False) or hint
    http = a + (40000).to_bytes(2, "big") + b + (8080).to_bytes(2, "big")
    assert hints[http] is False and sum(hints.values()) == len(hints) - 1
    rows = local_pipeline([str(path)])
    assert spark_keys([r for r in rows if r["kind"] == "exchange"]) == offline_keys(path)
    import json

    clients = {json.loads(r["extra"])["client"] for r in rows if r["kind"] == "connection"}
    assert not any(c.startswith("10.9.9.") for c in clients)
