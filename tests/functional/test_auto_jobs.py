"""`export` without `--jobs`: a full export of 64 MB or more takes every usable core, a small
capture, a header-only run or `--jobs 1` one process, and the output is the same either way."""

from __future__ import annotations

import functools
import os
import struct
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.commands import export as export_command
from kanalyze.parallel import run as parallel_run

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "captures" / "lib_codecs.pcap"  # classic pcap, little-endian, Ethernet
FILLER = 60_000  # UDP payload bytes per filler datagram


def _udp_record(ts_sec: int, ts_usec: int) -> bytes:
    """One Ethernet/IPv4/UDP datagram of FILLER zero bytes as a pcap record."""
    udp = struct.pack("!HHHH", 40000, 5000, 8 + FILLER, 0) + bytes(FILLER)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2]))
    frame = bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00" + ip + udp
    return struct.pack("<IIII", ts_sec, ts_usec, len(frame), len(frame)) + frame


def big_capture(tmp: Path) -> Path:
    """A real Kafka conversation followed by UDP datagrams up to past the auto threshold: the
    Kafka part is what the output shows, the filler is what makes the file big."""
    data = SOURCE.read_bytes()
    pos, last = 24, (0, 0)
    while pos + 16 <= len(data):
        sec, usec, incl, _orig = struct.unpack_from("<IIII", data, pos)
        last, pos = (sec, usec), pos + 16 + incl
    record = _udp_record(last[0] + 1, 0)
    count = export_command.AUTO_JOBS_MIN_BYTES // len(record) + 1
    path = tmp / "big.pcap"
    with path.open("wb") as f:
        f.write(data)
        for _ in range(count):
            f.write(record)
    assert path.stat().st_size >= export_command.AUTO_JOBS_MIN_BYTES
    return path


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The job counts `export` hands to the pool (its ranges then run in this process)."""
    seen: list[int] = []

    def record(paths, jobs, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(jobs)
        return parallel_run.run_export(paths, jobs, *args, processes=False, **kwargs)

    monkeypatch.setattr(export_command, "run_export", functools.partial(record))
    return seen


def export(argv: list[str], out: Path) -> bytes:
    assert main(["export", *argv, "-o", str(out)]) == 0
    return out.read_bytes()


def test_a_big_full_export_takes_every_core(tmp_path: Path, asked: list[int]) -> None:
    cap = big_capture(tmp_path)
    cores = export_command.auto_jobs([str(cap)])
    if cores == 1:
        pytest.skip("one usable core: the default is one process")
    got = export([str(cap)], tmp_path / "auto.ndjson")
    assert asked == [min(len(os.sched_getaffinity(0)), export_command.AUTO_JOBS_MAX)]
    want = export([str(cap), "--jobs", "1"], tmp_path / "one.ndjson")
    assert asked == [cores]  # --jobs 1 never reaches the pool
    assert got == want
    assert got.count(b"\n") > 20  # the Kafka exchanges, not an empty file


def test_small_and_header_only_exports_stay_in_one_process(tmp_path: Path,
                                                          asked: list[int]) -> None:
    export([str(SOURCE)], tmp_path / "small.ndjson")
    export([str(big_capture(tmp_path)), "--header-only"], tmp_path / "headers.ndjson")
    assert asked == []


def test_auto_jobs_counts_regular_inputs_only(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_command, "engine_compiled", lambda: False)
    small = tmp_path / "small.pcap"
    small.write_bytes(SOURCE.read_bytes())
    assert export_command.auto_jobs([str(small)]) == 1
    assert export_command.auto_jobs([str(tmp_path / "missing.pcap")]) == 1
    sparse = tmp_path / "sparse.pcap"
    with sparse.open("wb") as f:
        f.truncate(export_command.AUTO_JOBS_MIN_BYTES)
    n = export_command.auto_jobs([str(sparse), "-"])
    assert n == min(len(os.sched_getaffinity(0)), export_command.AUTO_JOBS_MAX)
    # the pool's own check still has the last word: stdin is read by one process
    assert export_command.default_jobs([str(sparse), "-"], None, auto=True) == 1


@pytest.mark.parametrize(("cores", "compiled", "want"),
                         [(2, True, 1), (2, False, 2), (3, True, 3), (1, False, 1), (32, True, 16)])
def test_a_compiled_engine_takes_more_processes_from_three_cores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, compiled: bool,
        want: int) -> None:
    """Compiled, a second process on 2 cores gained no wall time and cost 30-50 % more CPU."""
    sparse = tmp_path / "sparse.pcap"
    with sparse.open("wb") as f:
        f.truncate(export_command.AUTO_JOBS_MIN_BYTES)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setattr(export_command, "engine_compiled", lambda: compiled)
    assert export_command.auto_jobs([str(sparse)]) == want


def test_the_engine_build_is_told_apart() -> None:
    from dissectors import native

    assert export_command.engine_compiled() == (
        "kanalyze.engine" in native.built() and not native.stale()
        and not os.environ.get("KANALYZE_PURE"))
