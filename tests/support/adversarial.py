"""Adversarial captures (issue 20): the crash, leak and memory-amplifier inputs, built from specs.

Run from the repository root: ``python -m tests.support.adversarial`` writes the small ones to
tests/data/bounded/ (deterministic; a test checks the committed files equal a fresh build). The big
amplifiers are built at test time by the same functions, so the repository holds a few KB.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from tests.support import packets as P

HERE = Path(__file__).resolve().parents[1] / "data" / "bounded"
TS = 1_700_000_000_000
T0 = 1_700_000_000.0


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(delta: int, key: bytes, value: bytes) -> bytes:
    body = b"\0" + varint(delta) + varint(delta) + varint(len(key)) + key + varint(len(value)) + value
    return varint(len(body + b"\0")) + body + b"\0"


def batch(n: int, base_offset: int = 0, value: bytes = b"value") -> bytes:
    """A valid magic-2 batch of `n` uncompressed records, no producer id."""
    recs = b"".join(record(i, b"k%d" % i, value) for i in range(n))
    head = struct.pack(">hiqqqhii", 0, n - 1, TS, TS + n - 1, -1, -1, -1, n)
    body = head + recs
    return struct.pack(">qiibI", base_offset, 9 + len(body), 0, 2, crc32c.crc32c(body)) + body


def string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def capture(frames: list[tuple[bool, bytes]], linktype: int = 1) -> bytes:
    """One client conversation (handshake, then each frame as one segment) as a pcap."""
    conv = P.Conversation()
    pkts = conv.handshake() + [conv.send(c, f) for c, f in frames]
    wrap = P.ethernet if linktype == 1 else (lambda ip: ip)
    return P.pcap([(T0 + i * 0.001, wrap(p)) for i, p in enumerate(pkts)], linktype)


# ---- (1) the report crash: Produce v7, one valid batch + 20 bytes of a second, acked at 0 ----
def produce_partial_second_batch() -> bytes:
    records = batch(1) + batch(2, base_offset=1)[:20]
    part = struct.pack(">i", 0) + struct.pack(">i", len(records)) + records
    body = struct.pack(">hhi", -1, 1, 30000) + struct.pack(">i", 1) + string("t")
    body += struct.pack(">i", 1) + part
    req = P.request_frame(0, 7, 1, "", body)
    presp = struct.pack(">ihqqq", 0, 0, 0, -1, 0)  # partition 0, error 0, base offset 0
    rbody = struct.pack(">i", 1) + string("t") + struct.pack(">i", 1) + presp + struct.pack(">i", 0)
    resp = P.response_frame(1, rbody)
    return capture([(True, req), (False, resp)])


# ---- (2) the leak: SaslAuthenticate v0 whose auth_bytes length is too short ----
PLAIN_SECRET = b"hunter2-correct-horse"


def sasl_plain_short_length() -> bytes:
    """PLAIN "\\0alice\\0<password>" with auth_bytes length 6: the password is left over as
    trailing bytes (it used to appear as `_trailing.b64`)."""
    token = b"\0alice\0" + PLAIN_SECRET
    hs = P.request_frame(17, 1, 1, "sasl", string("PLAIN"))
    hs_resp = P.response_frame(1, struct.pack(">h", 0) + struct.pack(">i", 1) + string("PLAIN"))
    req = P.request_frame(36, 0, 2, "sasl", struct.pack(">i", 6) + token)
    resp = P.response_frame(2, struct.pack(">hh", 0, -1) + struct.pack(">i", 0))
    return capture([(True, hs), (False, hs_resp), (True, req), (False, resp)])


COMMITTED = {
    "produce_partial_second_batch.pcap": produce_partial_second_batch,
    "sasl_plain_short_length.pcap": sasl_plain_short_length,
}


def build_all() -> dict[str, bytes]:
    return {name: maker() for name, maker in COMMITTED.items()}


if __name__ == "__main__":
    for name, data in build_all().items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
