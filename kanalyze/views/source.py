"""Decoded bodies and facts for the views, one exchange at a time, in capture order.

A thin use of the body service (`kanalyze.bodies`): one decoder per run, record batches only
where the data is (Produce requests, Fetch responses), and responses that teach topic-id
names decoded as soon as their exchange arrives, so a later Fetch v13+ reads with names.
"""

from __future__ import annotations

from dissectors.context import DecodeContext
from kanalyze.bodies import Bodies, BodyDecoder, ExchangeFacts, Records, exchange_facts
from kanalyze.correlation import Exchange


class BodySource:
    def __init__(self, ctx: DecodeContext | None = None) -> None:
        self.decoder = BodyDecoder(ctx, Records.DATA)

    def bodies(self, ex: Exchange) -> Bodies:
        """The exchange with lazily decoded `request`/`response` bodies."""
        self.decoder.learn(ex)
        return Bodies(ex, self.decoder)

    def facts(self, bodies: Bodies) -> ExchangeFacts:
        return exchange_facts(bodies)
