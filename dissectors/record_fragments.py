"""A batch's records as finished JSON text, for the NDJSON lines (when the encoder is built).

With the compiled encoder (`dissectors/record_text.pyx`, built by `python tools/compile.py`)
the export's fast path (`records_json.records_text`) puts a `RecordsText` in a batch's
"records" instead of a list of record dicts: the JSON text of that list, written from the
record bytes. orjson splices it into the line unchanged (`as_json`, its `default`: an
`orjson.Fragment`), so the line has the same bytes as with the dicts, which are never built.

Only the NDJSON lines ask for it (`DecodeContext.record_fragments`, set by
`BodyDecoder.fast_json` for `ExchangeEncoder.line`): every other consumer of decoded bodies
(filters, views, metrics, reports, the TUI, `ExchangeEncoder.encode`) gets the dicts. Code
on the line's path that must read records (the internal-topic decoding) turns the text back
into them with `records_of`; the json fallback of a line does the same through `as_value`.

Without the build, with `KANALYZE_PURE=1`, or when the build is older than its source
(`dissectors.native`), `ENCODE` is None and the dict path runs: it is the reference, and
the tests compare both on random batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from dissectors import native

FRAGMENT: Any = getattr(orjson, "Fragment", None)  # orjson >= 3.10


def _load() -> Callable[..., tuple[bytes, int] | None] | None:
    """The compiled encoder, when it is built, current and wanted (see the docstring)."""
    if FRAGMENT is None or not native.cython_usable("dissectors.record_text"):
        return None
    try:
        from dissectors.record_text import encode_records  # type: ignore[import-not-found]
    except ImportError:
        return None
    return encode_records  # type: ignore[no-any-return]


ENCODE = _load()


class RecordsText:
    """The JSON text of a batch's list of records (bytes, UTF-8)."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RecordsText({self.text[:60]!r}...)"


def as_json(obj: object) -> object:
    """orjson's `default`: a `RecordsText` spliced in as it is; anything else is refused."""
    if type(obj) is RecordsText:
        return FRAGMENT(obj.text)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def as_value(obj: object) -> object:
    """json's `default`: a `RecordsText` as the records it spells (json writes them alike)."""
    if type(obj) is RecordsText:
        return orjson.loads(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def records_of(batch: dict) -> list:
    """A batch's records as dicts, turning its text back into them (kept in the batch) when
    the encoder wrote them."""
    records = batch.get("records")
    if type(records) is RecordsText:
        records = batch["records"] = orjson.loads(records.text)
    return records or []
