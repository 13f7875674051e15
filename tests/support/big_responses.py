"""Big legitimate responses of a big cluster, encoded by an independent encoder (kio).

A cluster of thousands of partitions answers Metadata, DescribeConfigs, ListOffsets,
OffsetFetch and Fetch with megabyte bodies whose decoded tree costs 40-100 x their wire size;
they must decode whole (docs/limits.md, "decode budget"). Built at test time, deterministic,
never committed. `kio_view` turns kio's own reading of the bytes into plain values with our
field names' spelling, so a test compares our decoding with the independent one.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import random
import uuid
import warnings
from collections.abc import Callable

from kio.serial import entity_reader, entity_writer

BROKERS = 30


def _encode(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _replicas(rng: random.Random, n: int = 3) -> tuple[int, ...]:
    return tuple(rng.sample(range(BROKERS), n))


def metadata_v12(partitions: int = 20_000, per_topic: int = 50, seed: int = 1) -> bytes:
    """A Metadata v12 response: 30 brokers, `partitions` over topics of `per_topic`,
    3 replicas each (~42 bytes a partition on the wire)."""
    from kio.schema.metadata.v12 import response as m
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i32, i32Timedelta

    rng = random.Random(seed)
    topics = []
    for t in range(partitions // per_topic):
        parts = []
        for p in range(per_topic):
            reps = tuple(BrokerId(b) for b in _replicas(rng))
            parts.append(m.MetadataResponsePartition(
                error_code=_no_error(), partition_index=i32(p), leader_id=reps[0],
                leader_epoch=i32(rng.randrange(100)), replica_nodes=reps, isr_nodes=reps[:2],
                offline_replicas=(),
            ))
        topics.append(m.MetadataResponseTopic(
            error_code=_no_error(), name=TopicName(f"orders.region-{t:05d}"),
            topic_id=uuid.UUID(int=rng.getrandbits(128)), is_internal=False,
            partitions=tuple(parts), topic_authorized_operations=i32(-2147483648),
        ))
    brokers = tuple(
        m.MetadataResponseBroker(node_id=BrokerId(b), host=f"broker-{b}.kafka.internal",
                                 port=i32(9092), rack=f"rack-{b % 3}")
        for b in range(BROKERS)
    )
    return _encode(m.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), brokers=brokers,
        cluster_id="big-cluster", controller_id=BrokerId(1), topics=tuple(topics),
    ))


CONFIG_NAMES = tuple(f"log.config.entry.{i:03d}" for i in range(180))


def describe_configs_v4(topics: int = 300, seed: int = 2) -> bytes:
    """DescribeConfigs v4 for `topics` topics, 180 configs each with one synonym."""
    from kio.schema.describe_configs.v4 import response as d
    from kio.static.primitive import i8, i32Timedelta

    rng = random.Random(seed)
    results = []
    for t in range(topics):
        configs = tuple(
            d.DescribeConfigsResourceResult(
                name=name, value=str(rng.randrange(10**9)), read_only=False,
                config_source=i8(5), is_sensitive=False,
                synonyms=(d.DescribeConfigsSynonym(name=name, value="1", source=i8(5)),),
                config_type=i8(rng.randrange(1, 8)), documentation=None,
            )
            for name in CONFIG_NAMES
        )
        results.append(d.DescribeConfigsResult(
            error_code=_no_error(), error_message=None, resource_type=i8(2),
            resource_name=f"topic-{t:04d}", configs=configs,
        ))
    return _encode(d.DescribeConfigsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), results=tuple(results)))


def list_offsets_v7(partitions: int = 40_000, per_topic: int = 100, seed: int = 3) -> bytes:
    from kio.schema.list_offsets.v7 import response as lo
    from kio.schema.types import TopicName
    from kio.static.primitive import i32, i32Timedelta, i64

    rng = random.Random(seed)
    topics = tuple(
        lo.ListOffsetsTopicResponse(name=TopicName(f"events-{t:05d}"), partitions=tuple(
            lo.ListOffsetsPartitionResponse(
                partition_index=i32(p), error_code=_no_error(), timestamp=i64(-1),
                offset=i64(rng.randrange(10**12)), leader_epoch=i32(rng.randrange(50)))
            for p in range(per_topic)))
        for t in range(partitions // per_topic)
    )
    return _encode(lo.ListOffsetsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), topics=topics))


def offset_fetch_v8(partitions: int = 40_000, per_topic: int = 100, seed: int = 4) -> bytes:
    from kio.schema.offset_fetch.v8 import response as of
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32, i32Timedelta, i64

    rng = random.Random(seed)
    topics = tuple(
        of.OffsetFetchResponseTopics(name=TopicName(f"events-{t:05d}"), partitions=tuple(
            of.OffsetFetchResponsePartitions(
                partition_index=i32(p), committed_offset=i64(rng.randrange(10**12)),
                committed_leader_epoch=i32(rng.randrange(50)), metadata="",
                error_code=_no_error())
            for p in range(per_topic)))
        for t in range(partitions // per_topic)
    )
    group = of.OffsetFetchResponseGroup(
        group_id=GroupId("billing-consumers"), topics=topics, error_code=_no_error())
    return _encode(of.OffsetFetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), groups=(group,)))


def fetch_v12(partitions: int = 10_000, per_topic: int = 100, records: int = 5,
              seed: int = 5) -> bytes:
    """A Fetch v12 response: `partitions` partitions each with one uncompressed batch of
    `records` records (built by kafka-python's record builder)."""
    from kio.schema.fetch.v12 import response as f
    from kio.schema.types import TopicName
    from kio.static.primitive import i32, i32Timedelta, i64

    rng = random.Random(seed)
    topics = []
    for t in range(partitions // per_topic):
        parts = []
        for p in range(per_topic):
            base = rng.randrange(10**9)
            parts.append(f.PartitionData(
                partition_index=i32(p), error_code=_no_error(), high_watermark=i64(base + 100),
                last_stable_offset=i64(base + 100), log_start_offset=i64(0),
                aborted_transactions=(), preferred_read_replica=f.BrokerId(-1),
                records=batch(records, f"{t}/{p}"),
            ))
        topics.append(f.FetchableTopicResponse(topic=TopicName(f"clicks-{t:04d}"),
                                               partitions=tuple(parts)))
    return _encode(f.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=_no_error(),
        session_id=i32(7), responses=tuple(topics)))


def kafka_records():  # noqa: ANN201
    """kafka-python's record classes (its import loads JSON through a deprecated API)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import record

    return record


def batch(n: int, tag: str) -> bytes:
    b = kafka_records().MemoryRecordsBuilder(
        magic=2, compression_type=0, batch_size=1 << 20, offset=0
    )
    for i in range(n):
        b.append(timestamp=1_700_000_000_000 + i, key=f"k{i}".encode(),
                 value=f"value {tag} {i}".encode(), headers=[])
    b.close()
    return bytes(b.buffer())


def _no_error():  # noqa: ANN202
    from kio.schema.errors import ErrorCode

    return ErrorCode.none


# (api key, version, builder)
BIG: dict[str, tuple[int, int, Callable[[], bytes]]] = {
    "metadata": (3, 12, metadata_v12),
    "describe_configs": (32, 4, describe_configs_v4),
    "list_offsets": (2, 7, list_offsets_v7),
    "offset_fetch": (9, 8, offset_fetch_v8),
    "fetch": (1, 12, fetch_v12),
}


def kio_view(api_key: int, version: int, body: bytes) -> dict:
    """kio's reading of a response body, as plain values keyed by squashed field names
    (lower case, no underscores: `throttle_time` and `throttle_time_ms` meet once the
    timedelta is in milliseconds), uuids and enums as our JSON writes them, tagged fields at
    their default left out; records stay bytes."""
    from kio.index import load_response_schema

    entity = load_response_schema(api_key, version)
    value, size = entity_reader(entity)(memoryview(body), 0)
    assert size == len(body), (size, len(body))
    return _plain(value)


def squash(name: str) -> str:
    return name.replace("_", "").lower()


def _plain(v):  # noqa: ANN001, ANN202
    if dataclasses.is_dataclass(v):
        out = {}
        for f in dataclasses.fields(v):
            x = getattr(v, f.name)
            if "tag" in f.metadata and x == f.default:
                continue  # a tagged field at its default is not on the wire
            key = squash(f.name)
            if isinstance(x, datetime.timedelta):
                x, key = int(x / datetime.timedelta(milliseconds=1)), key + "ms"
            out[key] = _plain(x)
        return out
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, uuid.UUID):
        return str(v)
    return v
