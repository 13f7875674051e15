"""Inputs that are not `file:` take the range path through Hadoop's FileSystem: the planner
reads them through the driver's Hadoop streams, the tasks through their own Hadoop reader
(`kanalyze.spark.hadoop_read`). The scheme here is Hadoop's `viewfs://` mounted on a local
directory: pyarrow cannot read it, so only the Hadoop readers can make this run work."""

from __future__ import annotations

import shutil

import pytest

from tests.spark.support import LONG_CAPTURE, rotate, to_pcapng

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.parallel import range_plan  # noqa: E402
from kanalyze.parallel.pcap_slices import SLICE_ENV  # noqa: E402
from kanalyze.parallel.range_export import RANGE_BYTES_ENV  # noqa: E402
from kanalyze.spark import range_stage  # noqa: E402
from kanalyze.spark.inputs import InputError  # noqa: E402
from kanalyze.spark.pipeline import build, rank_inputs  # noqa: E402
from kanalyze.spark.range_stage import plan_groups  # noqa: E402
from kanalyze.spark.remote_walk import pcapng_walker, walk_remote  # noqa: E402
from tests.unit.parallel.test_pcap_slices import T0, fake_chain, pcap, record  # noqa: E402

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


@pytest.mark.slow  # 12-19 s a case at load 3-5 on 2 cores: two builds
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
    monkeypatch.setenv(SLICE_ENV, "5000")  # the pcap's plan walked by tasks
    uri = _mount(spark, f"h6{int(rotated)}", d)
    local_balance, local = _tables(spark, [str(d)])
    remote_balance, remote = _tables(spark, [uri + "/"])
    assert remote_balance["refused_files"] == 0 and local_balance["refused_files"] == 0
    assert remote_balance["plan_walk_tasks"] > 1  # the planner's walks were tasks
    assert remote_balance["ranges"] == local_balance["ranges"] >= 8
    assert remote_balance["bytes_shuffled_est"] == 0  # the range path, not the shuffle
    assert len(remote["exchanges"]) >= 80
    assert remote == local  # conn ids included: they hash the content, not the path
    if not rotated:  # the shuffle path's tasks read the URI through the same worker reader
        shuffled_balance, shuffled = _tables(spark, [uri + "/"], ranges=False)
        assert "ranges" not in shuffled_balance
        assert shuffled["exchanges"] == local["exchanges"]


def test_tasks_walk_large_remote_captures_into_the_drivers_plan(spark, tmp_path,  # noqa: ANN001
                                                               monkeypatch):  # noqa: ANN001
    """The planner's walks of remote captures larger than a slice, done by Spark tasks (a
    pcap's record headers by slices chained on the driver, a pcapng's ranges from the
    driver's sync points), plan exactly what the driver's own walks plan: a real capture as
    pcap and as pcapng, a pcap where a slice starts inside a packet whose payload holds fake
    record headers (the driver walks that gap), a truncated pcap and pcapng (refused both
    ways), and a pcap no larger than a slice (left to the driver)."""
    d = tmp_path / "caps"
    d.mkdir()
    shutil.copy(LONG_CAPTURE, d / "a.pcap")
    fake_at = fake_chain(d / "b.pcap", 24 + 1000)  # slices of 1000 bytes: the second's start
    data = LONG_CAPTURE.with_name("aio_group.pcap").read_bytes()
    (d / "c.pcap").write_bytes(data[:-20])  # its last record cut short
    (d / "d.pcap").write_bytes(pcap(*(record(b"x" * 50, T0 + 9, k) for k in range(10))))
    to_pcapng(LONG_CAPTURE, d / "e.pcapng")
    ng = to_pcapng(LONG_CAPTURE.with_name("kp_codecs.pcap"), tmp_path / "f.pcapng").read_bytes()
    (d / "f.pcapng").write_bytes(ng[:-30])  # its last block cut short
    monkeypatch.setenv(SLICE_ENV, "1000")
    monkeypatch.setattr(range_plan, "MIN_RANGE", 4000)  # small files cut by CPU too
    monkeypatch.setattr(range_stage, "RANGES_PER_CORE", 8)  # ... into several ranges each
    uri = _mount(spark, "h6walk", d)
    files, _skipped = rank_inputs(spark, [uri + "/"], capture_id="one")
    for f in files:  # each file its own capture group (none overlaps another in time)
        f.capture_id = f.path
    report: dict[str, float] = {}
    walked = walk_remote(spark, files, report)
    names = {f.path.rsplit("/", 1)[1]: f.path for f in files}
    assert sorted(walked) == sorted(names[n] for n in ("a.pcap", "b.pcap", "c.pcap"))
    assert report["plan_walk_tasks"] > 60 and report["plan_walk_gaps"] >= 1
    assert walked[names["c.pcap"]].damaged > 0
    b = walked[names["b.pcap"]]
    assert fake_at not in {h[0] for h in b.headers()}  # the fake chain is not in the result
    walker = pcapng_walker(spark, files, report)
    assert walker is not None
    gaps = report["plan_walk_gaps"]
    for span in ("", "4096"):
        monkeypatch.setenv(RANGE_BYTES_ENV, span)
        before = report["plan_walk_tasks"]
        want = plan_groups(files, 2)
        assert plan_groups(files, 2, walked, walker) == want
        assert report["plan_walk_tasks"] >= before + 4  # the pcapngs' ranges: tasks
        assert report["plan_walk_gaps"] == gaps  # ... each walked there
        assert sum(len(g) for g in want[0]) > 8
        assert sorted(want[1]) == sorted(f.rank for f in files if f.path.endswith("c.pcap")
                                         or f.path.endswith("f.pcapng"))  # refused


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
