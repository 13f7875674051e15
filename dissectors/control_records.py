"""Control records: the records of a control batch (attributes bit 5).

The key is `version int16, type int16` (Kafka's ControlRecordType):
0 ABORT and 1 COMMIT are transaction markers whose value is
`version int16, coordinator_epoch int32`; 2..6 are KRaft control records whose
value is a flexible-version message starting with its own int16 `Version`:

    2 LEADER_CHANGE    LeaderChangeMessage
    3 SNAPSHOT_HEADER  SnapshotHeaderRecord
    4 SNAPSHOT_FOOTER  SnapshotFooterRecord
    5 KRAFT_VERSION    KRaftVersionRecord
    6 KRAFT_VOTERS     VotersRecord

KRaft values are decoded by the schema decoder (`dissectors.decoder`).
"""

from __future__ import annotations

import base64
import struct

from dissectors.context import DecodeContext
from dissectors.decoder import decode_message
from dissectors.diagnostics import Code, Diagnostic
from dissectors.jsonify import node_to_json

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")
_I16 = struct.Struct(">h")

CONTROL_TYPES: dict[int, str] = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

KRAFT_MESSAGES: dict[int, str] = {
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}


def decode_control(
    buf: bytes | memoryview,
    key_off: int,
    key_len: int,
    value_off: int,
    value_len: int,
    ctx: DecodeContext,
    diags: list[Diagnostic],
) -> dict[str, object]:
    """Decode one control record's key and value (lengths -1 = null).

    Returns the JSON-ready `control` object of the record; problems are
    appended to `diags` (offsets in `buf`'s own coordinates).
    """
    if key_len < _KEY.size:
        diags.append(
            Diagnostic(Code.BAD_RECORD, key_off, f"control record key of {key_len} bytes, need 4")
        )
        return {"type": None}
    key_version, type_id = _KEY.unpack_from(buf, key_off)
    out: dict[str, object] = {
        "type": CONTROL_TYPES.get(type_id, "UNKNOWN"),
        "type_id": type_id,
        "key_version": key_version,
    }
    if type_id in (0, 1):
        if value_len < _MARKER.size:
            diags.append(
                Diagnostic(
                    Code.BAD_RECORD,
                    value_off,
                    f"transaction marker value of {value_len} bytes, need 6",
                )
            )
            return out
        out["version"], out["coordinator_epoch"] = _MARKER.unpack_from(buf, value_off)
        return out
    name = KRAFT_MESSAGES.get(type_id)
    if name is None or value_len < 0:
        return out
    out["message"] = name
    out["data"] = _decode_kraft(name, buf, value_off, value_len, ctx, diags)
    return out


def _decode_kraft(
    name: str,
    buf: bytes | memoryview,
    off: int,
    length: int,
    ctx: DecodeContext,
    diags: list[Diagnostic],
) -> object:
    raw = {"b64": base64.b64encode(bytes(buf[off : off + length])).decode("ascii")}
    if length < _I16.size:
        diags.append(Diagnostic(Code.BAD_RECORD, off, f"{name} value of {length} bytes"))
        return raw
    (version,) = _I16.unpack_from(buf, off)  # the message's own Version field is its schema version
    node = decode_message(name, version, buf, off, off + length, ctx)
    for n in node.walk():
        diags.extend(n.diagnostics)
    return node_to_json(node, ctx)
