"""A rotated set whose file ends later than the next begins (tcpdump's clock steps back a
microsecond at a rotation now and then): the range path reads that edge merged by time, as one
process merges the files (`kanalyze.parallel.range_edges`), instead of leaving the whole set
to the shuffle path; where its packet numbers could misorder what the stitch replays, the run
refuses and the shuffle path decodes the set. Either way the rows are the shuffle path's
(itself equal to `kanalyze export`). The stage-1 runs and the stitch run in this process
(`local_ranges`); one test runs them on Spark."""

from __future__ import annotations

import json
import random
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from kanalyze.flows import ACK, SYN, FlowStats, Segment, decode_segment
from kanalyze.parallel import range_plan
from kanalyze.parallel.range_plan import plan_chain, tail_latest
from tests.spark.support import LONG_CAPTURE, local_pipeline, local_ranges

CAPTURES = LONG_CAPTURE.parent
WHOLE = 1 << 40  # a range span no capture reaches: every file walked by the plan


def _records(path: Path) -> tuple[bytes, list[bytearray]]:
    """(file header, records) of a little-endian µs pcap."""
    data = path.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1"
    recs, pos = [], 24
    while pos + 16 <= len(data):
        end = pos + 16 + struct.unpack_from("<I", data, pos + 8)[0]
        recs.append(bytearray(data[pos:end]))
        pos = end
    return data[:24], recs


def _us(rec: bytearray) -> int:
    sec, usec = struct.unpack_from("<II", rec, 0)
    return sec * 1_000_000 + usec


def _date(rec: bytearray, us: int) -> None:
    struct.pack_into("<II", rec, 0, us // 1_000_000, us % 1_000_000)


def _segment(rec: bytearray) -> Segment | None:
    return decode_segment(1, bytes(rec[16:]), FlowStats())


def _write(head: bytes, pieces: list[list[bytearray]], out: Path) -> list[str]:
    """tcpdump -C's names: k.pcap, k.pcap1, ..."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, recs in enumerate(pieces):
        p = out / f"k.pcap{i or ''}"
        p.write_bytes(head + b"".join(bytes(r) for r in recs))
        paths.append(str(p))
    return paths


def _canon(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _agree(paths: list[str], got: dict) -> None:
    """The in-process range path's rows are the shuffle path's; each file's packets and times
    are counted to it."""
    want = local_pipeline(paths)
    cols = list(got["exchanges"][0])
    assert _canon(got["exchanges"]) == _canon(
        [{c: r[c] for c in cols} for r in want if r["kind"] == "exchange"])
    assert _canon(got["connections"]) == _canon(
        [json.loads(r["extra"]) for r in want if r["kind"] == "connection"])
    for rank, path in enumerate(paths):
        times = [_us(r) * 1000 for r in _records(Path(path))[1]]
        assert got["units"][rank] == [len(times), min(times), max(times)]


def _ack_after_data(recs: list[bytearray]) -> int:
    """The first record past the middle that is a pure ACK right after a data segment the
    other way on the same connection (where tcpdump's clock was seen to step back)."""
    for i in range(len(recs) // 2, len(recs)):
        a, b = _segment(recs[i - 1]), _segment(recs[i])
        if a is None or b is None or not len(a.payload) or len(b.payload):
            continue
        if b.flags == ACK and (b.src, b.sport, b.dst, b.dport) == (a.dst, a.dport, a.src, a.sport):
            return i
    raise AssertionError("no such record")


def _ack_dated_back(out: Path) -> tuple[list[str], list[list[bytearray]]]:
    """Two files: the first ends with a data segment, the second begins with the ACK that
    followed it, dated a microsecond before it (as in a real tcpdump -C rotation)."""
    head, recs = _records(LONG_CAPTURE)
    cut = _ack_after_data(recs)
    pieces = [recs[:cut], recs[cut:]]
    _date(pieces[1][0], _us(pieces[0][-1]) - 1)
    return _write(head, pieces, out), pieces


def test_an_ack_dated_before_the_data_ahead_of_it_is_merged(tmp_path: Path) -> None:
    """As in a real tcpdump -C rotation (aiokafka's consumer): the broker's data segment ends
    one file, the client's ACK that begins the next is dated a microsecond earlier."""
    paths, pieces = _ack_dated_back(tmp_path / "rot")
    plan = plan_chain(paths, 2, merge_edges=True)
    assert plan is not None and [r.merges for r in plan] == [True, False]
    assert plan[1].head_before == _us(pieces[0][-1]) * 1000
    assert plan_chain(paths, 2, WHOLE) is None  # walked, not merged: refused
    got, why = local_ranges(paths)
    assert why == "ok" and got["merged"] == 1
    _agree(paths, got)


def test_steps_back_at_random_are_merged_or_refused_never_wrong(tmp_path: Path) -> None:
    """Files cut at random places, some edges dated back by a microsecond (the next file's
    first packet) or interleaved over a few packets: each set is either stitched with its
    edges merged and gives the shuffle path's rows, or refused."""
    rng = random.Random(1925)
    merged = refused = 0
    for name in ("kp_codecs.pcap", "lib_group_rebalance.pcap", "aio_group.pcap"):
        head, recs = _records(CAPTURES / name)
        for trial in range(5):
            cuts = sorted(rng.sample(range(5, len(recs) - 5), rng.randint(1, 3)))
            pieces = [[bytearray(r) for r in recs[a:b]]
                      for a, b in zip([0, *cuts], [*cuts, len(recs)], strict=True)]
            for a, b in zip(pieces, pieces[1:], strict=False):
                if rng.random() < 0.5:
                    _date(b[0], min(_us(b[0]), _us(a[-1]) - 1))
                else:  # the next file's first few packets dated among this one's last few
                    back = rng.randint(2, min(4, len(a)))
                    for rec in b[: rng.randint(1, 3)]:
                        _date(rec, min(_us(rec), _us(a[-back]) - 1))
            paths = _write(head, pieces, tmp_path / f"{name}-{trial}")
            got, why = local_ranges(paths)
            if not got:
                assert "edge" in why or "topic names" in why or "plan" in why, why
                refused += 1
                continue
            _agree(paths, got)
            merged += got["merged"] > 0
    assert merged >= 3 and refused >= 3


def test_a_connection_opened_inside_the_edge_is_refused(tmp_path: Path) -> None:
    """A handshake's last ACK begins the next file, dated before the SYN ahead of it: one
    process reads the ACK first (not yet the connection's), so the connections table would
    count it to the connection by packet number (measured: 12 packets for the shuffle
    path's 11). The stitch refuses (`edge_conflict`); the shuffle path decodes the set."""
    head, recs = _records(CAPTURES / "kp_codecs.pcap")
    syn = next(i for i in range(5, len(recs) - 2)
               if (a := _segment(recs[i])) is not None and a.flags == SYN
               and (c := _segment(recs[i + 2])) is not None and c.flags == ACK
               and not len(c.payload) and (c.src, c.sport) == (a.src, a.sport))
    pieces = [recs[: syn + 2], recs[syn + 2 :]]
    _date(pieces[1][0], _us(pieces[0][-2]) - 1)
    got, why = local_ranges(_write(head, pieces, tmp_path / "rot"))
    assert not got
    assert why == "a connection that starts in the merged edge of two files, with packets " \
        "from both"


def test_a_file_whose_latest_is_not_at_its_end_is_refused(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A packet in the middle of a file dated after the next file's first: the plan reads
    only the file's end, so the next file's first range skips fewer packets than the merge
    takes, and the runs disagree."""
    monkeypatch.setattr(range_plan, "TAIL_BYTES", 2000)
    head, recs = _records(CAPTURES / "kp_codecs.pcap")
    half = len(recs) // 2
    pieces = [recs[:half], recs[half:]]
    _date(pieces[0][len(pieces[0]) // 2], _us(pieces[1][3]) + 1)
    paths = _write(head, pieces, tmp_path / "rot")
    first = _us(pieces[1][0]) * 1000
    assert tail_latest(paths[0], plan_chain(paths, 2, merge_edges=True)[0].layout, first) == \
        _us(pieces[0][-1]) * 1000
    got, why = local_ranges(paths)
    assert not got and why == "the runs do not read the files in one process's order"


def test_a_file_whose_end_is_not_records_is_not_predicted(tmp_path: Path) -> None:
    head, recs = _records(CAPTURES / "kp_codecs.pcap")
    path = _write(head, [recs], tmp_path / "one")[0]
    lay = plan_chain([path], 1, WHOLE)[0].layout  # type: ignore[index]
    latest = max(_us(r) for r in recs) * 1000
    assert tail_latest(path, lay, latest) == latest
    assert tail_latest(path, lay, latest + 3_000_000_000) == -1  # none that late
    Path(path).write_bytes(Path(path).read_bytes() + b"\x00" * 7)  # a cut record header
    assert tail_latest(path, replace(lay, size=lay.size + 7), latest) == -1


@pytest.mark.spark
def test_spark_takes_the_range_path_over_a_merged_edge(spark, tmp_path: Path) -> None:  # noqa: ANN001
    from kanalyze.spark.pipeline import build

    head, recs = _records(LONG_CAPTURE)
    cut = _ack_after_data(recs)
    pieces = [recs[: cut // 2], recs[cut // 2 : cut], recs[cut:]]
    _date(pieces[2][0], _us(pieces[1][-1]) - 1)
    _write(head, pieces, tmp_path / "rot")
    got = build(spark, [str(tmp_path / "rot")], ranges=True)
    try:
        rows = _canon([r.asDict() for r in got.exchanges.collect()])
        conns = _canon([r.asDict() for r in got.connections.collect()])
    finally:
        got.unpersist()
    assert got.balance["refused_files"] == 0 and got.balance["ranges"] == 3
    base = build(spark, [str(tmp_path / "rot")], ranges=False)
    try:
        assert rows == _canon([r.asDict() for r in base.exchanges.collect()])
        assert conns == _canon([r.asDict() for r in base.connections.collect()])
    finally:
        base.unpersist()


def test_a_next_file_gone_before_the_run_merges_nothing(tmp_path: Path) -> None:
    """The merging range reads the next file itself: gone by then (a `tcpdump -W` ring
    reusing it), it merges nothing, and the run reports the file it could not read (its
    overlap reads on into it) instead of failing the task: the stitch refuses."""
    from kanalyze.engine import EngineOptions
    from kanalyze.parallel.ranges import run_range

    paths, _pieces = _ack_dated_back(tmp_path / "rot")
    plan = plan_chain(paths, 2, merge_edges=True)
    assert plan is not None and plan[0].merges
    kept = run_range(plan[0], EngineOptions(), lambda _ex: None)
    assert kept.merged == 1
    Path(paths[1]).unlink()
    gone = run_range(plan[0], EngineOptions(), lambda _ex: None)
    assert gone.merged == 0 and "k.pcap1" in gone.error and len(gone.done) > 0


def _conn_rows_agree(paths: list[str]) -> None:
    got, why = local_ranges(paths)
    assert why == "ok", why
    want = local_pipeline(paths)
    assert _canon(got["connections"]) == _canon(
        [json.loads(r["extra"]) for r in want if r["kind"] == "connection"])


def test_a_connection_whose_last_packet_steps_back_ends_at_that_packet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connections table's `last_ns` is the time of a connection's last packet in read
    order, on both paths (the range path took the latest time: 1 µs later here)."""
    from kanalyze.parallel.range_export import RANGE_BYTES_ENV

    monkeypatch.setenv(RANGE_BYTES_ENV, "3000")
    head, recs = _records(CAPTURES / "kp_codecs.pcap")
    keys = [(s.src, s.sport, s.dst, s.dport) if (s := _segment(r)) else None for r in recs]
    last = max(i for i, k in enumerate(keys) if k == keys[len(recs) // 2])
    prev = max(i for i in range(last) if keys[i] in (keys[last], keys[last][2:] + keys[last][:2]))
    _date(recs[last], _us(recs[prev]) - 1)
    _conn_rows_agree(_write(head, [recs], tmp_path / "one"))


def test_a_stray_ack_before_a_connections_syn_is_not_counted_to_it(tmp_path: Path) -> None:
    """A 4-tuple's pure ACK before its first connection opened belongs to no connection, as
    on the shuffle path (the range path counted it to the first: one packet more)."""
    head, recs = _records(CAPTURES / "kp_codecs.pcap")
    syn = next(i for i in range(5, len(recs) - 2)
               if (a := _segment(recs[i])) is not None and a.flags == SYN
               and (c := _segment(recs[i + 2])) is not None and c.flags == ACK
               and not len(c.payload))
    stray = bytearray(recs[syn + 2])
    _date(stray, _us(recs[syn]) - 1)
    _conn_rows_agree(_write(head, [recs[:syn] + [stray] + recs[syn:]], tmp_path / "one"))
