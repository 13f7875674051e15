"""Record batches as finished JSON text, for the NDJSON lines (when the encoder is built).

With the compiled encoder (`dissectors/record_text.pyx`, built by `python tools/compile.py`)
the export's fast path (`records_json.batch_text`) puts a `JsonText` in a records field's
"batches" instead of a batch dict holding a list of record dicts: the JSON text of that
batch, written from the wire bytes. orjson splices it into the line unchanged (`as_json`,
its `default`: an `orjson.Fragment`), so the line has the same bytes as with the dicts,
which are never built.

Only the NDJSON lines ask for it (`DecodeContext.record_fragments`, set by
`BodyDecoder.fast_json` for `ExchangeEncoder.line`): every other consumer of decoded bodies
(filters, views, metrics, reports, the TUI, `ExchangeEncoder.encode`) gets the dicts. Code
on the line's path that must read records (the internal-topic decoding) turns the text back
into dicts with `batches_of`; the json fallback of a line does the same through `as_value`.

Without the build, with `KANALYZE_PURE=1`, or when the build is older than its source
(`dissectors.native`), `ENCODE` is None and the dict path runs: it is the reference, and
the tests compare both on random batches.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import orjson

from dissectors import native

FRAGMENT: Any = getattr(orjson, "Fragment", None)  # orjson >= 3.10


def _load() -> Callable[..., tuple[bytes, int] | None] | None:
    """The compiled encoder, when it is built, current and wanted (see the docstring)."""
    if FRAGMENT is None or not native.cython_usable("dissectors.record_text"):
        return None
    try:  # by name: the module exists only where it is built
        module = importlib.import_module("dissectors.record_text")
    except ImportError:
        return None
    encode: Callable[..., tuple[bytes, int] | None] = module.encode_batch
    return encode


ENCODE = _load()


class JsonText:
    """A JSON value given as its text (bytes, UTF-8): a record batch, for the lines."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"JsonText({self.text[:60]!r}...)"


def as_json(obj: object) -> object:
    """orjson's `default`: a `JsonText` spliced in as it is; anything else is refused."""
    if type(obj) is JsonText:
        return FRAGMENT(obj.text)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def as_value(obj: object) -> object:
    """json's `default`: a `JsonText` as the value it spells (json writes it alike)."""
    if type(obj) is JsonText:
        return orjson.loads(obj.text)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def batches_of(records: object) -> list:
    """A records field's batches as dicts, turning those given as text back into them (kept
    in the field, so each is read once)."""
    batches = records.get("batches") if isinstance(records, dict) else None
    if not isinstance(batches, list):
        return []
    for i, b in enumerate(batches):
        if type(b) is JsonText:
            batches[i] = orjson.loads(b.text)
    return batches
