"""Small pieces shared by the record decoders: timestamps and byte values.

Byte values (keys, values, header values) become JSON-ready values:

- ``None`` stays ``None`` (a null key/value, length -1);
- valid UTF-8 becomes a ``str``;
- anything else becomes ``{"b64": "<base64>"}``.

With a `max_value_bytes` limit, a longer value is cut to that many bytes and
marked: ``{"text": "<prefix>", "truncated": true, "size": N}`` when the kept
prefix is UTF-8 (a character split by the cut is dropped), else
``{"b64": "<base64 of prefix>", "truncated": true, "size": N}``; `size` is
the full length in bytes. Only the kept prefix is ever inspected or copied.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_SECONDS: dict[int, str | None] = {}  # "YYYY-MM-DDTHH:MM:SS" per epoch second, bounded


def iso_timestamp(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO-8601 UTC with ms precision and 'Z'; -1/None → None.

    Out-of-range values (beyond year 1..9999) give None. The formatted second
    is cached: records of a batch share a handful of seconds.
    """
    if ms is None or ms == -1:
        return None
    sec, milli = divmod(ms, 1000)
    prefix = _SECONDS.get(sec, _MISSING)
    if prefix is _MISSING:
        try:
            prefix = (_EPOCH + timedelta(seconds=sec)).isoformat()[:19]
        except OverflowError:
            prefix = None
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        _SECONDS[sec] = prefix
    if prefix is None:
        return None
    return f"{prefix}.{milli:03d}Z"


_MISSING = object()


def render_bytes(data: bytes | memoryview | None, max_bytes: int | None = None) -> object:
    """A key/value/header value as JSON-ready data (see the module docstring)."""
    if data is None:
        return None
    size = len(data)
    if max_bytes is not None and size > max_bytes:
        kept = bytes(data[:max_bytes])
        for cut in range(4):  # drop at most 3 bytes of a character split by the cut
            try:
                text = kept[: len(kept) - cut].decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(kept) - 3:
                    break
                continue
            return {"text": text, "truncated": True, "size": size}
        return {"b64": base64.b64encode(kept).decode("ascii"), "truncated": True, "size": size}
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def render_raw(data: bytes | memoryview, max_bytes: int | None = None) -> dict[str, object]:
    """Undecodable bytes (e.g. records under an unknown codec): always base64, with the size."""
    size = len(data)
    if max_bytes is not None and size > max_bytes:
        kept = base64.b64encode(data[:max_bytes]).decode("ascii")
        return {"b64": kept, "truncated": True, "size": size}
    return {"b64": base64.b64encode(data).decode("ascii"), "size": size}
