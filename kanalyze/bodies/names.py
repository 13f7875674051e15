"""The one topic-id → name registry every body decode of a run shares.

Since Kafka 3.x some requests name topics only by id (Fetch v13+, DescribeTopicPartitions,
...). Names are taught by the responses that list ids next to names: Metadata (v10+),
CreateTopics and DescribeTopicPartitions. The dissectors learn them while decoding such a
response (`dissectors.embedded`, the one place that reads the pairs) into the
`DecodeContext.topic_names` mapping, which is this registry's `mapping`: so every decode that
shares the registry both teaches and uses it. A consumer only has to decode the teaching
responses in capture order, before the exchanges that follow them (`teaches`).

Two more sources write here, never into a copy: the user's file (`--topic-ids`,
`load_topic_ids`) and, when nothing on the wire names an id, the record batches one leader
returns both to a name-based and to an id-based Fetch (`BatchLinks`: the same partition,
base offset and CRC can only be the same log).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from dissectors import ApiKey
from kanalyze.correlation import Exchange

# responses whose decode teaches topic-id names to later decodes
NAME_SOURCES: frozenset[int] = frozenset(
    {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS}
)
NULL_TOPIC_ID = "00000000-0000-0000-0000-000000000000"
METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = "00000000-0000-0000-0000-000000000001"  # Kafka's fixed id of the KRaft log
# how to resolve an id nothing named (shown once per unresolved id)
UNRESOLVED_HINT = (
    "topic id not named in the capture: pass --topic-ids FILE (kafka-topics.sh --describe "
    "output or a JSON {id: name} object), or capture a Metadata v10+ response"
)


class TopicNames:
    """topic id (canonical uuid string) → topic name, in the order they were learned."""

    __slots__ = ("mapping", "origin")

    def __init__(self, mapping: dict[str, str] | None = None) -> None:
        # shared by reference with every DecodeContext built from it: the dissectors write here
        self.mapping: dict[str, str] = {} if mapping is None else mapping
        # where an id's name came from when not a decoded response ("topic_ids_file", ...)
        self.origin: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.mapping)

    def __contains__(self, topic_id: object) -> bool:
        return topic_id in self.mapping or topic_id == METADATA_TOPIC_ID

    def items(self) -> Iterator[tuple[str, str]]:
        """(topic id, name) pairs in learning order (a snapshot: safe while decoding goes on)."""
        return iter(list(self.mapping.items()))

    def get(self, topic_id: str | None) -> str | None:
        """The name of a topic id, None when unknown (or the null id); the metadata log's fixed
        id is always known."""
        if topic_id is None:
            return None
        name = self.mapping.get(topic_id)
        return METADATA_TOPIC if name is None and topic_id == METADATA_TOPIC_ID else name

    def learn(self, topic_id: str, name: str, origin: str) -> bool:
        """Name an id from a source other than a decoded response; the first name wins (a
        response decoded earlier in capture order is the wire's word). True when new."""
        if not topic_id or topic_id == NULL_TOPIC_ID or not name or topic_id in self.mapping:
            return False
        self.mapping[topic_id] = name
        self.origin[topic_id] = origin
        return True

    def replay(self, taught: dict[str, str]) -> None:
        """Names a decode made elsewhere taught, written as the dissectors' hook writes them
        (a `--jobs` range decoded the response: `kanalyze.parallel.range_bodies`)."""
        self.mapping.update(taught)

    def restore(self, snapshot: dict[str, str]) -> None:
        """Back to `snapshot` (a copy of `mapping`): a run redone from its start."""
        self.mapping.clear()
        self.mapping.update(snapshot)

    @staticmethod
    def teaches(ex: Exchange) -> bool:
        """Whether decoding this exchange's response teaches names to later decodes."""
        return ex.response is not None and ex.api_key in NAME_SOURCES


# ---------------------------------------------------------------- the user's mapping


class TopicIdsError(ValueError):
    """A --topic-ids file that cannot be read (one line for the CLI)."""


def canonical_topic_id(text: str) -> str | None:
    """A topic id as the canonical uuid string: from that form or from Kafka's own form
    (22 characters of URL-safe base64, as kafka-topics.sh prints it); None when neither."""
    text = text.strip()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        pass
    if len(text) == 22 and re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
        try:
            return str(uuid.UUID(bytes=base64.urlsafe_b64decode(text + "==")))
        except (binascii.Error, ValueError):
            return None
    return None


_DESCRIBE = re.compile(r"Topic:\s*(\S+)\s+TopicId:\s*(\S+)")


def parse_topic_ids(text: str) -> dict[str, str]:
    """id → name from `kafka-topics.sh --describe` output or JSON: an object of id → name or
    name → id, or a list of {"name"/"topic", "topic_id"/"id"} objects."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TopicIdsError(f"not valid JSON: {exc.msg} at line {exc.lineno}") from None
        pairs: list[tuple[object, object]]
        if isinstance(data, dict):
            pairs = list(data.items())
        else:
            pairs = [
                (d.get("topic_id", d.get("id")), d.get("name", d.get("topic")))
                for d in data if isinstance(d, dict)
            ]
        out: dict[str, str] = {}
        for a, b in pairs:
            if not isinstance(a, str) or not isinstance(b, str):
                raise TopicIdsError(f"expected string pairs, got {a!r}: {b!r}")
            tid, name = canonical_topic_id(a), b
            if tid is None:
                tid, name = canonical_topic_id(b), a
            if tid is None:
                raise TopicIdsError(f"neither {a!r} nor {b!r} is a topic id")
            out[tid] = name
        return out
    out = {}
    for name, raw in _DESCRIBE.findall(text):
        tid = canonical_topic_id(raw)
        if tid is None:
            raise TopicIdsError(f"topic {name}: {raw!r} is not a topic id")
        out[tid] = name
    if not out:
        raise TopicIdsError("no 'Topic: NAME TopicId: ID' line and not JSON")
    return out


def load_topic_ids(path: str, names: TopicNames | None = None) -> TopicNames:
    """A registry preloaded with the user's --topic-ids file (TopicIdsError when unusable)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopicIdsError(f"cannot read: {exc}") from None
    reg = names if names is not None else TopicNames()
    for tid, name in parse_topic_ids(text).items():
        reg.learn(tid, name, "topic_ids_file")
    return reg


# ---------------------------------------------------------------- record-batch links


class BatchLinks:
    """Names an id from the record batches a leader returns: a batch (partition, base offset,
    CRC) seen in a Fetch response by name and in one by id, from the same broker, is the same
    log, so the id is that name. Bounded: the oldest batches are forgotten first."""

    __slots__ = ("cap", "names", "seen")

    def __init__(self, names: TopicNames, cap: int = 50_000) -> None:
        self.names = names
        self.cap = cap
        # (broker, partition, base offset, crc) -> (is_id, topic name or id)
        self.seen: OrderedDict[tuple[str, int, int, int], tuple[bool, str]] = OrderedDict()

    def observe(self, ex: Exchange, response: dict | None) -> None:
        """Read one decoded Fetch response (call in capture order)."""
        if ex.api_key != ApiKey.FETCH or not isinstance(response, dict):
            return
        broker = ex.conn.broker
        for t in response.get("responses") or []:
            if not isinstance(t, dict):
                continue
            tid, name = t.get("topic_id"), t.get("topic") or t.get("name")
            if isinstance(tid, str) and tid != NULL_TOPIC_ID:
                name = self.names.get(tid)
                if name is None:
                    for p in t.get("partitions") or []:
                        self._partition(broker, tid, True, p)
                    continue
            if not isinstance(name, str) or not name:
                continue
            label, is_id = name, False
            for p in t.get("partitions") or []:
                self._partition(broker, label, is_id, p)

    def _partition(self, broker: str, label: str, is_id: bool, p: object) -> None:
        if not isinstance(p, dict):
            return
        records = p.get("records")
        batches = records.get("batches") if isinstance(records, dict) else None
        index = p.get("partition_index", p.get("partition"))
        if not isinstance(batches, list) or not isinstance(index, int):
            return
        for b in batches:
            if not isinstance(b, dict) or not b.get("crc_ok", True):
                continue
            base, crc = b.get("base_offset"), b.get("crc")
            if not isinstance(base, int) or not isinstance(crc, int):
                continue
            key = (broker, index, base, crc)
            other = self.seen.get(key)
            if other is None:
                self.seen[key] = (is_id, label)
                if len(self.seen) > self.cap:
                    self.seen.popitem(last=False)
            elif other[0] != is_id:
                tid, name = (label, other[1]) if is_id else (other[1], label)
                self.names.learn(tid, name, "record_batches")
