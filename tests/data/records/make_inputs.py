"""Make the committed adversarial records inputs (tests/data/records/*.bin).

Run from the repository root: ``python tests/data/records/make_inputs.py``.
Deterministic: the same bytes every run (the test suite checks that the
committed files equal a fresh build). Each input is a records field (what
follows the int32 size in Produce/Fetch), built from valid batches made by
kafka-python's builders or by the tiny independent encoder below, then damaged
in one documented way. `CASES` says what the decoder must report.
"""

from __future__ import annotations

import gzip
import struct
import sys
import warnings
import zlib
from pathlib import Path

import crc32c
import lz4.frame
import zstandard

with warnings.catch_warnings():  # kafka-python 3.0.12 warns at import (importlib.resources)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

HERE = Path(__file__).resolve().parent
TS = 1_700_000_000_000


# ---- an independent magic-2 encoder (used where a builder cannot make the damage) ----
def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(offset_delta: int, key: bytes | None, value: bytes | None, body_hook=None) -> bytes:
    body = bytearray(b"\0")  # attributes
    body += varint(offset_delta) + varint(offset_delta)  # timestamp delta, offset delta
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)  # no headers
    if body_hook:
        body = body_hook(body)
    return varint(len(body)) + bytes(body)


def batch(records: bytes, count: int, attributes: int = 0, base_offset: int = 0) -> bytes:
    head = struct.pack(">hiqqqhii", attributes, count - 1, TS, TS + count - 1, -1, -1, -1, count)
    body = head + records
    crc = crc32c.crc32c(body)
    return struct.pack(">qiibI", base_offset, 9 + len(body), 0, 2, crc) + body


def builder_batch(n: int, codec: int = 0, base_offset: int = 0, value=b"value") -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for i in range(n):
        b.append(i, TS + i, b"key%d" % i, value + b"%d" % i, [("h", b"v")])
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)  # base offset is outside the CRC
    return bytes(out)


def refresh_crc(b: bytearray) -> bytes:
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


# ---- legacy KafkaLZ4 (Kafka 0.8/0.9): header checksum taken over magic + descriptor ----
def xxh32(data: bytes, seed: int = 0) -> int:
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m

    n, i = len(data), 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed & m, (seed - p1) & m]
        while i + 16 <= n:
            for j in range(4):
                (lane,) = struct.unpack_from("<I", data, i + 4 * j)
                v[j] = (rotl((v[j] + lane * p2) & m, 13) * p1) & m
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + lane * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    return h ^ (h >> 16)


def legacy_kafka_lz4(payload: bytes) -> bytes:
    frame = bytearray(
        lz4.frame.compress(payload, content_checksum=False, block_linked=False, store_size=False)
    )
    assert frame[4] & 0x08 == 0  # no content size: the header is magic, FLG, BD, HC
    assert frame[6] == (xxh32(bytes(frame[4:6])) >> 8) & 0xFF  # our xxh32 agrees with liblz4
    frame[6] = (xxh32(bytes(frame[0:6])) >> 8) & 0xFF  # the wrong (Kafka 0.8) checksum
    assert frame[6] != (xxh32(bytes(frame[4:6])) >> 8) & 0xFF
    return bytes(frame)


def legacy_message(offset: int, magic: int, attributes: int, key, value, ts: int = TS) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    crc = zlib.crc32(body) & 0xFFFFFFFF
    msg = struct.pack(">I", crc) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def legacy_set(magic: int, n: int, codec: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i in range(n):
        b.append(i, TS + i if magic else None, b"k%d" % i, b"legacy value %d" % i)
    return bytes(b.build())


# ---- the cases ----
def crc_mismatch() -> bytes:
    first = bytearray(builder_batch(3))
    first[-10] ^= 0x01  # one bit flipped inside the last record's value
    return bytes(first) + builder_batch(2, base_offset=3)


def truncated_batch() -> bytes:
    b = bytearray(builder_batch(3))
    del b[-5:]  # the last record loses its tail; batch_length and CRC agree with the cut
    struct.pack_into(">i", b, 8, len(b) - 12)
    return refresh_crc(b) + builder_batch(2, base_offset=3)


def partial_trailing_batch() -> bytes:
    second = builder_batch(4, base_offset=3)
    return builder_batch(3) + second[:120]  # a Fetch cut at max_bytes: not an error


def bad_varint() -> bytes:
    def overlong(body):  # the key length becomes an 11-byte varint inside a record of right length
        return body[:3] + b"\xff" * 10 + b"\x01" + body[3:]

    recs = record(0, b"k0", b"v0") + record(1, b"k1", b"v1", overlong) + record(2, b"k2", b"v2")
    return batch(recs, 3)


def _bomb(codec: int, compress) -> bytes:
    payload = record(0, b"bomb", b"\0" * 10_000_000)  # one record with a 10 MB value of zeros
    comp = compress(payload)
    head = struct.pack(">hiqqqhii", codec, 0, TS, TS, -1, -1, -1, 1)
    body = head + comp
    return struct.pack(">qiibI", 0, 9 + len(body), 0, 2, crc32c.crc32c(body)) + body


def gzip_bomb() -> bytes:
    return _bomb(1, lambda d: gzip.compress(d, compresslevel=9, mtime=0)) + builder_batch(
        2, base_offset=1
    )


def zstd_bomb() -> bytes:
    return _bomb(4, lambda d: zstandard.ZstdCompressor(level=3).compress(d)) + builder_batch(
        2, base_offset=1
    )


def unknown_codec() -> bytes:
    b = bytearray(builder_batch(2))
    struct.pack_into(">h", b, 21, 5)  # codec id 5 does not exist
    return refresh_crc(b) + builder_batch(2, base_offset=2)


def wrong_batch_length() -> bytes:
    b = bytearray(builder_batch(2))
    struct.pack_into(">i", b, 8, 20)  # shorter than the 49-byte header remainder
    return bytes(b) + builder_batch(2, base_offset=2)


def wrong_key_length_v1() -> bytes:
    bad = bytearray(legacy_message(0, 1, 0, b"key", b"value"))
    struct.pack_into(">i", bad, 12 + 14, 1000)  # key length beyond the message
    struct.pack_into(">I", bad, 12, zlib.crc32(bytes(bad[16:])) & 0xFFFFFFFF)
    return bytes(bad) + legacy_message(1, 1, 0, b"k1", b"v1")


def xerial_snappy() -> bytes:
    # values big enough for several 32 KiB xerial blocks; kafka-python frames snappy the Java way
    return builder_batch(40, codec=2, value=b"x" * 3000)


def legacy_lz4_v0() -> bytes:
    inner = b"".join(legacy_message(i, 0, 0, b"k%d" % i, b"legacy lz4 %d" % i) for i in range(3))
    return legacy_message(2, 0, 3, None, legacy_kafka_lz4(inner))


def bad_magic() -> bytes:
    b = bytearray(builder_batch(1))
    b[16] = 7
    return bytes(b) + builder_batch(2, base_offset=1)


def legacy_unknown_codec() -> bytes:
    inner = legacy_message(0, 1, 0, b"k", b"v")
    return legacy_message(0, 1, 6, None, inner) + legacy_message(1, 1, 0, b"k1", b"v1")


def legacy_inner_crc_mismatch() -> bytes:
    inner = bytearray(b"".join(legacy_message(i, 1, 0, b"k%d" % i, b"v%d" % i) for i in range(3)))
    inner[-1] ^= 0x20  # the last inner message's value changes, its CRC does not
    return legacy_message(2, 1, 1, None, gzip.compress(bytes(inner), mtime=0))


# name -> (maker, expected diagnostic codes per batch, records decoded per batch, partial flags)
CASES = {
    "crc_mismatch": (crc_mismatch, [["crc_mismatch"], []], [3, 2], [False, False]),
    "truncated_batch": (
        truncated_batch,
        [["bad_record", "bad_record"], []],
        [2, 2],
        [False, False],
    ),
    "partial_trailing_batch": (partial_trailing_batch, [[], []], [3, 2], [False, True]),
    "bad_varint": (bad_varint, [["bad_varint"]], [2], [False]),
    "gzip_bomb": (gzip_bomb, [["decompression_limit"], []], [0, 2], [False, False]),
    "zstd_bomb": (zstd_bomb, [["decompression_limit"], []], [0, 2], [False, False]),
    "unknown_codec": (unknown_codec, [["unknown_codec"], []], [0, 2], [False, False]),
    "wrong_batch_length": (wrong_batch_length, [["bad_length"]], [0], [False]),
    "wrong_key_length_v1": (wrong_key_length_v1, [["bad_length"], []], [0, 1], [False, False]),
    "xerial_snappy": (xerial_snappy, [[]], [40], [False]),
    "legacy_lz4_v0": (legacy_lz4_v0, [[]], [3], [False]),
    "legacy_unknown_codec": (legacy_unknown_codec, [["unknown_codec"], []], [0, 1], [False, False]),
    "legacy_inner_crc_mismatch": (legacy_inner_crc_mismatch, [["crc_mismatch"]], [3], [False]),
    "bad_magic": (bad_magic, [["bad_magic"], []], [0, 2], [False, False]),
}


def build_all() -> dict[str, bytes]:
    return {name: maker() for name, (maker, *_rest) in CASES.items()}


if __name__ == "__main__":
    for name, data in build_all().items():
        (HERE / f"{name}.bin").write_bytes(data)
        print(f"{name}.bin: {len(data)} bytes")
    sys.exit(0)
