"""Inputs that are not `file:` take the range path through Hadoop's FileSystem: the planner
reads them through the driver's Hadoop streams, the tasks through their own Hadoop reader
(`kanalyze.spark.hadoop_read`). The scheme here is Hadoop's `viewfs://` mounted on a local
directory: pyarrow cannot read it, so only the Hadoop readers can make this run work."""

from __future__ import annotations

import shutil

import pytest

from tests.spark.support import LONG_CAPTURE, rotate

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.parallel.range_export import RANGE_BYTES_ENV  # noqa: E402
from kanalyze.spark.inputs import InputError  # noqa: E402
from kanalyze.spark.pipeline import build  # noqa: E402

pytestmark = pytest.mark.spark
PATHS = ("capture_id", "request_file", "request_first_file", "response_file",
         "response_first_file", "first_file", "path")


def _mount(spark, name: str, target) -> str:  # noqa: ANN001
    """viewfs://name/caps -> the local directory `target` (set on the live session)."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set(f"fs.viewfs.mounttable.{name}.link./caps", "file://" + str(target))
    return f"viewfs://{name}/caps"


def _tables(spark, inputs: list[str],  # noqa: ANN001
            ranges: bool = True) -> tuple[dict, dict[str, list[tuple]]]:
    """(balance, table -> sorted rows without the columns that spell a path)."""
    t = build(spark, inputs, ranges=ranges)
    try:
        out = {}
        for name in ("exchanges", "connections"):
            rows = [r.asDict(recursive=True) for r in getattr(t, name).collect()]
            out[name] = sorted(
                (tuple(sorted((k, repr(v)) for k, v in r.items() if k not in PATHS))
                 for r in rows), key=repr)
        files = [r.asDict() for r in t.files.collect()]
        out["files"] = sorted((f["file_id"], f["packets"], f["first_ns"]) for f in files)
    finally:
        t.unpersist()
    return t.balance or {}, out


@pytest.mark.slow  # 75-170 s on this loaded 2-core machine: two or three builds
@pytest.mark.parametrize("rotated", [False, True], ids=["one-pcap", "rotated-pcapng"])
def test_a_hadoop_scheme_takes_the_range_path_with_the_local_tables(spark, tmp_path,
                                                                     monkeypatch, rotated):
    d = tmp_path / "caps"
    if rotated:  # editcap writes pcapng; the overlap reads on into the next files
        rotate(LONG_CAPTURE, d, 60)
    else:  # classic pcap: the planner's header walk and the overlap's block reader
        d.mkdir()
        shutil.copy(LONG_CAPTURE, d / "x.pcap")
    monkeypatch.setenv(RANGE_BYTES_ENV, "4096")  # each file cut into several ranges
    uri = _mount(spark, f"h6{int(rotated)}", d)
    local_balance, local = _tables(spark, [str(d)])
    remote_balance, remote = _tables(spark, [uri + "/"])
    assert remote_balance["refused_files"] == 0 and local_balance["refused_files"] == 0
    assert remote_balance["ranges"] == local_balance["ranges"] >= 8
    assert remote_balance["bytes_shuffled_est"] == 0  # the range path, not the shuffle
    assert len(remote["exchanges"]) >= 80
    assert remote == local  # conn ids included: they hash the content, not the path
    if not rotated:  # the shuffle path's tasks read the URI through the same worker reader
        shuffled_balance, shuffled = _tables(spark, [uri + "/"], ranges=False)
        assert "ranges" not in shuffled_balance
        assert shuffled["exchanges"] == local["exchanges"]


def test_a_missing_hadoop_input_fails_at_once(spark, tmp_path, capsys):
    (tmp_path / "caps").mkdir()
    shutil.copy(LONG_CAPTURE, tmp_path / "caps" / "x.pcap")
    uri = _mount(spark, "h6miss", tmp_path / "caps")
    with pytest.raises(InputError, match="no such file"):
        build(spark, [uri + "/gone.pcap"])
    from kanalyze.cli import main  # the CLI (in this session): one line, exit 2, no table

    assert main(["spark", uri + "/gone.pcap", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gone.pcap" in err and "no such file" in err
    assert not (tmp_path / "o").exists()


def test_the_worker_reader_reads_byte_ranges_and_names_a_missing_file(tmp_path):
    """The Hadoop reader JVM a task starts (no Spark session): positional reads in bounded
    blocks, byte-exact; a missing path is a CaptureError naming it."""
    from kanalyze.capture import CaptureError
    from kanalyze.spark.hadoop_read import BLOCK, open_stream

    data = LONG_CAPTURE.read_bytes()
    settings = {"fs.viewfs.mounttable.h6unit.link./caps": "file://" + str(LONG_CAPTURE.parent)}
    with open_stream(settings, f"viewfs://h6unit/caps/{LONG_CAPTURE.name}") as f:
        f.seek(1000)
        assert f.read(5000) == data[1000:6000]
        f.seek(len(data) - 10)
        assert f.read(BLOCK) == data[-10:] and f.read(1) == b""
    with pytest.raises(CaptureError, match="gone.pcap.*FileNotFound"):
        open_stream(settings, "viewfs://h6unit/caps/gone.pcap")
