"""Flows that are not Kafka next to Kafka (an SSH session over the whole capture, judged past
the detection budget many ranges after its start; a short HTTP exchange; a TLS handshake):
`--jobs N` over byte ranges prints exactly what one process prints (export lines and its TLS
note, summary, stats, report), stitched rather than run again in one process; and what one
process would judge differently is refused."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kanalyze.commands import export as export_command
from kanalyze.engine import EngineOptions
from kanalyze.parallel import range_engine, range_session, range_stats
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.parallel.range_plan import ConnEdge, RangeResult
from kanalyze.parallel.ranges import plan_ranges, run_range
from kanalyze.parallel.stitch import Unstitchable, stitch
from tests.functional import other_flows
from tests.functional.test_ranges import ROOT, cli

MODES = {"export": ["export"], "export-header-only": ["export", "--header-only"],
         "summary": ["summary"], "stats": ["stats"], "stats-json": ["stats", "--json"],
         "report": ["report"], "report-json": ["report", "--json"]}
TLS_NOTE = "TLS on 1 connection(s) (10.0.0.5:50443 -> 10.0.0.9:443)"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    dst = tmp_path_factory.mktemp("other") / "mixed.pcap"
    return str(other_flows.write(ROOT / "captures/kp_codecs.pcap", dst))


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges run one after the other in this process (export and the range sessions)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(export_command, "run_export",
                        functools.partial(parallel_run.run_export, processes=False))
    real = range_session.run_tasks
    monkeypatch.setattr(range_session, "run_tasks",
                        lambda tasks, _workers, fn: real(tasks, None, fn))


def _fallback(mode: str) -> str | None:
    return (parallel_run if mode.startswith("export") else range_session).last_fallback


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(("jobs", "size", "tail"), [(2, 3000, 8), (3, 20000, 32)])
@pytest.mark.parametrize("mode", MODES)
def test_same_output_stitched(mixed: str, mode: str, jobs: int, size: int, tail: int,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    want = cli([*MODES[mode], mixed, "--jobs", "1"])
    monkeypatch.setattr(range_engine, "MAX_TAIL", tail)
    monkeypatch.setenv(RANGE_BYTES_ENV, str(size))
    got = cli([*MODES[mode], mixed, "--jobs", str(jobs)])
    assert _fallback(mode) is None
    assert got == want
    if mode in ("export", "summary"):
        assert TLS_NOTE in got[2]


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize("mode", ["export", "stats-json"])
def test_encrypted_looking_session_stitched(tmp_path: Path, mode: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Random SSH bytes (a later run's view, framed from where it joined, may take a few for
    a request): still one process's output, stitched."""
    cap = str(other_flows.write(ROOT / "captures/kp_v25.pcap", tmp_path / "noisy.pcap", seed=3))
    want = cli([*MODES[mode], cap, "--jobs", "1"])
    monkeypatch.setenv(RANGE_BYTES_ENV, "2500")
    got = cli([*MODES[mode], cap, "--jobs", "2"])
    assert _fallback(mode) is None
    assert got == want


def test_later_views_dropped(mixed: str) -> None:
    """The SSH session is judged not Kafka by the run of range 0 (past the detection budget,
    ranges later) and its views in the later ranges are dropped; Spark's way (no `others`)
    still refuses."""
    ranges = plan_ranges([mixed], 2, 3000)
    assert ranges is not None and len(ranges) > 20
    results = [run_range(r, EngineOptions(), lambda ex: None) for r in ranges]
    st = stitch(results, EngineOptions(), others=True)
    owned = [results[r].conns[lid] for r, d in enumerate(st.own) for lid in d]
    assert sorted(e.flow[1] for e in owned if e.judged) == [
        "10.0.0.9:22", "10.0.0.9:443", "10.0.0.9:80"]
    dropped = [e for r, res in enumerate(results) for lid, e in res.conns.items()
               if e.key[3] == 22 and lid not in st.own[r] and e.opened <= res.end_pkt]
    assert len(dropped) > 10
    ssh = next(e for e in owned if e.judged and e.flow[1].endswith(":22"))
    assert ssh.judged[0] > results[0].end_pkt  # judged in range 0's overlap
    others = range_stats.other_flows(results, st)
    assert (others.non_kafka_connections, others.tls_connections) == (3, 1)
    with pytest.raises(Unstitchable, match="not Kafka"):
        stitch(results, EngineOptions())


@pytest.mark.usefixtures("in_process")
def test_mid_stream_flow_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An SSH session first seen mid-capture by a later range: that run joins it with other
    rules than one process (no detection budget): one process's output."""
    cap = str(other_flows.write(ROOT / "captures/kp_codecs.pcap", tmp_path / "mid.pcap",
                                mid_stream=True))
    want = cli(["summary", cap, "--jobs", "1"])
    monkeypatch.setenv(RANGE_BYTES_ENV, "3000")
    got = cli(["summary", cap, "--jobs", "2"])
    assert "found mid-stream after the first range" in (range_session.last_fallback or "")
    assert got == want


K1 = (b"\x0a\x00\x00\x05", 50022, b"\x0a\x00\x00\x09", 22)
K2 = (b"\x0a\x00\x00\x05", 50023, b"\x0a\x00\x00\x09", 9092)
FINAL = range_engine.FINAL


def _kafka(key: tuple = K2) -> ConnEdge:
    """A Kafka connection closed inside range 0 (no handover needed)."""
    e = ConnEdge(key, 1, True, closed=3, kafka=True)
    e.final = e.counts[0] = ((0,) * 12 + ({},),) * 2
    return e


def _other(key: tuple, opened: int, judged: int, closed: int = FINAL) -> ConnEdge:
    return ConnEdge(key, opened, True, closed=closed, ignored=True, judged=(judged, 0),
                    flow=("c", "b", False))


def _results(*conns: dict[int, ConnEdge]) -> list[RangeResult]:
    out = []
    for i, c in enumerate(conns):
        res = RangeResult(i, 10 * i, 10 * i + 10, conns=dict(c))
        out.append(res)
    return out


def test_kafka_in_a_later_range_refused() -> None:
    """Judged not Kafka by the run that saw its start, Kafka by a later run's view."""
    later = ConnEdge(K1, 12, False, closed=FINAL, kafka=True)
    results = _results({1: _kafka(), 2: _other(K1, 2, 5)}, {7: later})
    with pytest.raises(Unstitchable, match="not Kafka in one range, Kafka in another"):
        stitch(results, EngineOptions(), others=True)


def test_later_connection_on_its_tuple_refused() -> None:
    results = _results({1: _kafka(), 2: _other(K1, 2, 5), 3: _other(K1, 14, 15)}, {})
    with pytest.raises(Unstitchable, match="a later connection on its 4-tuple"):
        stitch(results, EngineOptions(), others=True)


def test_judged_at_the_end_in_two_ranges_refused() -> None:
    """One engine's order of verdicts at the end of input across ranges is not known."""
    k3 = (K1[0], 50024, K1[2], 80)
    results = _results({1: _kafka(), 2: _other(K1, 2, FINAL)}, {5: _other(k3, 12, FINAL)})
    st = stitch(results, EngineOptions(), others=True)
    with pytest.raises(Unstitchable, match="end of input in two ranges"):
        range_stats.other_flows(results, st)
