"""The one topic-id → name registry every body decode of a run shares.

Since Kafka 3.x some requests name topics only by id (Fetch v13+, DescribeTopicPartitions,
...). Names are taught by the responses that list ids next to names: Metadata (v10+),
CreateTopics and DescribeTopicPartitions. The dissectors learn them while decoding such a
response (`dissectors.embedded`, the one place that reads the pairs) into the
`DecodeContext.topic_names` mapping, which is this registry's `mapping`: so every decode that
shares the registry both teaches and uses it. A consumer only has to decode the teaching
responses in capture order, before the exchanges that follow them (`teaches`).
"""

from __future__ import annotations

from collections.abc import Iterator

from dissectors import ApiKey
from kanalyze.correlation import Exchange

# responses whose decode teaches topic-id names to later decodes
NAME_SOURCES: frozenset[int] = frozenset(
    {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS}
)
NULL_TOPIC_ID = "00000000-0000-0000-0000-000000000000"


class TopicNames:
    """topic id (canonical uuid string) → topic name, in the order they were learned."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: dict[str, str] | None = None) -> None:
        # shared by reference with every DecodeContext built from it: the dissectors write here
        self.mapping: dict[str, str] = {} if mapping is None else mapping

    def __len__(self) -> int:
        return len(self.mapping)

    def __contains__(self, topic_id: object) -> bool:
        return topic_id in self.mapping

    def items(self) -> Iterator[tuple[str, str]]:
        """(topic id, name) pairs in learning order (a snapshot: safe while decoding goes on)."""
        return iter(list(self.mapping.items()))

    def get(self, topic_id: str | None) -> str | None:
        """The name of a topic id, None when unknown (or the null id)."""
        return None if topic_id is None else self.mapping.get(topic_id)

    @staticmethod
    def teaches(ex: Exchange) -> bool:
        """Whether decoding this exchange's response teaches names to later decodes."""
        return ex.response is not None and ex.api_key in NAME_SOURCES
