"""Decoders the schema walker delegates to, registered by the modules that implement them.

The walker (`decoder`) meets records fields and bodies that embed other protocols, and
the modules decoding those use the walker in turn (KRaft control records and embedded
structures are schema messages). Rather than importing each other, both sides meet
here: `records` registers the records-field decoder and `embedded` its per-API body
hooks when they are imported -- which the package's lazy entry (`dissectors/__init__`)
does whenever it hands out a body decoder, so by the time anything decodes through it, the
table is complete.
"""

from __future__ import annotations

from collections.abc import Callable

from dissectors.context import DecodeContext
from dissectors.node import Node

RecordsDecoder = Callable[[memoryview, int, int, DecodeContext], Node]
BodyHook = Callable[[Node, int, memoryview, DecodeContext], None]

_RECORDS: list[RecordsDecoder] = []
BODY_HOOKS: dict[tuple[int, bool], BodyHook] = {}


def register_records_decoder(fn: RecordsDecoder) -> None:
    """`fn(buf, offset, length, ctx)` decodes every field of type "records" from now on."""
    _RECORDS[:] = [fn]


def decode_records_field(buf: memoryview, offset: int, length: int, ctx: DecodeContext) -> Node:
    """The records field at buf[offset:offset+length], by the registered decoder."""
    if not _RECORDS:
        raise RuntimeError("no records decoder registered: import the dissectors package")
    return _RECORDS[0](buf, offset, length, ctx)


def register_body_hook(api_key: int, is_request: bool, hook: BodyHook) -> None:
    """`hook(body, version, buf, ctx)` runs on every decoded body of this api and direction
    (it rewrites fields in place: embedded protocols, learned topic names)."""
    BODY_HOOKS[api_key, is_request] = hook
