"""Issue 20: `kanalyze_stream_bytes_total` follows open connections' bytes as they flow (it used
to count closed connections only, flat while megabytes went by)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kanalyze.capture import Packet
from kanalyze.engine import Engine
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response

prometheus_client = pytest.importorskip("prometheus_client")


def scrape(engine: Engine) -> dict[str, float]:
    from prometheus_client import CollectorRegistry

    from kanalyze.metrics import Metrics

    session = SimpleNamespace(
        source=SimpleNamespace(
            counters=SimpleNamespace(
                packets=0, bytes=0, truncated=0, kernel_packets=None, kernel_drops=None
            )
        ),
        engine=engine,
        stats=SimpleNamespace(exchanges=0),
        open_connections=len(engine.order),
        pending=0,
    )
    m = Metrics(CollectorRegistry())
    m.watch(session)
    out = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == "kanalyze_stream_bytes_total":
                out[s.labels["direction"]] = s.value
    return out


def test_open_connection_bytes_counted_as_they_flow() -> None:
    eng = Engine(lambda ex: None)
    conv = P.Conversation()
    pkts = conv.handshake()
    sent = {"client": 0, "broker": 0}
    no = 0

    def feed(p: bytes) -> None:
        nonlocal no
        no += 1
        eng.feed(Packet(no, 1_700_000_000_000_000_000 + no * 1000, 101, p))

    for p in pkts:
        feed(p)
    for corr in range(1, 6):
        req, rsp = apiv_request(corr), apiv_response(corr)
        feed(conv.send(True, req))
        feed(conv.send(False, rsp))
        sent["client"] += len(req)
        sent["broker"] += len(rsp)
        assert scrape(eng) == {"client": sent["client"], "broker": sent["broker"]}  # still open
    for p in conv.close():
        feed(p)
    eng.close()
    st = eng.stats
    assert (st.client.stream, st.broker.stream) == (sent["client"], sent["broker"])
    assert scrape(eng) == {"client": sent["client"], "broker": sent["broker"]}  # counted once
