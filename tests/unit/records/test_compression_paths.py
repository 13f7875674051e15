"""The fast decompression paths (ISA-L for gzip, one call for an lz4 or zstd frame of announced
size) give exactly what the bounded streaming paths give: same bytes, same diagnostic, same
message, on whole, cut, flipped, padded and concatenated input under every kind of cap."""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors import compression
from dissectors.compression import Decompressed, decompress

TEXT = b"".join(b'{"user": %d, "note": "some repetitive text"} ' % i for i in range(400))


def _gzip_named(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile("batch.json", "wb", fileobj=buf, mtime=7) as f:  # FNAME in the header
        f.write(data)
    return buf.getvalue()


def _gzip_header_crc(data: bytes) -> bytes:
    """A gzip member with FHCRC (a CRC16 of its header), which zlib checks."""
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    head = b"\x1f\x8b\x08\x02\x00\x00\x00\x00\x00\xff"
    head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    return head + body + struct.pack("<II", zlib.crc32(data), len(data))


def _zstd_unsized(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=False).compress(data)


def _zstd_skippable(data: bytes) -> bytes:
    return b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd" + zstandard.ZstdCompressor().compress(data)


# codec id, encoder: the shapes clients write and a few they do not
ENCODINGS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "gzip": (1, lambda d: gzip.compress(d, mtime=0)),
    "gzip-named": (1, _gzip_named),
    "gzip-header-crc": (1, _gzip_header_crc),
    "gzip-two-members": (1, lambda d: gzip.compress(d[:500]) + gzip.compress(d[500:])),
    "gzip-zero-padded": (1, lambda d: gzip.compress(d) + b"\x00" * 5),
    "zlib": (1, lambda d: zlib.compress(d, 6)),
    "raw-deflate": (1, lambda d: zlib.compress(d)[2:-4]),
    "lz4": (3, lambda d: lz4.frame.compress(d, store_size=True)),
    "lz4-unsized": (3, lambda d: lz4.frame.compress(d, store_size=False)),
    "lz4-checksums": (
        3,
        lambda d: lz4.frame.compress(
            d, store_size=True, content_checksum=True, block_checksum=True, block_linked=False
        ),
    ),
    "lz4-two-frames": (3, lambda d: lz4.frame.compress(d) + lz4.frame.compress(d[:99])),
    "zstd": (4, lambda d: zstandard.ZstdCompressor().compress(d)),
    "zstd-checksum": (4, lambda d: zstandard.ZstdCompressor(write_checksum=True).compress(d)),
    "zstd-unsized": (4, _zstd_unsized),
    "zstd-two-frames": (4, lambda d: zstandard.ZstdCompressor().compress(d) * 2),
    "zstd-skippable": (4, _zstd_skippable),
}


@contextmanager
def bounded_paths() -> Iterator[None]:
    """`decompress` with only the streaming paths (zlib for gzip): the reference."""
    saved = dict(compression._CODECS)
    compression._CODECS.update(
        {
            1: lambda data, cap: compression._inflate(zlib, data, cap),
            3: compression._lz4_stream,
            4: compression._zstd_stream,
        }
    )
    try:
        yield
    finally:
        compression._CODECS.update(saved)


def both(codec: int, data: bytes, cap: int) -> tuple[Decompressed, Decompressed]:
    fast = decompress(codec, data, cap)
    with bounded_paths():
        ref = decompress(codec, data, cap)
    return fast, ref


def test_isal_is_what_gzip_runs_on():
    """ISA-L is a dependency: without it the gzip comparisons below would compare zlib with
    itself."""
    assert compression._isal_zlib() is not None


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_whole_input_same_as_bounded(name):
    codec, enc = ENCODINGS[name]
    data = enc(TEXT)
    for cap in (0, 1, 499, 500, len(TEXT) - 1, len(TEXT), len(TEXT) + 1, 1 << 24):
        fast, ref = both(codec, data, cap)
        assert fast == ref, (name, cap)
    whole = decompress(codec, data, 1 << 24)
    if name == "raw-deflate":  # no gzip or zlib header: refused by both
        assert whole.error is not None and whole.data == b""
    else:
        assert whole.error is None and whole.data.startswith(TEXT[:500])


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(sorted(ENCODINGS)),
    size=st.integers(0, len(TEXT)),
    edits=st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "append", "set"]), st.integers(0, 1 << 16),
                  st.integers(0, 255)),
        max_size=3,
    ),
    cap=st.one_of(st.integers(0, 2 * len(TEXT)), st.just(1 << 24)),
)
def test_damaged_input_same_as_bounded(name, size, edits, cap):
    codec, enc = ENCODINGS[name]
    data = bytearray(enc(TEXT[:size]))
    for op, where, value in edits:
        if not data:
            break
        at = where % len(data)
        if op == "flip":
            data[at] ^= 1 << (value % 8)
        elif op == "set":
            data[at] = value
        elif op == "cut":
            del data[at:]
        else:
            data += bytes([value]) * (1 + at % 9)
    fast, ref = both(codec, bytes(data), cap)
    assert fast == ref


@pytest.mark.parametrize("flag", [0x20, 0x40, 0x80])
def test_reserved_gzip_flags_refused_as_zlib_does(flag):
    """ISA-L ignores the reserved header flags; zlib refuses them, and so does the fast path."""
    data = bytearray(gzip.compress(TEXT))
    data[3] |= flag
    fast, ref = both(1, bytes(data), 1 << 24)
    assert fast == ref and "unknown header flags" in fast.message
    two = gzip.compress(TEXT) + bytes(data)  # the second member's flags too
    fast, ref = both(1, two, 1 << 24)
    assert fast == ref and fast.error is not None


def test_without_isal_zlib_decompresses(monkeypatch):
    monkeypatch.setenv("KANALYZE_NO_ISAL", "1")
    monkeypatch.setattr(compression, "_ISAL", [])
    assert compression._isal_zlib() is None
    res = decompress(1, gzip.compress(TEXT), 1 << 24)
    assert res.error is None and res.data == TEXT
    cut = decompress(1, gzip.compress(TEXT)[:-9], 1 << 24)
    assert cut.error is not None and TEXT.startswith(cut.data)
