"""The body and facts service: decode an exchange's bodies once, with the run's decode
context and topic-name registry, and answer the small questions every consumer asks.

    decoder = BodyDecoder(ctx, Records.DATA)      # one per run (shares one TopicNames)
    bodies = Bodies(ex, decoder)                   # per exchange: .request / .response
    bodies.facts                                   # ExchangeFacts (frozen), computed once

`kanalyze.export` only encodes what this package decodes.
"""

from kanalyze.bodies.decode import DATA_BODIES, BodyDecoder, Records
from kanalyze.bodies.exchange import Bodies, exchange_facts
from kanalyze.bodies.facts import (
    PARTITION_FIELDS,
    ExchangeFacts,
    PartitionFacts,
    TopicEntry,
    error_codes,
    facts_of,
    replica_id,
    topic_entries,
    topic_label,
)
from kanalyze.bodies.names import NAME_SOURCES, NULL_TOPIC_ID, TopicNames

__all__ = [
    "DATA_BODIES",
    "NAME_SOURCES",
    "NULL_TOPIC_ID",
    "PARTITION_FIELDS",
    "Bodies",
    "BodyDecoder",
    "ExchangeFacts",
    "PartitionFacts",
    "Records",
    "TopicEntry",
    "TopicNames",
    "error_codes",
    "exchange_facts",
    "facts_of",
    "replica_id",
    "topic_entries",
    "topic_label",
]
