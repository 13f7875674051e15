"""Real TCP traffic on loopback carrying a capture's Kafka frames: a stand-in broker socket
answers each captured request with its captured response, over one real connection per captured
connection, in the capture's exchange order. A `kanalyze live -i lo` run sees genuine Kafka
conversations (handshakes, segmentation, timing of this machine) without a broker cluster:
followers, consumer groups and errors exactly as the capture has them."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from kanalyze.session import Session


def _frame(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def _recv_exact(s: socket.socket, n: int) -> None:
    while n:
        chunk = s.recv(min(n, 1 << 16))
        if not chunk:
            raise ConnectionError("peer closed")
        n -= len(chunk)


def replay(captures: list[Path], port: int, host: str = "127.0.0.1") -> int:
    """Replay every exchange with a captured request; returns the number replayed."""
    srv = socket.create_server((host, port))
    srv.settimeout(10)
    done = 0
    try:
        for cap in captures:
            conns: dict[int, tuple[socket.socket, socket.socket]] = {}
            try:
                for ex in Session([str(cap)]).exchanges():
                    if ex.request is None or ex.request.pdu.missing:
                        continue
                    pair = conns.get(ex.conn.id)
                    if pair is None:
                        client = socket.create_connection((host, port), timeout=10)
                        server, _addr = srv.accept()
                        server.settimeout(10)
                        pair = conns[ex.conn.id] = (client, server)
                    client, server = pair
                    req = _frame(ex.request.pdu.data)
                    client.sendall(req)
                    _recv_exact(server, len(req))
                    if ex.response is not None and not ex.response.pdu.missing:
                        rsp = _frame(ex.response.pdu.data)
                        server.sendall(rsp)
                        _recv_exact(client, len(rsp))
                    done += 1
            finally:
                for client, server in conns.values():
                    client.close()
                    server.close()
    finally:
        srv.close()
    return done
