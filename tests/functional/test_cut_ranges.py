"""`--jobs 2` equals `--jobs 1` on captures that start mid-stream (issue 18): every real-client
capture cut at a few points (`tests/support/damage.py`: the packets before the cut dropped, as
a live capture joins a broker's connections), then cut into tiny byte ranges. Such captures
have orphan responses, whose api and place in the output depend on evidence from every
connection, and connections whose roles are only settled at the end of input: the stitch must
refuse exactly where a range cannot know what one process knows, and split the rest."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from kanalyze.commands import export as export_command
from kanalyze.parallel import range_session
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from tests.functional.test_ranges import ROOT, cli
from tests.support.damage import cut, read_pcap, write_pcap

REAL = sorted(p.name for p in (ROOT / "captures").glob("*.pcap"))
EIGHTHS = range(1, 8)  # export: cut at every eighth of the packets
SESSION = (2, 3, 4)  # summary and report: cut at 1/4, 3/8 and 1/2
RANGE_BYTES = "1500"


def _variants(name: str, tmp: Path, eighths: Iterable[int]) -> list[Path]:
    """`name` cut at each of `eighths` (each cut once: on a short capture some coincide)."""
    pcap = read_pcap(ROOT / "captures" / name)
    recs = pcap.records
    cuts = sorted({len(recs) * i // 8 for i in eighths} - {0})
    return [write_pcap(tmp / f"{Path(name).stem}-cut{k}.pcap", pcap, cut(recs, k))
            for k in cuts]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges run one after the other in this process (no workers), of `RANGE_BYTES`."""
    monkeypatch.setattr(
        export_command, "run_export", functools.partial(parallel_run.run_export, processes=False)
    )
    real = range_session.run_tasks
    monkeypatch.setattr(range_session, "run_tasks",
                        lambda tasks, _workers, fn: real(tasks, None, fn))
    monkeypatch.setenv(RANGE_BYTES_ENV, RANGE_BYTES)


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize("name", REAL)
def test_cut_captures_same_output(name: str, tmp_path: Path) -> None:
    """export, summary and report --json: byte for byte what one process writes."""
    for argv, eighths in (["export"], EIGHTHS), (["summary"], SESSION), (["report", "--json"],
                                                                          SESSION):
        for path in _variants(name, tmp_path, eighths):
            want = cli([*argv, str(path), "--jobs", "1"])
            got = cli([*argv, str(path), "--jobs", "2"])
            assert got == want, (path.name, argv)


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize("name", REAL)
def test_cut_captures_sharded(name: str, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture under 1 MB per range is sharded by connection instead: the same output (a
    shard sees only its connections' evidence and holds)."""
    monkeypatch.delenv(RANGE_BYTES_ENV)
    for path in _variants(name, tmp_path, EIGHTHS):
        want = cli(["export", str(path), "--jobs", "1"])
        got = cli(["export", str(path), "--jobs", "2"])
        assert got == want, path.name
        assert "ranges" not in parallel_run.last_timings


def _export_jobs2(name: str, k: int, tmp: Path) -> str | None:
    """Cut `name` at packet `k`, export it with `--jobs 2`; the fallback's reason, or None."""
    pcap = read_pcap(ROOT / "captures" / name)
    path = write_pcap(tmp / "cut.pcap", pcap, cut(pcap.records, k))
    want = cli(["export", str(path), "--jobs", "1"])
    got = cli(["export", str(path), "--jobs", "2"])
    assert got == want
    return parallel_run.last_fallback


@pytest.mark.usefixtures("in_process")
def test_clean_cut_still_split(tmp_path: Path) -> None:
    """A cut whose orphans are all settled inside range 0 is split, connections handed over."""
    assert _export_jobs2("kp_codecs.pcap", 49, tmp_path) is None
    assert parallel_run.last_timings["ranges"] > 5
    assert parallel_run.last_timings["handovers"] > 0


@pytest.mark.usefixtures("in_process")
def test_late_orphan_waits_logged(tmp_path: Path) -> None:
    """An orphan of a connection closed in range 0, settled when another connection's request
    tells its version: it held the output back until then (its wait is logged)."""
    assert _export_jobs2("admin.pcap", 37, tmp_path) is None


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(("name", "k", "why"), [
    # an orphan of range 0 settled in its overlap, after a later range's first request: one
    # process infers its api from what that request told (and settles it elsewhere)
    ("lib_legacy.pcap", 10, "settled after a request of a later range"),
    ("go_sarama.pcap", 83, "settled after a request of a later range"),
    # a connection held undecided to the end: one process releases exchanges while it
    # replays its packets there, before the orphan its close completes
    ("kcat_apiversions.pcap", 15, "roles were settled at the end of input"),
    # decided mid-run: an exchange held back for it goes out while its packets are replayed,
    # before an orphan (an early response) with an older start time
    ("kp_codecs.pcap", 174, "roles were settled late"),
])
def test_range_dependent_cuts_refused(name: str, k: int, why: str, tmp_path: Path) -> None:
    assert why in (_export_jobs2(name, k, tmp_path) or "")
