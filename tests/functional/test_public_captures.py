"""Third-party captures, read with no hint: kanalyze must find what tshark finds when told the port.

The captures live outside the repository (``../shared/captures-public/``, see its
PROVENANCE.md): nobody on this project wrote them. Most are mid-stream excerpts without a TCP
handshake, several with the broker on port 36333, above the client's port. tshark is given the
right broker port (``-d tcp.port==P,kafka``); kanalyze is given nothing, so it must decide by
itself which side is the client and that the flow is Kafka.

For every capture: each request tshark dissects (packet, api key, version, correlation id) is
one of kanalyze's requests; each response tshark dissects (packet, correlation id) is one of
kanalyze's responses, with the api tshark matched it to. tshark 4.0 stops at some versions
(PROVENANCE.md lists them) but still decodes their headers, which is all compared here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kanalyze.engine import EngineOptions
from kanalyze.session import Session
from tests.support.public import PUBLIC
from tests.support.tshark import tshark_binary, tshark_pdus

# The broker port of each capture (PROVENANCE.md); everything else listens on 9092.
BROKER_36333 = frozenset(
    {
        "deepflow-fetch-v12-ok.pcap",
        "deepflow-joingroup-v7.pcap",
        "deepflow-leavegroup-v4.pcap",
        "deepflow-produce-v7-kafkapython-sw8.pcap",
        "deepflow-produce-v9-console-producer.pcap",
        "deepflow-produce-v9-request-only-2023.pcap",
        "deepflow-syncgroup-v5.pcap",
    }
)

pytestmark = [
    pytest.mark.tshark,
    pytest.mark.skipif(tshark_binary() is None, reason="tshark is not installed"),
    pytest.mark.skipif(not PUBLIC.is_dir(), reason="../shared/captures-public is not here"),
]


def _captures() -> list[Path]:
    return sorted(PUBLIC.glob("*.pcap*")) if PUBLIC.is_dir() else []


def broker_port(pcap: Path) -> int:
    return 36333 if pcap.name in BROKER_36333 else 9092


Seen = tuple[
    set[tuple[int, int | None, int | None, int | None]], dict[tuple[int, int | None], int | None]
]


def kanalyze_view(pcap: Path, ports: frozenset[int] = frozenset()) -> Seen:
    """Requests as (packet, api key, version, correlation id); responses (packet, corr) ->
    api key."""
    requests: set[tuple[int, int | None, int | None, int | None]] = set()
    responses: dict[tuple[int, int | None], int | None] = {}
    for ex in Session([str(pcap)], EngineOptions(ports=ports)).exchanges():
        if ex.request is not None:
            requests.add((ex.request.pdu.last_pkt, ex.api_key, ex.api_version, ex.correlation_id))
        if ex.response is not None:
            corr = int.from_bytes(ex.response.pdu.data[:4], "big", signed=True)
            responses[(ex.response.pdu.last_pkt, corr)] = ex.api_key
    return requests, responses


def test_all_fifteen_are_here() -> None:
    assert len(_captures()) == 15, [p.name for p in _captures()]


@pytest.mark.parametrize("pcap", _captures(), ids=lambda p: p.name)
def test_no_hint_finds_what_tshark_finds(pcap: Path) -> None:
    pdus = tshark_pdus(pcap, broker_port(pcap))
    assert pdus, "tshark found no Kafka PDU: the oracle itself is broken"
    requests, responses = kanalyze_view(pcap)
    t_requests = {
        (p.frame, p.api_key, p.api_version, p.correlation_id) for p in pdus if p.is_request
    }
    assert t_requests <= requests, (
        f"missed: {sorted(t_requests - requests)}; kanalyze: {sorted(requests)}"
    )
    for p in pdus:
        if p.is_request:
            continue
        key = (p.frame, p.correlation_id)
        assert key in responses, f"response {key} missed; kanalyze: {sorted(responses)}"
        if p.api_key is not None:
            assert responses[key] == p.api_key, (key, responses[key], p.api_key)
    # nothing invented: every request kanalyze reports is one tshark shows too
    assert requests <= t_requests, f"only kanalyze: {sorted(requests - t_requests)}"


@pytest.mark.parametrize("pcap", _captures(), ids=lambda p: p.name)
def test_port_hint_changes_nothing(pcap: Path) -> None:
    """With the right `--port`, the result is the same as with none: the content decided."""
    assert kanalyze_view(pcap) == kanalyze_view(pcap, frozenset({broker_port(pcap)}))


def test_ndpi_orphans_are_inferred() -> None:
    """ndpi-kafka.pcapng has three responses whose requests were not captured (tshark: "Request
    Missing", undecoded). Their own connections' requests (Metadata v2, correlation ids 130 and
    142 around 131 and 141) and, for the ApiVersions answer, the same client id's ApiVersions v0
    on other connections tell what they were; the bodies decode exactly."""
    pcap = PUBLIC / "ndpi-kafka.pcapng"
    orphans = [e for e in Session([str(pcap)]).exchanges() if e.status == "request_missing"]
    got = [
        (e.correlation_id, e.api, e.api_version, (e.inferred or {}).get("confidence"))
        for e in orphans
    ]
    assert got == [
        (131, "Metadata", 2, "high"),
        (140, "ApiVersions", 0, "low"),
        (141, "Metadata", 2, "high"),
    ]


def test_tui_store_keeps_inferred_orphans() -> None:
    """The TUI's store rebuilds exchanges from rows and spilled frames: an inferred orphan comes
    back equal (api, version, `inferred`, the body offset after a flexible header)."""
    from kanalyze.export import ExchangeEncoder
    from kanalyze.tui.store import ExchangeStore

    exs = list(Session([str(PUBLIC / "ndpi-kafka.pcapng")]).exchanges())
    st = ExchangeStore()
    st.add(exs)
    try:
        rebuilt = [ex for _i, ex in st.iter_exchanges()]
        assert rebuilt == exs
        assert sum(ex.inferred is not None for ex in rebuilt) == 3
        enc = ExchangeEncoder()
        assert [enc.line(ex) for ex in rebuilt] == [enc.line(ex) for ex in exs]
    finally:
        st.close()
