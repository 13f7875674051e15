"""Run the engine over bytes built in a test."""

from __future__ import annotations

from pathlib import Path

from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.session import Session
from tests.support import packets as P

APIV_REQ_BODY = b""
APIV_RESP_BODY = b"\x00\x00" + b"\x00\x00\x00\x00"  # error_code 0, no api keys (v0)


def apiv_request(corr: int, client_id: str = "test-client") -> bytes:
    return P.request_frame(18, 0, corr, client_id, APIV_REQ_BODY)


def apiv_response(corr: int) -> bytes:
    return P.response_frame(corr, APIV_RESP_BODY)


def run_file(path: Path, opts: EngineOptions | None = None) -> tuple[list[Exchange], Session]:
    s = Session([str(path)], opts or EngineOptions())
    return list(s.exchanges()), s


def run_pcap(
    tmp_path: Path,
    pkts: list[bytes],
    linktype: int = 101,
    opts: EngineOptions | None = None,
    name: str = "t.pcap",
) -> tuple[list[Exchange], Session]:
    path = tmp_path / name
    path.write_bytes(P.pcap([(1_700_000_000 + i * 0.001, p) for i, p in enumerate(pkts)], linktype))
    return run_file(path, opts)


def totals(engine: Engine) -> tuple[int, int]:
    """(stream bytes, frames + skipped + gaps) over both directions: must be equal."""
    st = engine.stats
    stream = st.client.stream + st.broker.stream
    parts = sum(t.frames + t.skipped + t.gaps for t in (st.client, st.broker))
    return stream, parts
