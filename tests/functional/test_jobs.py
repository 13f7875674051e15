"""`--jobs N` prints exactly what one process prints: every capture, header-only and full,
with the shards run in this process (many shards, cheap) and once through real workers."""

from __future__ import annotations

import contextlib
import functools
import io
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.commands import export as export_command
from kanalyze.parallel import plan as plan_module
from kanalyze.parallel import run as parallel_run
from kanalyze.parallel.scan import scan

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = sorted(
    str(p.relative_to(ROOT))
    for pattern in ("captures/*.pcap", "captures/crafted/*.pcap*", "captures/replication/*.pcap*")
    for p in ROOT.glob(pattern)
    if not p.name.startswith("bad_")
)


def cli(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
        code = main(argv)
        text.flush()
    return code, out.getvalue(), err.getvalue()


def split_everything(loads, shards, bodies=True, start=()):  # noqa: ANN001, ANN201, ARG001
    """The hardest plan: every connection in `shards` pieces, one per shard."""
    plan = plan_module.Plan(shards, loads=[1.0] * shards)
    cuts = [plan_module.SLOTS * i // shards for i in range(shards + 1)]
    pieces = tuple(plan_module.Piece(i, cuts[i], cuts[i + 1]) for i in range(shards))
    plan.placed = dict.fromkeys(loads, pieces)
    return plan


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards run one after the other here (the plan and the merge, without spawning), every
    connection split over every shard, its bodies shared out by 64-byte blocks (not 64 KiB)
    so that the small captures' exchanges really are spread over the pieces."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(plan_module, "BLOCK_BYTES", 64)
    monkeypatch.setattr(parallel_run, "make_plan", split_everything)
    monkeypatch.setattr(
        export_command, "run_export", functools.partial(parallel_run.run_export, processes=False)
    )


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize("mode", [[], ["--header-only"]], ids=["full", "header-only"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_many_shards_same_output(capture: str, mode: list[str]) -> None:
    want = cli(["export", capture, *mode, "--jobs", "1"])
    got = cli(["export", capture, *mode, "--jobs", "7"])
    assert parallel_run.last_fallback is None  # merged, not redone in one process
    assert got == want


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(export_command, "run_export",
                        functools.partial(parallel_run.run_export, processes=False))


@pytest.mark.usefixtures("planned")
def test_planned_shards_same_output() -> None:
    """The planner's own plan, a big connection cut in pieces by it, in process."""
    capture = "captures/replication/textbook.pcap"
    plan = plan_module.make_plan(scan([capture]).loads, 3)
    assert max(len(p) for p in plan.placed.values()) >= 2
    want = cli(["export", capture, "--jobs", "1"])
    assert cli(["export", capture, "--jobs", "3"]) == want
    assert parallel_run.last_fallback is None


@pytest.mark.usefixtures("planned")
def test_topic_names_taught_on_another_shard_fall_back() -> None:
    """A Fetch naming topics by id on one shard, the Metadata that taught the names on another:
    the merge sees the shard decoded without the name and the run is redone in one process."""
    capture = "captures/lib_transactions.pcap"
    want = cli(["export", capture, "--jobs", "1"])
    assert cli(["export", capture, "--jobs", "7"]) == want
    assert parallel_run.last_fallback == "a topic name taught on another shard"


@pytest.mark.usefixtures("in_process")
def test_merged_files_same_output() -> None:
    """Several files merged by time: packet numbers and connection ids across the files."""
    files = ["captures/lib_codecs.pcap", "captures/lib_acks.pcap", "captures/kp_v25.pcap"]
    want = cli(["export", *files, "--jobs", "1"])
    got = cli(["export", *files, "--jobs", "5"])
    assert parallel_run.last_fallback is None
    assert got == want
    assert want[1].count(b"\n") > 100


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize(
    ("capture", "option", "reason"),
    [
        ("captures/lib_group_rebalance.pcap", ["--max-connections", "2"], "bound"),
        ("captures/crafted/large_frame_split.pcap", ["--max-buffered", "1"], "bound"),
    ],
)
def test_coupled_shards_fall_back(capture: str, option: list[str], reason: str) -> None:
    """Global bounds couple the shards: the run is redone in one process, output unchanged."""
    want = cli(["export", capture, *option, "--jobs", "1"])
    got = cli(["export", capture, *option, "--jobs", "3"])
    assert parallel_run.last_fallback is not None and reason in parallel_run.last_fallback
    assert got == want


def test_order_window_couples(monkeypatch: pytest.MonkeyPatch) -> None:
    from dissectors.context import DecodeContext
    from kanalyze.engine import EngineOptions

    monkeypatch.chdir(ROOT)
    out = io.BytesIO()
    opts = EngineOptions(order_window_ns=1)  # every pending request outlives the window
    done = parallel_run.run_export(
        ["captures/lib_codecs.pcap"], 3, opts, DecodeContext(), True, out, processes=False
    )
    assert done is None and out.getvalue() == b""
    assert parallel_run.last_fallback == "a request pending longer than the order window"


def test_real_workers_same_output(tmp_path: Path) -> None:
    """Spawned worker processes, through the console entry, with the closing notes on stderr."""
    def export(*argv: str) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "kanalyze.cli", "export", *argv]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)

    files = ["captures/lib_codecs.pcap", "captures/crafted/gap.pcap"]
    one, two = export(*files, "--jobs", "1"), export(*files, "--jobs", "2")
    assert two.stdout == one.stdout and two.stderr == one.stderr
    assert one.stdout.count(b"\n") > 50


def test_small_inputs_default_to_one_process() -> None:
    assert parallel_run.default_jobs(["captures/lib_codecs.pcap"], None) == 1
    assert parallel_run.default_jobs(["-"], 4) == 1
    assert parallel_run.default_jobs(["captures/lib_codecs.pcap"], 3) == 3
    assert parallel_run.default_jobs(["/dev/null"], 3) == 1  # not a regular file: read once


@pytest.mark.usefixtures("in_process")
def test_preloaded_topic_ids_reach_every_shard(tmp_path: Path) -> None:
    """--topic-ids names by-id topics from the first frame on, on every shard."""
    import json

    cap = "captures/replication/mixed_ids.pcap"
    truth = json.loads((ROOT / cap).with_suffix(".truth.json").read_text())
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({name: tid for tid, name in truth["topic_ids"].items()}))
    want = cli(["export", "--topic-ids", str(ids), cap, "--jobs", "1"])
    got = cli(["export", "--topic-ids", str(ids), cap, "--jobs", "4"])
    assert parallel_run.last_fallback is None
    assert got == want
    assert want[1].count(b'"topic_name"') >= 8


@pytest.mark.usefixtures("in_process")
@pytest.mark.parametrize("case", ["snaplen", "bad_linktype"])
def test_closing_notes_are_one_engines(case: str, tmp_path: Path) -> None:
    """A capture that needs a closing note (cut by a snaplen, nothing analyzed) is judged by
    one engine: the sharded run falls back and says the same, with the same exit status."""
    from tests.support import damage

    if case == "snaplen":
        src = damage.read_pcap(ROOT / "captures" / "lib_acks.pcap")
        path = damage.write_pcap(tmp_path / "cut.pcap", src, damage.snap(src.records, 200), 200)
        capture = str(path)
    else:
        capture = "captures/crafted/bad_linktype.pcap"
    want = cli(["export", capture, "--jobs", "1"])
    got = cli(["export", capture, "--jobs", "7"])
    assert parallel_run.last_fallback is not None
    assert got == want and want[2]  # the same note on stderr (and the same exit status)
