"""Bounded decompression for Kafka record codecs.

One job: turn the compressed bytes of a batch (magic 2) or of a wrapper
message (magic 0/1) into at most `cap` bytes, and say why it stopped.
Nothing here expands a bomb: every codec is driven in streaming mode with an
output ceiling of `cap + 1` bytes, so a payload that would exceed the cap is
detected after producing just over `cap` bytes and reported as
`DECOMPRESSION_LIMIT`, with the prefix kept for whatever can be decoded.

Codec ids (attributes & 0x07): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
Snappy comes raw or in the xerial/Java framing (``\\x82SNAPPY\\0`` header,
then big-endian length-prefixed raw blocks). LZ4 comes as an LZ4 frame; the
legacy KafkaLZ4 frames of magic 0/1 (Kafka < 0.10) carry a header checksum
computed over the magic number too, which the reference decoder rejects:
those frames are walked block by block here instead (checksums not verified).

Speed (the full export of a compressed capture spends a quarter of its CPU here): gzip is
inflated by ISA-L (`isal`, 2.5 x zlib's speed) when it is installed, and an lz4 or zstd frame
that announces its size (every batch a Kafka client writes) in one call of that size. Each of
these is a fast path for input that decompresses whole within the cap: anything else (damage,
a cap reached, no announced size, ISA-L missing) takes the bounded streaming path below, whose
outcome and wording stay the reference (`tests/unit/records/test_compression_paths.py`).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from dataclasses import dataclass
from types import ModuleType

from dissectors.diagnostics import Code

CODEC_NAMES: dict[int, str] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8) + version int32 + compatible-version int32
_U32BE = struct.Struct(">I")
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}


@dataclass(frozen=True, slots=True)
class Decompressed:
    """Result of one bounded decompression.

    `data` is everything produced (at most `cap` bytes); `error` is None when
    the whole input decompressed within the cap, else the diagnostic code
    (DECOMPRESSION_LIMIT, DECOMPRESSION_FAILED, UNKNOWN_CODEC) and `message`.
    """

    data: bytes
    error: Code | None = None
    message: str = ""


def output_cap(compressed_len: int, max_bytes: int, max_ratio: int) -> int:
    """The output ceiling for `compressed_len` input bytes: min(max bytes, ratio * input)."""
    return max(0, min(max_bytes, max_ratio * max(compressed_len, 1)))


def decompress(codec: int, data: bytes | memoryview, cap: int) -> Decompressed:
    """Decompress `data` with Kafka codec id `codec`, producing at most `cap` bytes.

    Never raises on bad input; failures come back as `Decompressed.error`.
    """
    fn = _CODECS.get(codec)
    if fn is None:
        return Decompressed(b"", Code.UNKNOWN_CODEC, f"unknown compression codec id {codec}")
    try:
        return fn(memoryview(data), cap)
    except (ValueError, RuntimeError, OSError, zlib.error, struct.error) as exc:
        # codec libraries signal corrupt input with these (lz4: RuntimeError,
        # cramjam: DecompressionError(Exception) is caught below by name)
        return Decompressed(b"", Code.DECOMPRESSION_FAILED, f"{CODEC_NAMES[codec]}: {exc}")
    except Exception as exc:  # noqa: BLE001 - third-party codec errors have no common base
        if type(exc).__name__ in _LIB_ERRORS:
            return Decompressed(b"", Code.DECOMPRESSION_FAILED, f"{CODEC_NAMES[codec]}: {exc}")
        raise


_LIB_ERRORS = frozenset({"DecompressionError", "ZstdError", "LZ4BlockError", "UncompressError"})


def _limit(data: bytes, cap: int, codec: str) -> Decompressed:
    return Decompressed(
        data[:cap],
        Code.DECOMPRESSION_LIMIT,
        f"{codec} output exceeds the cap of {cap} bytes; stopped (possible decompression bomb)",
    )


def _none(data: memoryview, cap: int) -> Decompressed:
    if len(data) > cap:
        return _limit(bytes(data[: cap + 1]), cap, "none")
    return Decompressed(bytes(data))


def _gzip(data: memoryview, cap: int) -> Decompressed:
    """gzip (or zlib) members, concatenated members allowed, streamed with max_length: by
    ISA-L when it is installed and decompresses the whole input within the cap, else (damage,
    the cap, no ISA-L) by zlib, whose outcome and messages are the reference."""
    fast = _isal_zlib()
    if fast is not None:
        try:
            res = _inflate(fast, data, cap, plain=True)
        except Exception:  # noqa: BLE001 - whatever ISA-L objects to, zlib says what it is
            res = None
        if res is not None and res.error is None:
            return res
    return _inflate(zlib, data, cap)


_ISAL: list[ModuleType | None] = []  # [isal.isal_zlib or None], set on the first gzip batch


def _isal_zlib() -> ModuleType | None:
    """ISA-L's zlib-compatible module, or None where it is not installed (or is switched off
    by KANALYZE_NO_ISAL=1: the tests compare both)."""
    if not _ISAL:
        mod: ModuleType | None = None
        if not os.environ.get("KANALYZE_NO_ISAL"):
            try:
                from isal import isal_zlib

                mod = isal_zlib
            except ImportError:
                mod = None
        _ISAL.append(mod)
    return _ISAL[0]


def _inflate(lib: ModuleType, data: memoryview, cap: int, plain: bool = False) -> Decompressed:
    """`_gzip` with `lib` (zlib, or a module with zlib's decompressobj). `plain`: only gzip
    members whose header zlib accepts as it is (ISA-L ignores the reserved flag bits zlib
    refuses, and a zlib header is left to zlib); a ValueError for anything else."""
    out: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    while True:
        if plain and (rest[:3] != b"\x1f\x8b\x08" or len(rest) < 4 or rest[3] & 0xE0):
            raise ValueError("not a plain gzip member")
        d = lib.decompressobj(wbits=47)  # 32 + 15: auto-detect gzip/zlib header
        chunk = d.decompress(rest, cap + 1 - total)
        total += len(chunk)
        out.append(chunk)
        if total > cap:
            return _limit(b"".join(out), cap, "gzip")
        if not d.eof:
            if d.unconsumed_tail:  # only when max_length was reached, handled above
                return _limit(b"".join(out), cap, "gzip")
            return Decompressed(
                b"".join(out), Code.DECOMPRESSION_FAILED, "gzip: input ends inside the stream"
            )
        tail: bytes = d.unused_data
        if not tail.strip(b"\x00"):  # trailing padding is harmless
            return Decompressed(b"".join(out))
        rest = tail


_SNAPPY_MAX_RATIO = 64  # a 3-byte copy op yields at most 64 bytes: no real block expands more


class _SnappyCorrupt(ValueError):
    pass


def _snappy_len(block: memoryview) -> int:
    """The uncompressed length announced by a raw snappy block's varint preamble."""
    import cramjam

    n = int(cramjam.snappy.decompress_raw_len(block))
    if n > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise _SnappyCorrupt(f"block of {len(block)} bytes announces an impossible {n} bytes")
    return n


def _snappy_raw(block: memoryview) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy(data: memoryview, cap: int) -> Decompressed:
    """Raw snappy, or xerial framing: each block's size is checked before it is expanded."""
    if bytes(data[:8]) != XERIAL_MAGIC:
        n = _snappy_len(data)
        if n > cap:
            return Decompressed(
                b"",
                Code.DECOMPRESSION_LIMIT,
                f"snappy block announces {n} bytes, over the cap of {cap}; not expanded",
            )
        return Decompressed(_snappy_raw(data))
    out: list[bytes] = []
    total = 0
    pos = _XERIAL_HEADER
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            return Decompressed(
                b"".join(out), Code.DECOMPRESSION_FAILED, "xerial snappy: block length cut short"
            )
        (blen,) = _U32BE.unpack_from(data, pos)
        pos += 4
        if blen > end - pos:
            return Decompressed(
                b"".join(out),
                Code.DECOMPRESSION_FAILED,
                f"xerial snappy: block of {blen} bytes exceeds the input",
            )
        block = data[pos : pos + blen]
        pos += blen
        n = _snappy_len(block)
        if total + n > cap:
            return Decompressed(
                b"".join(out),
                Code.DECOMPRESSION_LIMIT,
                f"xerial snappy output would exceed the cap of {cap} bytes; stopped",
            )
        chunk = _snappy_raw(block)
        total += len(chunk)
        out.append(chunk)
    return Decompressed(b"".join(out))


_LZ4_FRAME: list = []  # [lz4.frame], imported on the first lz4 batch


def _lz4(data: memoryview, cap: int) -> Decompressed:
    # a frame (version 01) that announces its size, within the cap: one call of that size (the
    # library checks the rest: header checksum, blocks, that size)
    if (
        len(data) >= 15
        and data[4] & 0xC8 == 0x48
        and _U32LE.unpack_from(data, 0)[0] == _LZ4_MAGIC
        and 0 < _U64LE.unpack_from(data, 6)[0] <= cap
    ):
        if not _LZ4_FRAME:
            import lz4.frame

            _LZ4_FRAME.append(lz4.frame)
        try:
            out = _LZ4_FRAME[0].decompress(data)
        except Exception:  # noqa: BLE001 - the bounded path says what is wrong
            out = None
        if out is not None and len(out) == _U64LE.unpack_from(data, 6)[0]:
            return Decompressed(out)
    return _lz4_stream(data, cap)


def _lz4_stream(data: memoryview, cap: int) -> Decompressed:
    """The bounded path: the frame streamed with an output ceiling."""
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    try:
        out = d.decompress(data, max_length=cap + 1)
    except RuntimeError as exc:
        if "headerChecksum" in str(exc):
            return _lz4_blocks(data, cap)
        raise
    if len(out) > cap:
        return _limit(out, cap, "lz4")
    if not d.eof:
        return Decompressed(out, Code.DECOMPRESSION_FAILED, "lz4: input ends inside the frame")
    return Decompressed(out)


def _lz4_blocks(data: memoryview, cap: int) -> Decompressed:
    """Walk an LZ4 frame by hand (legacy KafkaLZ4: wrong header checksum, ignored)."""
    import lz4.block

    end = len(data)
    if end < 7 or _U32LE.unpack_from(data, 0)[0] != _LZ4_MAGIC:
        return Decompressed(b"", Code.DECOMPRESSION_FAILED, "lz4: bad frame magic")
    flg, bd = data[4], data[5]
    linked = not flg & 0x20
    block_checksum = bool(flg & 0x10)
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1  # + header checksum
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07, 1 << 22)
    out = bytearray()
    while True:
        if pos + 4 > end:
            return Decompressed(
                bytes(out), Code.DECOMPRESSION_FAILED, "lz4: input ends inside the frame"
            )
        (size,) = _U32LE.unpack_from(data, pos)
        pos += 4
        if size == 0:  # end mark (content checksum may follow)
            return Decompressed(bytes(out))
        raw = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if size > end - pos or size > block_max:
            return Decompressed(
                bytes(out),
                Code.DECOMPRESSION_FAILED,
                f"lz4: block of {size} bytes exceeds the input",
            )
        block = data[pos : pos + size]
        pos += size + (4 if block_checksum else 0)
        room = min(block_max, cap + 1 - len(out))
        if raw:
            chunk = bytes(block[:room])
        else:
            dictionary = bytes(out[-65536:]) if linked and out else None
            try:
                chunk = lz4.block.decompress(block, uncompressed_size=room, dict=dictionary)
            except lz4.block.LZ4BlockError:
                if room < block_max:  # the block would not fit under the cap
                    return _limit(bytes(out), cap, "lz4")
                raise
        out += chunk
        if len(out) > cap:
            return _limit(bytes(out), cap, "lz4")


def _zstd_complete(data: memoryview) -> bool:
    """Whether `data` is a sequence of complete zstd (or skippable) frames.

    Walks frame and block headers only (one step per block of up to 128 KiB
    output), because the bounded stream reader silently stops at a cut.
    """
    pos, end = 0, len(data)
    if end == 0:
        return False
    while pos < end:
        if pos + 4 > end:
            return False
        (magic,) = _U32LE.unpack_from(data, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > end:
                return False
            pos += 8 + _U32LE.unpack_from(data, pos + 4)[0]
            continue
        if magic != 0xFD2FB528 or pos + 5 > end:
            return False
        fhd = data[pos + 4]
        single = (fhd >> 5) & 1
        fcs = (0 if not single else 1, 2, 4, 8)[fhd >> 6]
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        while True:
            if pos + 3 > end:
                return False
            head = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            btype = (head >> 1) & 3
            pos += 3 + (1 if btype == 1 else head >> 3)
            if btype == 3:
                return False
            if head & 1:
                break
        pos += 4 if fhd & 0x04 else 0
    return pos == end


_ZSTD = threading.local()  # one decompressor per thread: making one costs more than a batch


_ZSTD_SIZE: list = []  # [zstandard.frame_content_size], with the first decompressor


def _zstd_decompressor():
    d = getattr(_ZSTD, "d", None)
    if d is None:
        import zstandard

        d = _ZSTD.d = zstandard.ZstdDecompressor()
        if not _ZSTD_SIZE:
            _ZSTD_SIZE.append(zstandard.frame_content_size)
    return d


def _zstd(data: memoryview, cap: int) -> Decompressed:
    d = _zstd_decompressor()
    try:  # one frame that announces its size, within the cap: one call of that size
        size = _ZSTD_SIZE[0](data)  # -1 unknown, 0 also for a skippable frame
        if 0 < size <= cap:
            out = d.decompress(data, allow_extra_data=False)
            if len(out) == size:
                return Decompressed(out)
    except Exception:  # noqa: BLE001, S110 - the bounded path says what is wrong
        pass
    return _zstd_stream(data, cap)


def _zstd_stream(data: memoryview, cap: int) -> Decompressed:
    """The bounded path: every frame streamed with an output ceiling."""
    complete = _zstd_complete(data)
    # each stream_reader starts a new session of the (reused) decompression context
    reader = _zstd_decompressor().stream_reader(data, read_across_frames=True, closefd=False)
    out = bytearray()
    # reads sized to the input (a read allocates its full size first): a few for a batch, the
    # same bytes as any other read size
    step = min(max(len(data) * 8, 1 << 16), 1 << 20)
    with reader:
        while len(out) <= cap:
            chunk = reader.read(min(cap + 1 - len(out), step))
            if not chunk:
                if not complete:
                    return Decompressed(
                        bytes(out), Code.DECOMPRESSION_FAILED, "zstd: input ends inside the frame"
                    )
                return Decompressed(bytes(out))
            out += chunk
    return _limit(bytes(out), cap, "zstd")


_CODECS = {0: _none, 1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}
