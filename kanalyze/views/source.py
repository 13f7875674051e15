"""Decoded bodies for the views, one exchange at a time, in capture order.

One decoder per run shares the topic-id names: responses that teach names (Metadata,
CreateTopics, DescribeTopicPartitions) are decoded as soon as their exchange arrives, so a
later Fetch v13+ that names topics only by id reads with names.
"""

from __future__ import annotations

from dissectors.context import DecodeContext
from kanalyze.analysis.events import NAME_SOURCES, BodyDecoder, Item
from kanalyze.correlation import Exchange


class BodySource:
    def __init__(self, ctx: DecodeContext | None = None) -> None:
        self.decoder = BodyDecoder(ctx)

    def item(self, ex: Exchange) -> Item:
        """The exchange with lazily decoded `req`/`rsp` bodies (None when not captured or
        not decodable)."""
        item = Item(ex, self.decoder)
        if ex.api_key in NAME_SOURCES and ex.response is not None:
            item.rsp  # noqa: B018 - decoded now: later bodies see the names it teaches
        return item
