"""A real client's capture with flows that are not Kafka next to it (an SSH session that
spans the capture, a short HTTP exchange, a TLS handshake), as an operator records on a broker
host without a port filter: written with dpkt for the range tests. Optional: a health check
on the broker's port (connect and close, no payload), an HTTP exchange whose client port is
below its server's, and a Kafka exchange on the HTTP flow's 4-tuple after or before it."""

from __future__ import annotations

import random
from pathlib import Path

import dpkt

SSH = (b"\x0a\x00\x00\x05", 50022, b"\x0a\x00\x00\x09", 22)
HTTP = (b"\x0a\x00\x00\x05", 50080, b"\x0a\x00\x00\x09", 80)
TLS = (b"\x0a\x00\x00\x05", 50443, b"\x0a\x00\x00\x09", 443)
LOW_HTTP = (b"\x0a\x00\x00\x05", 1080, b"\x0a\x00\x00\x09", 8080)  # the client's port lower
CLIENT_HELLO = bytes.fromhex("16030100a5010000a10303") + bytes(range(32)) + b"\x00" * 40
# ApiVersions v0 (correlation id 7, client id "t") and its answer (one api: 18, versions 0-3)
API_VERSIONS = bytes.fromhex("0000000b" "0012" "0000" "00000007" "0001") + b"t"
API_VERSIONS_ANSWER = bytes.fromhex("00000010" "00000007" "0000" "00000001" "0012" "0000" "0003")


def _frame(flow: tuple, back: bool, seq: int, ack: int, flags: int, data: bytes) -> bytes:
    src, sport, dst, dport = flow
    if back:
        src, sport, dst, dport = dst, dport, src, sport
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=65535,
                       data=data)
    ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, ttl=64, data=tcp)
    ip.len = 20 + len(tcp)
    eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip)
    return bytes(eth)


class _Flow:
    """One TCP connection's packets, each stamped with the time it is sent at."""

    def __init__(self, key: tuple, isn: tuple[int, int] = (1000, 5000)) -> None:
        self.key, self.seq, self.out = key, list(isn), []

    def send(self, ts: float, back: bool, data: bytes = b"", flags: int = dpkt.tcp.TH_ACK) -> None:
        me, peer = (1, 0) if back else (0, 1)
        self.out.append((ts, _frame(self.key, back, self.seq[me], self.seq[peer], flags, data)))
        self.seq[me] += len(data) + bool(flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN))

    def open(self, ts: float) -> None:
        syn = dpkt.tcp.TH_SYN
        self.send(ts, False, flags=syn)
        self.send(ts + 1e-6, True, flags=syn | dpkt.tcp.TH_ACK)
        self.send(ts + 2e-6, False)

    def close(self, ts: float) -> None:
        fin = dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK
        self.send(ts, False, flags=fin)
        self.send(ts + 1e-6, True, flags=fin)
        self.send(ts + 2e-6, False)


def write(src: Path, dst: Path, ssh_packets: int = 80, ssh_bytes: int = 1200,
          mid_stream: bool = False, seed: int | None = None, probe: int | None = None,
          reuse: str = "") -> Path:
    """`src`'s packets and the three flows (`ssh_packets` client writes of `ssh_bytes`, each
    answered: past the engine's detection budget when more than 64 KiB in all) to `dst`;
    `mid_stream`: the SSH session's packets from the capture's middle on only (no SYN);
    `seed`: its payload random (as encrypted bytes are), else a repeated byte; `probe` (a
    port): a health check connecting to it and an HTTP exchange from port 1080 to 8080;
    `reuse` "after" / "before": a Kafka exchange on the HTTP flow's 4-tuple just after it
    closed / just before it opened."""
    rnd = None if seed is None else random.Random(seed)
    with src.open("rb") as f:
        kafka = list(dpkt.pcap.Reader(f))
    t0, t1 = kafka[0][0], kafka[-1][0]
    ssh, http, tls = _Flow(SSH), _Flow(HTTP), _Flow(TLS)
    ssh.open(t0 - 0.001)
    ssh.send(t0 - 0.0005, True, b"SSH-2.0-OpenSSH_9.6\r\n")
    if mid_stream:
        ssh.out.clear()
    step = (t1 - t0) / (ssh_packets + 1)
    for i in range(ssh_packets):
        if mid_stream and i < ssh_packets // 2:
            ssh.seq[0] += ssh_bytes
            ssh.seq[1] += 48
            continue
        ts = t0 + step * (i + 0.5)
        if rnd is None:
            ssh.send(ts, False, bytes([0xA5 ^ (i & 0x0F)]) * ssh_bytes)
            ssh.send(ts + 1e-5, True, b"\xc3" * 48)
        else:
            ssh.send(ts, False, rnd.randbytes(ssh_bytes))
            ssh.send(ts + 1e-5, True, rnd.randbytes(48))
    ssh.close(t1 + 0.001)
    mid = (t0 + t1) / 2
    http.open(mid)
    http.send(mid + 1e-4, False, b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n")
    http.send(mid + 2e-4, True, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    http.close(mid + 3e-4)
    at = t0 + (t1 - t0) / 3
    tls.open(at)
    tls.send(at + 1e-4, False, CLIENT_HELLO)
    tls.send(at + 2e-4, True, b"\x16\x03\x03\x00\x30" + b"\x02" * 48)
    extra = []
    if probe is not None:
        check, low = _Flow((SSH[0], 40000, SSH[2], probe), (7000, 9000)), _Flow(LOW_HTTP)
        check.open(at + 0.002)
        check.close(at + 0.003)
        low.open(mid + 0.002)
        low.send(mid + 0.0021, False, b"GET /health HTTP/1.1\r\nHost: broker\r\n\r\n")
        low.send(mid + 0.0022, True, b"HTTP/1.1 204 No Content\r\n\r\n")
        low.close(mid + 0.0023)
        extra += check.out + low.out
    if reuse:  # another connection (its own ISNs) on the 4-tuple, Kafka
        when = mid + 5e-4 if reuse == "after" else mid - 5e-4
        again = _Flow(HTTP, (90000, 70000))
        again.open(when)
        again.send(when + 1e-4, False, API_VERSIONS)
        again.send(when + 2e-4, True, API_VERSIONS_ANSWER)
        again.close(when + 3e-4)
        extra += again.out
    packets = sorted([*kafka, *ssh.out, *http.out, *tls.out, *extra], key=lambda p: p[0])
    with dst.open("wb") as f:
        w = dpkt.pcap.Writer(f, snaplen=262144, linktype=dpkt.pcap.DLT_EN10MB)
        for ts, buf in packets:
            w.writepkt(buf, ts)
    return dst
