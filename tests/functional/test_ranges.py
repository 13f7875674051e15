"""`--jobs N` over byte ranges prints exactly what one process prints: every capture cut into
ranges of a few hundred bytes (frames and request/response pairs straddle the edges, most
connections are handed from range to range), full and header-only, the ranges run in this
process; once through real workers; and the stitch's refusals fall back to one process."""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.commands import export as export_command
from kanalyze.engine import EngineOptions
from kanalyze.parallel import range_engine
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.ranges import plan_ranges, run_range
from kanalyze.parallel.stitch import Unstitchable, stitch

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    str(p.relative_to(ROOT))
    for pattern in ("captures/*.pcap", "captures/crafted/*.pcap*", "captures/replication/*.pcap*")
    for p in ROOT.glob(pattern)
    if not p.name.startswith("bad_")
)
# captures whose connections outlive many tiny ranges: the stitch must succeed on them (with
# bodies, lib_group_rebalance reads topic names taught in another range: refused, one process)
STITCHED = ["captures/kp_codecs.pcap", "captures/admin.pcap", "captures/kp_v25.pcap"]


def cli(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
        code = main(argv)
        text.flush()
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(
        export_command, "run_export", functools.partial(parallel_run.run_export, processes=False)
    )


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(
    ("size", "tail"), [(600, range_engine.MAX_TAIL), (1500, 8)], ids=["600B", "1500B-handover"]
)
@pytest.mark.parametrize("mode", [[], ["--header-only"]], ids=["full", "header-only"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_tiny_ranges_same_output(capture: str, mode: list[str], size: int, tail: int,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Few tail marks (8) make the earlier run stop early, so connections are handed over
    rather than seen to their end by the earlier run."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
    want = cli(["export", capture, *mode, "--jobs", "1"])
    got = cli(["export", capture, *mode, "--jobs", "2"])
    assert got == want
    if capture in STITCHED:
        assert parallel_run.last_fallback is None
        assert parallel_run.last_timings["ranges"] > 5


@pytest.mark.parametrize(("capture", "size", "tail"), [
    ("captures/kp_codecs.pcap", 1500, 8),
    ("captures/kp_v25.pcap", 1500, 8),
    ("captures/lib_group_rebalance.pcap", 600, 32),
])
def test_handovers_happen(capture: str, size: int, tail: int,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The stitch really hands connections from range to range (not only whole ones)."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    ranges = plan_ranges([str(ROOT / capture)], 2, size)
    assert ranges is not None and len(ranges) > 5
    assert ranges[0].base == 0 and all(
        b.base == a.base + a.count and b.start == a.end for a, b in itertools.pairwise(ranges)
    )
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    got = stitch(results, EngineOptions())
    assert got.handovers > 0
    assert sorted(i for ids in got.ids for i in ids.values())[0] == 1


@pytest.mark.parametrize("capture", STITCHED)
def test_range_head_orphans_are_not_inferred(capture: str) -> None:
    """A later range joins connections mid-stream: the responses at its head answer requests
    of the previous range, whose run pairs them, and the stitch drops them here. Their api
    is not searched for (the layout search was a range head's largest cost), and the
    stitched output is still one process's (test_tiny_ranges_same_output)."""
    ranges = plan_ranges([str(ROOT / capture)], 2, 1500)
    assert ranges is not None
    heads = []
    for r in ranges[1:]:
        run_range(r, EngineOptions(), lambda ex: heads.append(ex) if ex.request is None else None)
    why = "it answers a request sent before this byte range"
    skipped = [ex for ex in heads if any(why in d.message for d in ex.response.diagnostics)]
    assert skipped
    assert all(ex.api_key is None and ex.inferred is None for ex in skipped)


def test_no_common_point_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tail marks no connection can be handed over: the stitch refuses, and the CLI
    writes one process's output."""
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    ranges = plan_ranges([str(ROOT / "captures/kp_codecs.pcap")], 2, 1500)
    assert ranges is not None
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    with pytest.raises(Unstitchable, match="no common quiescent packet"):
        stitch(results, EngineOptions())


@pytest.mark.usefixtures("in_process")
def test_refusal_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_engine, "MAX_TAIL", 0)
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    want = cli(["export", "captures/kp_codecs.pcap", "--jobs", "1"])
    got = cli(["export", "captures/kp_codecs.pcap", "--jobs", "2"])
    assert "no common quiescent packet" in (parallel_run.last_fallback or "")
    assert got == want


def test_unsplittable_inputs_are_not_planned(tmp_path: Path) -> None:
    assert plan_ranges(["-"], 2) is None
    assert plan_ranges([str(ROOT / "captures/admin.pcap")] * 2, 2) is None
    gz = ROOT / "captures/crafted/gzip.pcap.gz"
    if gz.exists():
        assert plan_ranges([str(gz)], 2, 600) is None
    assert plan_ranges([str(ROOT / "captures/admin.pcap")], 2) is None  # under 1 MB: one range


def test_real_workers_same_output() -> None:
    """Spawned workers (the CLI's own path), ranges of 800 bytes: stdout and stderr equal."""
    env = {**os.environ, RANGE_BYTES_ENV: "800", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kanalyze.cli", "export", "captures/lib_group_rebalance.pcap"]
    one = subprocess.run([*cmd, "--jobs", "1"], cwd=ROOT, env=env, capture_output=True,
                         check=True)
    two = subprocess.run([*cmd, "--jobs", "2"], cwd=ROOT, env=env, capture_output=True,
                         check=True)
    assert one.stdout and two.stdout == one.stdout
    assert two.stderr == one.stderr


def _pcapng_copy(src: Path, dst: Path) -> None:
    """`src` (a classic little-endian µs pcap) rewritten as pcapng: SHB, one IDB, EPBs."""
    data = src.read_bytes()
    linktype = int.from_bytes(data[20:24], "little") & 0x0FFFFFFF

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        size = (12 + len(body)).to_bytes(4, "little")
        return btype.to_bytes(4, "little") + size + body + size

    out = [block(0x0A0D0D0A, bytes.fromhex("4d3c2b1a") + b"\1\0\0\0" + b"\xff" * 8),
           block(1, linktype.to_bytes(2, "little") + b"\0\0" + (262144).to_bytes(4, "little"))]
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, incl, orig = (int.from_bytes(data[pos + i : pos + i + 4], "little")
                                 for i in (0, 4, 8, 12))
        ts = sec * 1_000_000 + usec
        head = (b"\0\0\0\0" + (ts >> 32).to_bytes(4, "little") + (ts & 0xFFFFFFFF).to_bytes(
            4, "little") + incl.to_bytes(4, "little") + orig.to_bytes(4, "little"))
        out.append(block(6, head + data[pos + 16 : pos + 16 + incl]))
        pos += 16 + incl
    dst.write_bytes(b"".join(out))


@pytest.mark.usefixtures("in_process")
def test_pcapng_ranges_same_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pcapng is cut at verified sync points (`kanalyze.capture.split`)."""
    ng = tmp_path / "kp_codecs.pcapng"
    _pcapng_copy(ROOT / "captures/kp_codecs.pcap", ng)
    ranges = plan_ranges([str(ng)], 2, 2000)
    assert ranges is not None and len(ranges) > 5 and ranges[0].layout.format == "pcapng"
    monkeypatch.setenv(RANGE_BYTES_ENV, "2000")
    want = cli(["export", str(ng), "--jobs", "1"])
    got = cli(["export", str(ng), "--jobs", "2"])
    assert parallel_run.last_fallback is None
    assert got == want
    assert want == cli(["export", "captures/kp_codecs.pcap", "--jobs", "1"])
