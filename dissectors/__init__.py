"""Kafka protocol dissectors: generated schemas, the generic decoder, records, codecs.

This package's public entry: import what you need from `dissectors` itself
(`from dissectors import decode_body, DecodeContext, ApiKey`). The submodules
are the implementation; their layout may change, these names will not.

Headless: nothing here imports textual, pyspark or scapy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# first: switches to the pure-Python hot modules if asked or if their build is stale
from dissectors import native  # noqa: F401  (native.py; installs on import)
from dissectors.apis import (
    API_NAMES,
    REQUEST_FLEXIBLE_FROM,
    REQUEST_VERSIONS,
    RESPONSE_FLEXIBLE_FROM,
    RESPONSE_VERSIONS,
    ApiKey,
)
from dissectors.context import DecodeContext, Limits
from dissectors.diagnostics import Code, Diagnostic
from dissectors.errors import ERROR_NAMES, ErrorCode, error_name
from dissectors.node import ARRAY, PRIM, RAW, RECORDS, STRUCT, Node
from dissectors.primitives import DecodeError, read_uvarint, read_varint
from dissectors.quirks import (
    API_PRODUCE,
    API_SASL_HANDSHAKE,
    request_header_version,
    response_header_version,
)
from dissectors.secrets import is_secret, redacted

if TYPE_CHECKING:
    from dissectors.decoder import (
        body_reader,
        decode_body,
        decode_message,
        message_reader,
        schema_module,
    )
    from dissectors.embedded import decode_raw_sasl
    from dissectors.fastjson import FALLBACK, decode_body_json
    from dissectors.jsonify import JsonWalk, node_to_json, node_to_json_collect
    from dissectors.records import decode_records

# The body decoders (and the CRC and codec libraries they bring) are imported on first use: a
# header-only run never needs them, and importing them costs more than its engine work on a
# small capture. name -> the submodule that defines it.
_LAZY = {
    "body_reader": "decoder",
    "decode_body": "decoder",
    "decode_message": "decoder",
    "message_reader": "decoder",
    "schema_module": "decoder",
    "decode_raw_sasl": "embedded",
    "FALLBACK": "fastjson",
    "decode_body_json": "fastjson",
    "JsonWalk": "jsonify",
    "node_to_json": "jsonify",
    "node_to_json_collect": "jsonify",
    "decode_records": "records",
}


_DECODING = frozenset({"decoder", "embedded", "fastjson"})


def __getattr__(name: str) -> object:
    sub = _LAZY.get(name)
    if sub is None:
        raise AttributeError(f"module 'dissectors' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"dissectors.{sub}"), name)
    if sub in _DECODING:  # the walker's delegates register on import (`registry`): a body
        # decodes the same whatever the caller imported before
        importlib.import_module("dissectors.records")
        importlib.import_module("dissectors.embedded")
    globals()[name] = value
    return value


__all__ = [
    "API_NAMES",
    "API_PRODUCE",
    "API_SASL_HANDSHAKE",
    "ARRAY",
    "ERROR_NAMES",
    "FALLBACK",
    "PRIM",
    "RAW",
    "RECORDS",
    "REQUEST_FLEXIBLE_FROM",
    "REQUEST_VERSIONS",
    "RESPONSE_FLEXIBLE_FROM",
    "RESPONSE_VERSIONS",
    "STRUCT",
    "ApiKey",
    "Code",
    "DecodeContext",
    "DecodeError",
    "Diagnostic",
    "ErrorCode",
    "JsonWalk",
    "Limits",
    "Node",
    "body_reader",
    "decode_body",
    "decode_body_json",
    "decode_message",
    "decode_raw_sasl",
    "decode_records",
    "error_name",
    "is_secret",
    "message_reader",
    "node_to_json",
    "node_to_json_collect",
    "read_uvarint",
    "read_varint",
    "redacted",
    "request_header_version",
    "response_header_version",
    "schema_module",
]
