"""Roles by content (kanalyze/roles.py) and what the CLI says when nothing is Kafka."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.commands.common import NOTHING_ANALYZED
from kanalyze.connection import ROLE_PACKETS
from kanalyze.engine import EngineOptions
from kanalyze.roles import _names_client, judge, request_ids
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response, run_pcap

MF = 256 * 1024 * 1024


def test_requests_chain_from_the_start() -> None:
    data = apiv_request(7) + apiv_request(8) + apiv_request(9)
    assert request_ids(data, MF) == [7, 8, 9]


def test_mid_frame_start_needs_confirmation() -> None:
    # the capture began inside a frame: the tail of one, then two whole requests
    data = b"\x00" * 5 + b"tail!" + apiv_request(7) + apiv_request(8)
    assert request_ids(data, MF) == [7, 8]
    assert request_ids(b"\x00" * 5 + b"garbage bytes here, no kafka", MF) == []


def test_response_that_looks_like_a_request_is_still_the_broker() -> None:
    # correlation id 1 reads as api 0 (Produce) v1, and the body's first int16 (0) as an empty
    # client id: the broker's bytes are a "plausible request" too. The correlation id decides.
    req, resp = apiv_request(1), apiv_response(1)
    assert request_ids(resp, MF), "premise: the response parses as a request header"
    assert judge(req, resp, MF) is True
    assert judge(resp, req, MF) is False


def _produce_v1_response(corr: int, topic: bytes = b"orders") -> bytes:
    body = struct.pack("!i", 1) + struct.pack("!h", len(topic)) + topic  # one topic
    body += struct.pack("!iihqi", 1, 0, 0, 5, 0)  # one partition: ok, base offset 5; throttle 0
    return P.response_frame(corr, body)


def test_lone_broker_whose_response_names_a_client_is_still_the_broker() -> None:
    # correlation id 1 reads as Produce v1, the topic count as a correlation id and the topic
    # name as a client id: the header rule alone called this direction a client. Its body fits
    # the Produce response layout and does not decode as a Produce request.
    resp = _produce_v1_response(1) + _produce_v1_response(2)
    assert request_ids(resp, MF) and _names_client(resp, MF), "premise: reads as a request"
    assert judge(resp, b"", MF) is False
    assert judge(b"", resp, MF) is True


def test_lone_client_naming_nobody_is_told_by_its_body() -> None:
    # an empty client id names nobody, but the frame decodes exactly as a Metadata v0 request
    # (one topic) and fits no response layout
    req = P.request_frame(3, 0, 7, "", struct.pack("!ih", 1, 6) + b"orders")
    assert not _names_client(req, MF)
    assert judge(req, b"", MF) is True
    # a tiny one (no topics) fits a dozen response layouts: nothing said, the port decides
    tiny = P.request_frame(3, 0, 7, "", b"\x00\x00\x00\x00")
    assert judge(tiny, b"", MF, final=True) is None


def test_no_evidence_is_none() -> None:
    assert judge(b"hello world, not kafka", b"HTTP/1.1 200 OK\r\n", MF) is None
    assert judge(b"", b"", MF) is None


@pytest.mark.parametrize("bport", [36333, 65000, 9092])
@pytest.mark.parametrize("first_from_client", [True, False])
def test_broker_on_a_higher_port_mid_stream(
    tmp_path: Path, bport: int, first_from_client: bool
) -> None:
    """No SYN, broker port above the client's: the bytes decide, whoever speaks first."""
    c = P.Conversation(cport=30120, bport=bport)
    pkts = [c.send(False, apiv_response(4))] if not first_from_client else []  # an orphan answer
    pkts += [c.send(True, apiv_request(5)), c.send(False, apiv_response(5))]
    exs, _ = run_pcap(tmp_path, pkts)
    paired = [e for e in exs if e.status == "ok"]
    assert [(e.api_key, e.correlation_id) for e in paired] == [(18, 5)]
    assert paired[0].conn.broker.endswith(f":{bport}")
    assert paired[0].latency_ns is not None and paired[0].latency_ns > 0


def test_a_first_frame_longer_than_the_hold_does_not_hand_the_roles_to_the_port(
    tmp_path: Path,
) -> None:
    """Mid-stream, broker above the client's port, and only the broker speaks for more packets
    than the first hold (a 60 KB response whose body says nothing): the bytes cannot tell
    yet, and the lower port would make the broker the client. The connection stays held until
    the client's request and its answer tell."""
    c = P.Conversation(cport=30120, bport=65000)
    big = P.response_frame(5, bytes(60_000))  # reads as a Produce v5 header naming nobody
    pkts = [c.send(False, big[i : i + 1400]) for i in range(0, len(big), 1400)]
    assert len(pkts) > ROLE_PACKETS
    pkts += [c.send(True, apiv_request(6)), c.send(False, apiv_response(6))]
    exs, s = run_pcap(tmp_path, pkts)
    assert [(e.correlation_id, e.status) for e in exs if e.status == "ok"] == [(6, "ok")]
    assert {e.conn.broker for e in exs} == {"10.0.0.2:65000"}
    assert s.engine is not None and s.engine.stalled_bytes == 0


def test_port_hint_wins_over_content(tmp_path: Path) -> None:
    c = P.Conversation(cport=30120, bport=36333)
    pkts = [c.send(True, apiv_request(5)), c.send(False, apiv_response(5))]
    exs, _ = run_pcap(tmp_path, pkts, opts=EngineOptions(ports=frozenset({30120})))
    assert all(e.conn.broker.endswith(":30120") for e in exs)
    assert not any(e.status == "ok" for e in exs)


def _write(tmp_path: Path, pkts: list[bytes], linktype: int = 101) -> str:
    path = tmp_path / "c.pcap"
    path.write_bytes(P.pcap([(1_700_000_000 + i * 0.001, p) for i, p in enumerate(pkts)], linktype))
    return str(path)


TLS_HELLO = b"\x16\x03\x01\x00\x2a" + b"\x01\x00\x00\x26\x03\x03" + b"\x11" * 36


@pytest.mark.parametrize("command", ["export", "summary", "report"])
def test_tls_only_is_named_and_exits_nonzero(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    c = P.Conversation(bport=9093)
    pkts = c.handshake() + [
        c.send(True, TLS_HELLO),
        c.send(False, b"\x16\x03\x03\x00\x10" + b"\x02" * 16),
    ]
    assert main([command, _write(tmp_path, pkts)]) == NOTHING_ANALYZED
    err = capsys.readouterr().err
    assert "TLS on 1 connection(s) (10.0.0.1:40000 -> 10.0.0.2:9093)" in err
    assert "PLAINTEXT" in err
    assert "nothing analyzed: every connection is TLS" in err


def test_tls_next_to_kafka_is_a_note_exit_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    k = P.Conversation(cport=40001)
    t = P.Conversation(cport=40002, bport=9093)
    pkts = k.handshake() + [k.send(True, apiv_request(1)), k.send(False, apiv_response(1))]
    pkts += t.handshake() + [t.send(True, TLS_HELLO)]
    assert main(["export", _write(tmp_path, pkts)]) == 0
    captured = capsys.readouterr()
    assert "TLS on 1 connection(s)" in captured.err
    assert "nothing analyzed" not in captured.err
    assert captured.out.count("\n") == 1


def test_no_kafka_names_flows_and_port_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = P.Conversation(bport=8080)
    pkts = c.handshake() + [
        c.send(True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        c.send(False, b"HTTP/1.1 200 OK\r\n\r\n"),
    ]
    assert main(["summary", _write(tmp_path, pkts)]) == NOTHING_ANALYZED
    err = capsys.readouterr().err
    assert "no Kafka request found on 1 TCP connection(s) (10.0.0.1:40000 -> 10.0.0.2:8080)" in err
    assert "--port" in err


def test_unsupported_link_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", _write(tmp_path, [b"\x00" * 60], linktype=147)]) == NOTHING_ANALYZED
    assert "unsupported link type (1 packets of link type 147)" in capsys.readouterr().err
