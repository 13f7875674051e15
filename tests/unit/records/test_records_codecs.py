"""Bounded decompression: every codec, caps, cut and corrupt input."""

from __future__ import annotations

import gzip
import os
import warnings

import cramjam
import lz4.frame
import pytest
import zstandard

from dissectors.compression import decompress, output_cap
from dissectors.diagnostics import Code

with warnings.catch_warnings():  # kafka-python 3.0.12 warns at import (importlib.resources)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.codec import snappy_encode

PAYLOAD = b"".join(b"record %d with some repetitive text; " % i for i in range(3000))  # ~110 KB
RANDOM = os.urandom(150_000)


def enc_gzip(d):
    return gzip.compress(d, mtime=0)


def enc_snappy_raw(d):
    return bytes(cramjam.snappy.compress_raw(d))


def enc_xerial(d):
    return snappy_encode(d, xerial_compatible=True, xerial_blocksize=32 * 1024)


def enc_lz4(d):
    return lz4.frame.compress(d)


def enc_zstd(d):
    return zstandard.ZstdCompressor().compress(d)


ENCODERS = {
    "gzip": (1, enc_gzip),
    "snappy-raw": (2, enc_snappy_raw),
    "snappy-xerial": (2, enc_xerial),
    "lz4": (3, enc_lz4),
    "zstd": (4, enc_zstd),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
@pytest.mark.parametrize("payload", [PAYLOAD, RANDOM, b"x"], ids=["text", "random", "tiny"])
def test_roundtrip(name, payload):
    codec, enc = ENCODERS[name]
    res = decompress(codec, enc(payload), 1 << 24)
    assert res.error is None and res.data == payload


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_cap_stops_output(name):
    codec, enc = ENCODERS[name]
    res = decompress(codec, memoryview(enc(PAYLOAD)), 10_000)
    assert res.error is Code.DECOMPRESSION_LIMIT
    assert len(res.data) <= 10_000
    assert PAYLOAD.startswith(res.data)


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_cut_input_is_a_failure_not_a_crash(name):
    codec, enc = ENCODERS[name]
    data = enc(RANDOM)
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        res = decompress(codec, data[:cut], 1 << 24)
        assert res.error is Code.DECOMPRESSION_FAILED, cut
        assert RANDOM.startswith(res.data)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_is_a_failure(codec):
    for junk in (b"", b"\x00" * 5, os.urandom(64), b"\x82SNAPPY\x00" + b"\xff" * 12):
        res = decompress(codec, junk, 1 << 20)
        if codec == 2 and junk == b"":
            continue  # an empty raw snappy block is undecodable either way; no crash is the point
        assert res.error in (Code.DECOMPRESSION_FAILED, None)
        assert res.error is Code.DECOMPRESSION_FAILED or res.data == b""


def test_unknown_codec():
    res = decompress(6, b"abc", 100)
    assert res.error is Code.UNKNOWN_CODEC and res.data == b""


def test_gzip_concatenated_members():
    res = decompress(1, enc_gzip(b"abc") + enc_gzip(b"def"), 100)
    assert res.error is None and res.data == b"abcdef"


def test_snappy_announced_size_checked_before_expanding():
    res = decompress(2, enc_snappy_raw(b"\0" * 1_000_000), 50_000)
    assert res.error is Code.DECOMPRESSION_LIMIT and res.data == b""


def test_legacy_lz4_linked_blocks_fallback():
    """A frame with a wrong header checksum is walked by hand, including linked blocks."""
    data = bytearray(lz4.frame.compress(PAYLOAD * 3, block_size=lz4.frame.BLOCKSIZE_MAX64KB))
    assert not data[4] & 0x20  # linked blocks: later blocks reference earlier output
    data[6 + (8 if data[4] & 0x08 else 0)] ^= 0x5A  # break the header checksum
    res = decompress(3, bytes(data), 1 << 24)
    assert res.error is None and res.data == PAYLOAD * 3
    capped = decompress(3, bytes(data), 100_000)
    assert capped.error is Code.DECOMPRESSION_LIMIT and len(capped.data) <= 100_000


def test_output_cap():
    assert output_cap(1000, 64 << 20, 250) == 250_000
    assert output_cap(10**9, 64 << 20, 250) == 64 << 20
    assert output_cap(0, 64 << 20, 250) == 250
