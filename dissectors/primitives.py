"""Kafka wire primitives: fixed-size integers, varints, uuids, lengths.

Every reader takes `(buf, pos, end)` and returns `(value, new_pos)`. Readers
never read past `end`; a short or malformed read raises `DecodeError`, which
the schema walker turns into a diagnostic on the node being decoded (the
decoded siblings are kept). `DecodeError` never escapes the decoder.
"""

from __future__ import annotations

import struct

from dissectors.diagnostics import Code

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")
UUID = struct.Struct(">16s")
BOOL = struct.Struct(">?")

FIXED: dict[str, struct.Struct] = {
    "int8": INT8,
    "int16": INT16,
    "uint16": UINT16,
    "int32": INT32,
    "uint32": UINT32,
    "int64": INT64,
    "float64": FLOAT64,
    "uuid": UUID,
    "bool": BOOL,
}


class DecodeError(Exception):
    """Bad or missing bytes at `offset`; internal to the decoder."""

    __slots__ = ("code", "offset", "message", "recorded")

    def __init__(self, code: Code, offset: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.offset = offset
        self.message = message
        self.recorded = False


def short(pos: int, need: int, end: int, what: str) -> DecodeError:
    return DecodeError(Code.TRUNCATED, pos, f"{what}: need {need} bytes, {max(end - pos, 0)} left")


def read_uvarint(buf, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Unsigned LEB128 (Kafka's unsigned varint); at most `max_bytes` bytes.

    The one varint reader of the package (hot loops inline the one- and two-byte cases and
    call it for the rest). A varint cut by `end` is TRUNCATED, one longer than
    `max_bytes` BAD_VARINT; the error's offset is where the varint starts."""
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise short(start, pos - start + 1, end, "varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if pos - start >= max_bytes:
            raise DecodeError(Code.BAD_VARINT, start, f"varint longer than {max_bytes} bytes")


def read_varint(buf, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Zig-zag signed varint: 32-bit (`max_bytes` 5) or 64-bit (10, Kafka's varlong)."""
    u, pos = read_uvarint(buf, pos, end, max_bytes)
    return (u >> 1) ^ -(u & 1), pos


def uuid_str(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def read_length(buf, pos: int, end: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A length or count prefix: compact = unsigned varint N+1 (0 means null -> -1);
    classic = int16 (`wide` False) or int32 (`wide` True). Returns (n, pos) with n >= -1."""
    if compact:
        u, pos = read_uvarint(buf, pos, end)
        return u - 1, pos
    st = INT32 if wide else INT16
    nxt = pos + st.size
    if nxt > end:
        raise short(pos, st.size, end, "length")
    n = st.unpack_from(buf, pos)[0]
    if n < -1:
        raise DecodeError(Code.BAD_LENGTH, pos, f"negative length {n}")
    return n, nxt
