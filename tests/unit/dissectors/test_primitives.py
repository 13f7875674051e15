"""The one varint reader: values, widths, and the two ways a varint goes wrong."""

from __future__ import annotations

import pytest

from dissectors.diagnostics import Code
from dissectors.primitives import DecodeError, read_uvarint, read_varint


@pytest.mark.parametrize(
    ("data", "value"),
    [(b"\x00", 0), (b"\x7f", 127), (b"\x80\x01", 128), (b"\xff\xff\xff\xff\x0f", 2**32 - 1)],
)
def test_unsigned_values(data: bytes, value: int) -> None:
    assert read_uvarint(b"\x55" + data, 1, len(data) + 1) == (value, len(data) + 1)


@pytest.mark.parametrize(
    ("data", "value"), [(b"\x00", 0), (b"\x01", -1), (b"\x02", 1), (b"\x03", -2)]
)
def test_zigzag_values(data: bytes, value: int) -> None:
    assert read_varint(data, 0, len(data)) == (value, 1)


def test_a_varlong_takes_up_to_ten_bytes() -> None:
    data = b"\xfe" + b"\xff" * 8 + b"\x01"  # zigzag of 2**63 - 1
    assert read_varint(data, 0, len(data), 10) == (2**63 - 1, 10)
    with pytest.raises(DecodeError) as err:
        read_varint(data, 0, len(data))
    assert err.value.code is Code.BAD_VARINT and err.value.message == "varint longer than 5 bytes"


def test_a_cut_varint_is_truncated_where_it_starts() -> None:
    with pytest.raises(DecodeError) as err:
        read_uvarint(b"\x00\x80\x80", 1, 3)
    assert err.value.code is Code.TRUNCATED and err.value.offset == 1
