"""Adversarial captures (issue 20): the crash, leak and memory-amplifier inputs, built from specs.

Run from the repository root: ``python -m tests.support.adversarial`` writes the small ones to
tests/data/bounded/ (deterministic; a test checks the committed files equal a fresh build). The big
amplifiers are built at test time by the same functions, so the repository holds a few KB.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from collections.abc import Iterator
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
    body = (
        b"\0" + varint(delta) + varint(delta) + varint(len(key)) + key + varint(len(value)) + value
    )
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


# ---- (5) memory amplifiers (issue 20): built at test time, sizes as parameters ----
def legacy_message(
    offset: int, attributes: int = 0, value: bytes | None = None, magic: int = 0
) -> bytes:
    """A magic 0/1 message with a null key; 26 bytes with a null value (magic 0)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", TS) if magic == 1 else b"")
    body += struct.pack(">i", -1)
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def produce_v2(records: bytes, corr: int = 1) -> bytes:
    """A Produce v2 request (magic 0/1 message sets) with one partition holding `records`."""
    part = struct.pack(">i", 0) + struct.pack(">i", len(records)) + records
    body = (
        struct.pack(">hi", 1, 30000)
        + struct.pack(">i", 1)
        + string("t")
        + struct.pack(">i", 1)
        + part
    )
    return P.request_frame(0, 2, corr, "amp", body)


def big_capture(frames: list[tuple[bool, bytes]], mss: int = 65000) -> bytes:
    """One conversation, frames cut into `mss`-byte segments (raw IPv4: no Ethernet)."""
    conv = P.Conversation()
    pkts = conv.handshake()
    for c, f in frames:
        pkts += [conv.send(c, f[i : i + mss]) for i in range(0, len(f), mss)]
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def legacy_gzip_flood(n: int = 1_500_000) -> bytes:
    """One gzip wrapper holding `n` 26-byte magic-0 messages (n = 1.5 M: ~163 KB)."""
    body = legacy_message(0) * (n - 1)
    # an incompressible last message brings the ratio to ~240, just under the default 250 cap
    pad = (len(body) // 240) - len(gzip.compress(body, 9, mtime=0))
    rnd = random.Random(n).randbytes(max(pad, 0))
    inner = body + legacy_message(n - 1, value=rnd)
    wrapper = legacy_message(n - 1, 1, gzip.compress(inner, 9, mtime=0))
    return big_capture([(True, produce_v2(wrapper))])


def legacy_nested(depth: int = 8, fan: int = 64, leaf: int = 4000) -> bytes:
    """Wrappers `depth` deep, each level a gzip of `fan` copies of the level below (the leaf: `leaf`
    26-byte messages): the output grows as fan**depth while the input stays a few KB."""
    level = b"".join(legacy_message(i) for i in range(leaf))
    for _ in range(depth):
        wrapper = legacy_message(0, 1, gzip.compress(level, 9, mtime=0))
        level = wrapper * fan
    return big_capture([(True, produce_v2(legacy_message(0, 1, gzip.compress(level, 9, mtime=0))))])


def metadata_tags(topics: int = 20_000, tags: int = 20) -> bytes:
    """A Metadata v12 request: `topics` topics, each with `tags` unknown (empty) tagged fields."""
    one_tags = bytes([tags]) + b"".join(bytes([100 + t, 0]) for t in range(tags))

    def topic(i: int) -> bytes:
        name = b"t%d" % i
        return b"\0" * 16 + bytes([len(name) + 1]) + name + one_tags

    n = topics + 1
    count = bytearray()
    while n >= 0x80:
        count.append((n & 0x7F) | 0x80)
        n >>= 7
    count.append(n)
    body = bytes(count) + b"".join(topic(i) for i in range(topics)) + b"\0\0\0"
    return big_capture([(True, P.request_frame(3, 12, 1, "amp", body, flexible=True))])


def _partial_frame_packets(conns: int, size: int) -> Iterator[bytes]:
    head = P.request_frame(18, 0, 1, "amp", b"")[4:]
    for c in range(conns):
        conv = P.Conversation(client=f"10.1.{c // 250}.{c % 250 + 1}", cport=40000 + c)
        yield from conv.handshake()
        frame = struct.pack(">i", 256 * 1024) + head + b"x" * (size - 4 - len(head))
        for i in range(0, len(frame), 65000):
            yield conv.send(True, frame[i : i + 65000])


def partial_frames(conns: int = 100, size: int = 240 * 1024) -> bytes:
    """`conns` connections, each sending `size` bytes of a frame that claims 256 KiB, then
    silent."""
    pkts = list(_partial_frame_packets(conns, size))
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def write_partial_frames(path: Path, conns: int = 5000, size: int = 240 * 1024) -> None:
    """`partial_frames` written packet by packet (5,000 connections make a 1.2 GB file: too big
    to build in memory next to the process measuring it)."""
    with path.open("wb") as f:
        f.write(P.pcap([], 101))
        for i, pkt in enumerate(_partial_frame_packets(conns, size)):
            usec = i  # T0 + i microseconds, as `partial_frames`
            f.write(struct.pack("<IIII", int(T0) + usec // 1_000_000, usec % 1_000_000,
                                len(pkt), len(pkt)))
            f.write(pkt)


def syn_flood(n: int = 200_000, with_request: bool = False) -> bytes:
    """`n` SYNs from distinct client ports/addresses, never answered (with a request each)."""
    pkts: list[bytes] = []
    req = P.request_frame(18, 0, 1, "amp", b"")
    for i in range(n):
        conv = P.Conversation(
            client=f"10.{2 + i // 60000}.{i // 250 % 240}.{i % 250 + 1}", cport=1024 + i % 60000
        )
        pkts.append(conv.handshake()[0])
        if with_request:
            pkts.append(conv.send(True, req))
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def answered_behind_one(n: int = 100_000) -> bytes:
    """One request never answered, then `n` answered ones (a Produce v3 acks=1 of ~1 KB each):
    every later exchange waits behind the first for the order window, and the pending heap held
    each answered request until the connection closed (issue 20: a leak in the input's size)."""
    conv = P.Conversation()
    pkts = conv.handshake()
    pkts.append(conv.send(True, P.request_frame(18, 0, 0, "amp", b"")))  # never answered
    body = b"x" * 1000
    for i in range(1, n + 1):
        pkts.append(conv.send(True, P.request_frame(18, 0, i, "amp", body)))
        pkts.append(conv.send(False, P.response_frame(i, struct.pack(">h", 0) + b"\0" * 4)))
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def big_behind_one(n: int = 400, size: int = 256 * 1024) -> bytes:
    """One request never answered, then `n` Produce requests of `size` bytes each answered: a
    consumer's long poll holding a minute of traffic back (the order window). Before held
    frames were parked (kanalyze.held), every one of them stayed in memory until the end."""
    frames = [(True, P.request_frame(18, 0, 0, "amp", b""))]  # never answered
    body = b"x" * size
    for i in range(1, n + 1):
        frames.append((True, P.request_frame(18, 0, i, "amp", body)))
        frames.append((False, P.response_frame(i, struct.pack(">h", 0) + b"\0" * 4)))
    return big_capture(frames)


def released_behind_one(n: int = 1000, size: int = 100_000) -> bytes:
    """One request never answered, then, 100 s later, one `size`-byte Produce request a second,
    each answered: the order window (60 s) releases them as they come, but the engine's lists
    of answered requests (cleaned lazily behind the unanswered one) kept every frame alive until
    the end (kanalyze.held gives them on without leaving them there)."""
    conv = P.Conversation()
    pkts = [(0.0, p) for p in conv.handshake()]
    pkts.append((0.0, conv.send(True, P.request_frame(18, 0, 0, "amp", b""))))  # never answered
    body = b"x" * size
    for i in range(1, n + 1):
        frame = P.request_frame(18, 0, i, "amp", body)
        t = 100.0 + i
        pkts += [(t, conv.send(True, frame[j : j + 60000])) for j in range(0, len(frame), 60000)]
        pkts.append((t, conv.send(False, P.response_frame(i, struct.pack(">h", 0) + b"\0" * 4))))
    return P.pcap([(T0 + t + k * 1e-6, p) for k, (t, p) in enumerate(pkts)], 101)


def tiny_segments(conns: int = 1000, size: int = 2000) -> bytes:
    """`conns` connections, each sending `size` bytes of a large frame in 1-byte segments: the
    buffered bytes are few, their per-chunk bookkeeping is not."""
    pkts: list[bytes] = []
    head = P.request_frame(18, 0, 1, "amp", b"")[4:]
    for c in range(conns):
        conv = P.Conversation(client=f"10.3.{c // 250}.{c % 250 + 1}", cport=40000 + c % 20000)
        pkts += conv.handshake()
        frame = struct.pack(">i", 1024 * 1024) + head + b"x" * (size - 4 - len(head))
        pkts += [conv.send(True, frame[i : i + 1]) for i in range(len(frame))]
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def midstream_flood(n: int = 100_000) -> bytes:
    """`n` connections seen without their SYN, each one client packet carrying a request: each
    is held (its packets copied) until its bytes tell which side is the client."""
    pkts: list[bytes] = []
    req = P.request_frame(18, 0, 1, "amp", b"")
    for i in range(n):
        conv = P.Conversation(
            client=f"10.{2 + i // 60000}.{i // 250 % 240}.{i % 250 + 1}", cport=1024 + i % 60000
        )
        pkts.append(conv.send(True, req))
    return P.pcap([(T0 + i * 1e-6, p) for i, p in enumerate(pkts)], 101)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def metadata_names(topics: int = 50_000) -> bytes:
    """The body of a Metadata v1 request naming `topics` one-letter topics: ~3 wire bytes per
    topic, a struct node and a string node each in the decoded tree."""
    return struct.pack(">i", topics) + b"".join(string("t") for _ in range(topics))


def metadata_response_tags(tags: int = 150_000) -> bytes:
    """A Metadata v12 request answered by a response whose body ends with `tags` unknown (empty)
    tagged fields: ~3 wire bytes each (1 KiB each decoded: ~340 x), over the default decode
    budget (128 x frame + 64 MiB) past ~105,000 (summary decodes responses: its
    `limits.decode_budget` counts the cut)."""
    req = P.request_frame(3, 12, 1, "amp", b"\0\1\0\0", flexible=True)
    tag_bytes = b"".join(uvarint(100 + t) + b"\0" for t in range(tags))
    body = struct.pack(">i", 0) + b"\1" + b"\0" + struct.pack(">i", 1) + b"\1"
    body += uvarint(tags) + tag_bytes
    return big_capture([(True, req), (False, P.response_frame(1, body, flexible=True))])


AMPLIFIERS = {
    "midstream_flood": midstream_flood,
    "answered_behind_one": answered_behind_one,
    "big_behind_one": big_behind_one,
    "released_behind_one": released_behind_one,
    "tiny_segments": tiny_segments,
    "legacy_gzip_flood": legacy_gzip_flood,
    "legacy_nested": legacy_nested,
    "metadata_tags": metadata_tags,
    "partial_frames": partial_frames,
    "syn_flood": syn_flood,
}


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
