"""Small readers over decoded bodies that hide version differences (field renames, topic ids)."""

from __future__ import annotations

from collections.abc import Iterator

from kanalyze.bodies import replica_id

# the analyses read these from here too
from kanalyze.bodies.batches import batch_count as batch_count
from kanalyze.bodies.batches import batch_end as batch_end


def topic_of(t: dict) -> str:
    """A topic's name: `name`/`topic` by version, else the name resolved from its id, else
    the id."""
    for key in ("name", "topic", "topic_name", "topic_id"):
        v = t.get(key)
        if isinstance(v, str) and v:
            return v
    return "?"


def batches(records: object) -> list[dict]:
    if isinstance(records, dict):
        b = records.get("batches")
        if isinstance(b, list):
            return [x for x in b if isinstance(x, dict)]
    return []


def produce_partitions(req: dict | None) -> Iterator[tuple[str, int, list[dict]]]:
    for t in (req or {}).get("topic_data") or []:
        name = topic_of(t)
        for p in t.get("partition_data") or []:
            yield name, p.get("index", p.get("partition", -1)), batches(p.get("records"))


def produce_results(rsp: dict | None) -> Iterator[tuple[str, int, dict]]:
    for t in (rsp or {}).get("responses") or []:
        name = topic_of(t)
        for p in t.get("partition_responses") or []:
            yield name, p.get("index", p.get("partition_index", -1)), p


def fetch_replica(req: dict | None) -> int:
    """The fetching replica of a Fetch request (`kanalyze.bodies.replica_id`); -1 for consumers
    and when the request is unknown."""
    rid = replica_id(req)
    return -1 if rid is None or rid < 0 else rid


def fetch_requests(req: dict | None) -> Iterator[tuple[str, int, dict]]:
    for t in (req or {}).get("topics") or []:
        name = topic_of(t)
        for p in t.get("partitions") or []:
            yield name, p.get("partition", p.get("partition_index", -1)), p


def fetch_responses(rsp: dict | None) -> Iterator[tuple[str, int, dict]]:
    for t in (rsp or {}).get("responses") or []:
        name = topic_of(t)
        for p in t.get("partitions") or []:
            yield name, p.get("partition_index", p.get("partition", -1)), p


def tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogRecords:
    """The decoded records of one of Kafka's own topics (`kanalyze.bodies.internal`) in Fetch
    responses, each once however many replicas fetch it: by partition, only offsets above the
    last one read."""

    __slots__ = ("last", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.last: dict[int, int] = {}

    def new(self, rsp: dict | None) -> Iterator[tuple[dict, dict | None]]:
        """(decoded key, decoded value or None for a tombstone) of records not read before."""
        for topic, partition, p in fetch_responses(rsp):
            if topic != self.topic:
                continue
            for b in batches(p.get("records")):
                for r in b.get("records") or []:
                    off, key = r.get("offset"), r.get("key_decoded")
                    if not isinstance(off, int) or off <= self.last.get(partition, -1):
                        continue
                    self.last[partition] = off
                    if isinstance(key, dict) and isinstance(key.get("fields"), dict):
                        value = r.get("value_decoded")
                        yield key, value if isinstance(value, dict) else None
