"""The engine's public surface for live mode: pending and open counts, settling acks=0 requests."""

from __future__ import annotations

import struct
from collections.abc import Callable

from kanalyze.capture import Packet
from kanalyze.engine import Engine
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response

T0 = 1_700_000_000_000_000_000
RAW_IPV4 = 228


def _engine() -> tuple[Engine, list, Callable[[bytes], None]]:
    out: list = []
    clock = [0]
    eng = Engine(out.append)

    def feed(raw: bytes) -> None:
        clock[0] += 1
        eng.feed(Packet(clock[0], T0 + clock[0] * 1000, RAW_IPV4, raw))

    return eng, out, feed


def test_counts_and_settling_acks0_produce() -> None:
    eng, out, feed = _engine()
    a, b = P.Conversation(cport=40001), P.Conversation(cport=40002)
    for raw in a.handshake() + b.handshake():
        feed(raw)
    assert (eng.open_count, eng.pending_count) == (2, 0)
    acks0 = struct.pack("!hii", 0, 1000, 0)  # Produce v2: acks=0, timeout, no topics
    feed(a.send(True, P.request_frame(0, 2, 1, "p", acks0)))
    feed(b.send(True, apiv_request(7)))
    assert eng.pending_count == 1  # the ApiVersions request; acks=0 Produce awaits no answer
    eng.settle_unanswered(T0)  # before the Produce request: nothing to settle
    assert out == []
    eng.settle_unanswered(T0 + 1_000_000)
    assert [(ex.api, ex.status, ex.response is None) for ex in out] == [("Produce", "ok", True)]
    feed(b.send(False, apiv_response(7)))
    assert [(ex.api, ex.status, ex.response is None) for ex in out] == [
        ("Produce", "ok", True),
        ("ApiVersions", "ok", False),
    ]
    assert eng.pending_count == 0
    eng.close()
    assert eng.open_count == 0
