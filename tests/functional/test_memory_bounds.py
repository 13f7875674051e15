"""Issue 20: memory proportional to the input, not to what a frame claims.

Each amplifier the audit found is built at test time (tests/support/adversarial.py) and run
through the CLI in a subprocess under an address-space limit; its peak RSS must stay under the
bound docs/limits.md states ("Worst-case memory"). Before the decode budget the legacy flood
took 1.7 GB, the nested wrappers (--max-nesting 8) 24 GB, the Metadata tags 494 MB.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from dissectors.context import Limits
from tests.support import adversarial as A
from tests.support import big_responses

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
AS_LIMIT = 3 * 1024 * MB  # a regression fails here instead of swapping the machine
# the child's own peak: VmHWM belongs to the process image, where ru_maxrss survives exec and
# so reports at least the forking pytest worker's RSS (flaky: the worker grows test by test)
HWM = "int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"
RUN = (
    "import sys; from kanalyze.cli import main; rc = main(sys.argv[1:]); "
    f"sys.stderr.write('\\nRSS %d\\n' % {HWM}); "
    "sys.exit(rc)"
)


def peak_rss(argv: list[str], tmp: Path) -> int:
    """Peak RSS (bytes) of `kanalyze argv` in a fresh process; its output must be whole."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    out = tmp / "out"
    with out.open("wb") as f:
        r = subprocess.run(
            [sys.executable, "-c", RUN, *argv],
            stdout=f,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=600,
            preexec_fn=limit,
        )
    err = r.stderr.decode(errors="replace")
    # 3: nothing analyzed (a SYN flood carries no Kafka), said in one line
    assert r.returncode in (0, 3) and "Traceback" not in err, err[-2000:]
    assert r.returncode == 0 or "nothing analyzed" in err
    if argv[0] == "export":
        for line in out.read_bytes().splitlines():
            json.loads(line)
    return int(err.rsplit("RSS ", 1)[1].split()[0]) * 1024


@cache
def baseline() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return peak_rss(
            [
                "summary",
                str(ROOT / "tests" / "data" / "bounded" / "produce_partial_second_batch.pcap"),
            ],
            Path(d),
        )


def budget(frame: int, lim: Limits | None = None) -> int:
    """A frame's decode budget (docs/limits.md): ratio x its bytes + base, at most the max."""
    lim = lim or Limits()
    return min(lim.decode_budget_ratio * frame + lim.decode_budget_base, lim.decode_budget_max)


def _capture(tmp: Path, name: str, **kw: object) -> Path:
    path = tmp / f"{name}.pcap"
    path.write_bytes(A.AMPLIFIERS[name](**kw))
    return path


@pytest.mark.parametrize("mode", ["export", "report"])
def test_legacy_gzip_flood(tmp_path: Path, mode: str) -> None:
    """163 KB: one gzip wrapper of 1.5 M 26-byte messages (was 1.8 GB export, 1.6 GB report)."""
    cap = _capture(tmp_path, "legacy_gzip_flood")
    frame = cap.stat().st_size
    bound = baseline() + 2 * budget(frame)  # docs/limits.md: 2 x the frame's budget
    assert peak_rss([mode, str(cap)], tmp_path) < bound


def test_nested_legacy_wrappers_share_one_budget(tmp_path: Path) -> None:
    """5 KB of gzip wrappers 8 deep, each 64 copies of the one below (was 24 GB with
    --max-nesting 8)."""
    cap = _capture(tmp_path, "legacy_nested")
    rss = peak_rss(["export", "--max-nesting", "8", str(cap)], tmp_path)
    assert rss < baseline() + 64 * MB


def test_metadata_unknown_tags(tmp_path: Path) -> None:
    """1.3 MB Metadata v12 request, 20,000 topics x 20 unknown tagged fields (was 494 MB)."""
    cap = _capture(tmp_path, "metadata_tags")
    frame = cap.stat().st_size
    assert peak_rss(["export", str(cap)], tmp_path) < baseline() + 2 * budget(frame)


def test_decode_budget_max_bounds_a_frame_whatever_its_size(tmp_path: Path) -> None:
    """The same 1.3 MB request under --decode-budget-max 96 MiB (its ratio allows 229 MiB):
    the max is what bounds it."""
    cap = _capture(tmp_path, "metadata_tags")
    cap_max = 96 * MB
    assert budget(cap.stat().st_size, Limits(decode_budget_max=cap_max)) == cap_max
    rss = peak_rss(["export", "--decode-budget-max", str(cap_max), str(cap)], tmp_path)
    assert rss < baseline() + 1.5 * cap_max


@pytest.mark.parametrize("mode", ["export", "report"])
def test_small_frames_claiming_huge_arrays_cost_nothing(tmp_path: Path, mode: str) -> None:
    """Metadata v12 responses of a few bytes whose arrays claim 2**31 brokers, topics or
    partitions (1,000 of them): a count over the bytes left is `array_too_large` before
    anything is allocated, whatever the budget allows."""
    huge = A.uvarint(2**31)
    bodies = [
        b"\0\0\0\0" + huge + b"\0" * 8,  # brokers
        b"\0\0\0\0\1\0\0\0\0\1" + huge + b"\0" * 8,  # topics
        b"\0\0\0\0\1\0\0\0\0\1\2\0\0\2t" + b"\0" * 17 + huge,  # partitions
    ]
    frames: list[tuple[bool, bytes]] = []
    for i in range(1000):
        corr = i + 1
        frames.append((True, A.P.request_frame(3, 12, corr, "amp", b"\0\1\0\0", True)))
        frames.append((False, A.P.response_frame(corr, bodies[i % 3], True)))
    cap = tmp_path / "claims.pcap"
    cap.write_bytes(A.big_capture(frames))
    assert peak_rss([mode, str(cap)], tmp_path) < baseline() + 16 * MB
    if mode == "export":
        assert b"array_too_large" in (tmp_path / "out").read_bytes()


def test_big_legit_metadata_response_decodes_in_proportion(tmp_path: Path) -> None:
    """A 2 MB Metadata v12 response of 50,000 partitions (kio-encoded) decodes whole on the
    tree path (the TUI's, report's): its cost is ~68 x its bytes, under 128 x."""
    body = big_responses.metadata_v12(partitions=50_000)
    req = A.P.request_frame(3, 12, 1, "big", b"\0\1\0\0", flexible=True)
    cap = tmp_path / "big.pcap"
    cap.write_bytes(A.big_capture([(True, req), (False, A.P.response_frame(1, body, True))]))
    rss = tree_rss(cap, request=False)
    assert rss < baseline() + 1.5 * 128 * len(body)


TREE = (
    "import sys; from kanalyze.session import Session; "
    "from kanalyze.bodies import BodyDecoder; from dissectors import node_to_json; "
    "dec = BodyDecoder(); n = 0; req = sys.argv[2] == 'request'\n"
    "for ex in Session([sys.argv[1]]).exchanges():\n"
    "    node, ctx = dec.node(ex, ex.request if req else ex.response, req)\n"
    "    assert 'decode_budget' not in str(node_to_json(node, ctx)) or req\n"
    f"sys.stderr.write('RSS %d\\n' % {HWM})"
)


def tree_rss(cap: Path, request: bool = True) -> int:
    """Peak RSS of decoding each exchange's request (or response) as the TUI's tree pane does."""
    r = subprocess.run(
        [sys.executable, "-c", TREE, str(cap), "request" if request else "response"],
        capture_output=True, cwd=ROOT, timeout=600,
    )
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0 and "Traceback" not in err, err[-2000:]
    return int(err.rsplit("RSS ", 1)[1].split()[0]) * 1024


def test_metadata_unknown_tags_node_tree(tmp_path: Path) -> None:
    """The same Metadata request through the Node walker the TUI and report use (the decode tree
    pane: `BodyDecoder.node`, then its JSON): within the same bound (was 507 MB)."""
    cap = _capture(tmp_path, "metadata_tags")
    frame = cap.stat().st_size
    assert tree_rss(cap) < baseline() + 2 * budget(frame)


@pytest.mark.parametrize("mode", ["export", "summary"])
def test_frames_held_behind_a_waiting_request_are_parked(tmp_path: Path, mode: str) -> None:
    """400 frames of 256 KiB (100 MiB) held behind one unanswered request: parked in a
    temporary file (kanalyze.held) past 16 MiB held, so RSS stays near the baseline (was
    ~2 x 100 MiB: every frame in memory until the end). ~5 s."""
    cap = _capture(tmp_path, "big_behind_one")
    rss = peak_rss([mode, str(cap)], tmp_path)
    assert rss < baseline() + 16 * MB + 40 * MB


def test_frames_released_behind_a_waiting_request_are_not_kept(tmp_path: Path) -> None:
    """1,000 requests of 100 KB released by the order window behind one never answered: the
    engine's lists of answered requests keep stubs, not their frames (was ~2 x 100 MB: every
    frame until the end). ~3 s."""
    cap = _capture(tmp_path, "released_behind_one")
    assert peak_rss(["summary", str(cap)], tmp_path) < baseline() + 40 * MB


# docs/limits.md "Worst-case memory": RSS per open connection (4.0 KB measured with 100,000 open)
# and of what --max-buffered bounds (EngineStats.held: 1.0-1.4 x, allocator slack included)
CONN_RSS = 4608
HELD_RSS = 1.5
DEFAULT_MAX_BUFFERED = 1024 * MB


def test_syn_flood_connection_cost(tmp_path: Path) -> None:
    """200,000 SYNs never answered, default limits (100,000 connections open at most): was 656 MB
    (6.3 KB a connection), now ~420 MB. ~30 s (more on a loaded machine)."""
    cap = _capture(tmp_path, "syn_flood", n=200_000)
    rss = peak_rss(["summary", str(cap)], tmp_path)
    assert rss < baseline() + 100_000 * CONN_RSS + 16 * MB


def test_syn_flood_with_requests(tmp_path: Path) -> None:
    """120,000 SYNs each followed by a request never answered (over the 100,000 cap, so the peak
    is the same as with 200,000: 874 MB before, 596 MB now); the waiting requests are charged to
    --max-buffered (PENDING_COST + the frame). ~35 s."""
    cap = _capture(tmp_path, "syn_flood", n=120_000, with_request=True)
    rss = peak_rss(["summary", str(cap)], tmp_path)
    held = 100_000 * (1400 + 60)  # what the engine charged for the waiting requests
    assert rss < baseline() + 100_000 * CONN_RSS + HELD_RSS * held + 16 * MB


def test_partial_frames_buffered_cost(tmp_path: Path) -> None:
    """5,000 connections each holding 240 KiB of a 256 KiB frame (1.2 GB offered), default
    --max-buffered (1 GiB): was 1.85 GB (each partial frame copied twice at the end, each copy
    leaving a hole the allocator could not reuse), now ~1.12 GB. ~15 s, a 1.2 GB file."""
    cap = tmp_path / "partial.pcap"
    A.write_partial_frames(cap, conns=5000)
    rss = peak_rss(["summary", str(cap)], tmp_path)
    cap.unlink()
    assert rss < baseline() + 5000 * CONN_RSS + 1.1 * DEFAULT_MAX_BUFFERED


@pytest.mark.parametrize(
    ("name", "kw", "conns", "slack"),
    [
        # exchanges held back by one unanswered request (before: 306 MB)
        ("answered_behind_one", {"n": 100_000}, 1, 40 * MB),
        # 400,000 one-byte segments buffered (before: 148 MB with 300 connections)
        ("tiny_segments", {"conns": 200, "size": 2000}, 200, 16 * MB),
        # connections held until their roles are known, then open (each a connection's cost;
        # not a regression: before, 30,000 of them also fit)
        ("midstream_flood", {"n": 30_000}, 30_000, 40 * MB),
    ],
)
def test_held_state_is_bounded_by_max_buffered(
    tmp_path: Path, name: str, kw: dict, conns: int, slack: int
) -> None:
    """What the engine holds besides connections -- exchanges waiting for their turn, buffered
    chunks, packets of undecided connections -- is charged at its Python cost, so a 32 MiB
    --max-buffered bounds the RSS. ~15-40 s each (twice that on a loaded machine)."""
    cap = _capture(tmp_path, name, **kw)
    bound = 32 * MB
    rss = peak_rss(["summary", "--max-buffered", str(bound), str(cap)], tmp_path)
    # slack: the command's own state (summary keeps each exchange's latency), the capture block
    assert rss < baseline() + conns * CONN_RSS + HELD_RSS * bound + slack
