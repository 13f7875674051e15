"""Records of Kafka's own topics decoded by name: the KRaft metadata log and the internal topics.

A broker's capture holds the records of `__cluster_metadata` (every broker fetches the
controller's log) and, where it replicates them, of `__consumer_offsets` and
`__transaction_state`. Their keys and values are Kafka messages with generated schemas
(`tools/gen_schemas.py --records`); this module frames them (PROVENANCE.md of the specs):

* metadata log value: unsigned varint frame version, unsigned varint record type
  (`schemas.METADATA_RECORDS`), unsigned varint record version, then the flexible body;
* internal-topic key: int16 version choosing the key type (`schemas.INTERNAL_KEYS`), then the
  body at that version; value: int16 version, then the value type (the key's name with
  `Value`) at that version; a null value is a tombstone.

A record's decoded form goes beside its raw key/value: `metadata_record` for the log,
`key_decoded`/`value_decoded` for the internal topics, each {type, version, fields[, diagnostics]}.
With a decoder that learns from data (the analysis: `BodyDecoder(learn_from_data=True)`),
TopicRecords teach the run's topic names (`TopicNames.learn`, origin `metadata_log`) as they are
decoded, in capture order. Values cut by --max-value-bytes are left as they are.
"""

from __future__ import annotations

import base64
import binascii
import struct

from dissectors import (
    DecodeContext,
    DecodeError,
    decode_message,
    node_to_json,
    read_uvarint,
    schemas,
)
from dissectors.record_fragments import batches_of
from kanalyze.bodies.names import METADATA_TOPIC, TopicNames

INTERNAL_TOPICS = frozenset(schemas.INTERNAL_KEYS)
_I16 = struct.Struct(">h")


def raw_bytes(value: object) -> bytes | None:
    """The bytes behind a rendered key/value (str = UTF-8, {"b64"}); None when cut or absent."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and not value.get("truncated") and isinstance(value.get("b64"), str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def _message(name: str, version: int, data: bytes, start: int, ctx: DecodeContext) -> dict:
    node = decode_message(name, version, data, start, len(data), ctx)
    out: dict[str, object] = {"type": name, "version": version, "fields": node_to_json(node, ctx)}
    diags = [f"{d.code.name}: {d.message}" for n in node.walk() for d in n.diagnostics]
    if diags:
        out["diagnostics"] = diags
    return out


def metadata_record(data: bytes, ctx: DecodeContext) -> dict:
    """One `__cluster_metadata` record value, framed and decoded."""
    try:
        frame, pos = read_uvarint(data, 0, len(data))
        type_id, pos = read_uvarint(data, pos, len(data))
        version, pos = read_uvarint(data, pos, len(data))
    except DecodeError as exc:
        return {"type": None, "diagnostics": [f"{exc.code.name}: {exc.message}"]}
    name = schemas.METADATA_RECORDS.get(type_id)
    if name is None:
        return {"type": None, "type_id": type_id, "version": version, "frame_version": frame,
                "diagnostics": [f"unknown metadata record type {type_id}"]}
    return {**_message(name, version, data, pos, ctx), "type_id": type_id, "frame_version": frame}


def internal_key(topic: str, data: bytes, ctx: DecodeContext) -> dict | None:
    """An internal topic's record key (None when too short to hold its version)."""
    if len(data) < _I16.size:
        return None
    (version,) = _I16.unpack_from(data, 0)
    name = schemas.INTERNAL_KEYS[topic].get(version)
    if name is None:
        return {"type": None, "version": version, "diagnostics": [f"unknown key version {version}"]}
    return _message(name, version, data, _I16.size, ctx)


def internal_value(key: dict | None, data: bytes, ctx: DecodeContext) -> dict | None:
    """The value of a decoded key: the key type's Value at the value's own version."""
    if key is None or not isinstance(key.get("type"), str) or len(data) < _I16.size:
        return None
    (version,) = _I16.unpack_from(data, 0)
    return _message(key["type"].removesuffix("Key") + "Value", version, data, _I16.size, ctx)


class InternalRecords:
    """Decodes the internal-topic records of Produce requests and Fetch responses in place."""

    __slots__ = ("learn", "names")

    def __init__(self, names: TopicNames, learn: bool = True) -> None:
        self.names = names
        self.learn = learn  # TopicRecords teach the registry

    def topic(self, t: dict) -> str | None:
        """The internal topic a body's topic entry names, else None."""
        name = t.get("topic") or t.get("name") or t.get("topic_name")
        tid = t.get("topic_id")
        if not name and isinstance(tid, str):
            name = self.names.get(tid)
        return name if name == METADATA_TOPIC or name in INTERNAL_TOPICS else None

    def decode(self, body: dict, is_fetch: bool, ctx: DecodeContext) -> None:
        topics = body.get("responses" if is_fetch else "topic_data")
        if not isinstance(topics, list):
            return
        for t in topics:
            if not isinstance(t, dict):
                continue
            topic = self.topic(t)
            if topic is None:
                continue
            for p in t.get("partitions" if is_fetch else "partition_data") or []:
                records = p.get("records") if isinstance(p, dict) else None
                for b in batches_of(records):  # dicts, also those given as text
                    if isinstance(b, dict) and not b.get("is_control"):
                        for r in b.get("records") or []:
                            if isinstance(r, dict):
                                self._record(topic, r, ctx)

    def _record(self, topic: str, r: dict, ctx: DecodeContext) -> None:
        if topic == METADATA_TOPIC:
            data = raw_bytes(r.get("value"))
            if data is None:
                return
            rec = metadata_record(data, ctx)
            r["metadata_record"] = rec
            fields = rec.get("fields")
            if self.learn and rec.get("type") == "TopicRecord" and isinstance(fields, dict):
                tid, name = fields.get("topic_id"), fields.get("name")
                if isinstance(tid, str) and isinstance(name, str):
                    self.names.learn(tid, name, "metadata_log")
            return
        kdata = raw_bytes(r.get("key"))
        if kdata is None:
            return
        key = internal_key(topic, kdata, ctx)
        r["key_decoded"] = key
        vdata = raw_bytes(r.get("value"))
        r["value_decoded"] = None if vdata is None else internal_value(key, vdata, ctx)
