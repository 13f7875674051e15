"""`--jobs` shards replay the engine's output order from the oldest pending request each shard
notes per packet. Once more than ~1,000 answered requests piled up behind an unanswered one,
the engine rebuilt its pending heap as a new list while the shard loop kept reading the old
one: from then on a shard saw no pending request, and an exchange that completed while an
older request still waited came out before it (found on the 145 MB benchmark capture split
into three files, 30 lines from its end)."""

from __future__ import annotations

import io
import struct

import pytest

from dissectors.context import DecodeContext
from kanalyze.cli import main
from kanalyze.engine import EngineOptions
from kanalyze.parallel import run as parallel_run
from tests.support import packets as P

T0 = 1_700_000_000.0
OK = struct.pack(">h", 0) + b"\0" * 4  # an ApiVersions v0 answer without versions


def _capture(behind: int) -> bytes:
    """A request on A waits while `behind` exchanges on B complete (the heap outgrows its
    room), then A is answered; B's next request waits while a later one on C is answered
    first: one engine writes B's exchange before C's (start-time order)."""
    a, b, c = (P.Conversation(cport=40000 + i) for i in range(3))
    pkts = a.handshake() + b.handshake() + c.handshake()
    pkts.append(a.send(True, P.request_frame(18, 0, 0, "a", b"")))
    for i in range(1, behind + 1):
        pkts.append(b.send(True, P.request_frame(18, 0, i, "b", b"")))
        pkts.append(b.send(False, P.response_frame(i, OK)))
    pkts.append(a.send(False, P.response_frame(0, OK)))
    pkts.append(b.send(True, P.request_frame(18, 0, 99_999, "b", b"")))  # waits
    pkts.append(c.send(True, P.request_frame(18, 0, 7, "c", b"")))
    pkts.append(c.send(False, P.response_frame(7, OK)))  # done before B's, started after it
    pkts.append(b.send(False, P.response_frame(99_999, OK)))
    return P.pcap([(T0 + i * 1e-4, p) for i, p in enumerate(pkts)], 101)  # raw IP


def _one_process(path: str, capsys: pytest.CaptureFixture[str]) -> bytes:
    assert main(["export", path, "--jobs", "1"]) == 0
    return capsys.readouterr().out.encode()


@pytest.mark.parametrize("jobs", [1, 2])
def test_shards_keep_one_engines_order_after_the_pending_heap_is_rebuilt(
        tmp_path, capsys, jobs) -> None:  # noqa: ANN001
    path = tmp_path / "behind.pcap"
    path.write_bytes(_capture(1500))
    ref = _one_process(str(path), capsys)
    tail = [line.split(b'"client_id":"')[1][:1] for line in ref.splitlines()[-2:]]
    assert tail == [b"b", b"c"]  # what one engine does: B's waiting request first
    out = io.BytesIO()
    got = parallel_run.run_export([str(path)], jobs, EngineOptions(), DecodeContext(), False,
                                  out, processes=False)
    assert got is not None, parallel_run.last_fallback
    assert "shards" in parallel_run.last_timings  # the connection-shard path, not ranges
    assert out.getvalue() == ref
