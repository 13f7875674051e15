"""Decoding an exchange's bodies: the one place that turns a captured frame into a body tree
(`Node`) or its JSON value, with the user's decode context (limits, secrets policy), the
records policy of the consumer and the run's topic-name registry.

Every consumer (export, analysis, the TUI, Spark rows, summary) decodes through a
`BodyDecoder`; `Bodies` wraps one exchange so each side is decoded at most once, when first
asked. Header-only runs never get here.
"""

from __future__ import annotations

from dataclasses import fields, replace
from enum import Enum

from dissectors import (
    FALLBACK,
    ApiKey,
    DecodeContext,
    JsonWalk,
    Node,
    decode_body,
    decode_body_json,
    decode_raw_sasl,
    node_to_json,
    node_to_json_collect,
)
from kanalyze.bodies.internal import InternalRecords
from kanalyze.bodies.names import BatchLinks, TopicNames
from kanalyze.correlation import SASL_RAW_API, Exchange, Message


class Records(Enum):
    """Which bodies get their record batches decoded (they are most of the cost)."""

    AS_CONTEXT = "context"  # as DecodeContext.decode_records says, for every body
    NONE = "none"  # never: records fields report only their size and location
    DATA = "data"  # only where the data is: Produce requests and Fetch responses


# (api key, is_request) whose bodies carry the data: the producer's batches, the leader's log
DATA_BODIES: frozenset[tuple[int, bool]] = frozenset(
    {(ApiKey.PRODUCE, True), (ApiKey.FETCH, False)}
)

_CTX_FIELDS = (
    "limits", "show_secrets", "decode_records", "record_headers", "strict", "buffers",
    "topic_names", "budget", "record_fragments", "judging",
)
# a DecodeContext of the known shape is copied field by field (dataclasses.replace is general
# and slow); a subclass or a changed shape goes through replace
_PLAIN_CTX = tuple(f.name for f in fields(DecodeContext)) == _CTX_FIELDS


def _fresh(t: DecodeContext) -> DecodeContext:
    """A context like `t` with its own (empty) buffer list, sharing the topic names."""
    if _PLAIN_CTX and type(t) is DecodeContext:
        return DecodeContext(
            t.limits, t.show_secrets, t.decode_records, t.record_headers, t.strict, [],
            t.topic_names, judging=t.judging,
        )
    return replace(t, buffers=[])


class BodyDecoder:
    """Decodes bodies with one context template, records policy and topic-name registry."""

    def __init__(
        self,
        ctx: DecodeContext | None = None,
        records: Records = Records.AS_CONTEXT,
        names: TopicNames | None = None,
        learn_from_data: bool = False,
    ) -> None:
        """`learn_from_data`: the consumer decodes every Produce request and Fetch response in
        capture order (the analysis), so KRaft TopicRecords and the batches a broker returned
        to a name-based and an id-based Fetch may teach names too. Consumers that decode only
        some of them (a filtered export) leave it off: what they name must not depend on what
        they happened to decode (docs/filters.md)."""
        base = ctx or DecodeContext()
        self.names = names if names is not None else TopicNames(base.topic_names)
        if base.topic_names is not self.names.mapping:
            base = replace(base, topic_names=self.names.mapping)
        self.template = base
        self.records = records
        # names ids from the batches Fetch responses return (learning from data only)
        self.links = BatchLinks(self.names) if learn_from_data else None
        # metadata log, __consumer_offsets, ... decoded by name (TopicRecords teach if learning)
        self.internal = InternalRecords(self.names, learn_from_data)
        if records is Records.AS_CONTEXT:
            self._with = self._without = base
        else:
            self._with = replace(base, decode_records=records is Records.DATA)
            self._without = replace(base, decode_records=False)

    def context(self, api_key: int | None, is_request: bool) -> DecodeContext:
        """A fresh context for decoding one body of `api_key` (records per the policy)."""
        t = self._with if (api_key, is_request) in DATA_BODIES else self._without
        return _fresh(t)

    def node(
        self, ex: Exchange, msg: Message, is_request: bool
    ) -> tuple[Node | None, DecodeContext]:
        """The decoded body tree of one side (None when its api or version is unknown)."""
        ctx = self.context(ex.api_key, is_request)
        data = msg.pdu.data
        if ex.api_key == SASL_RAW_API:
            return decode_raw_sasl(data, 0, len(data), ctx), ctx
        if ex.api_key is None or ex.api_version is None:
            return None, ctx
        node = decode_body(
            ex.api_key, ex.api_version, is_request, data, msg.body_offset, len(data), ctx
        )
        return node, ctx

    def fast_json(
        self, ex: Exchange, msg: Message, is_request: bool, walk: JsonWalk, text: bool = False
    ) -> object:
        """The body's JSON value straight from the bytes (`dissectors.fastjson`) when the body
        decodes cleanly, else FALLBACK (the tree decides: `json`). `text`: record batches may
        hold their records as JSON text (`dissectors.record_fragments`: for NDJSON lines)."""
        if ex.api_key is None or ex.api_version is None or ex.api_key == SASL_RAW_API:
            return FALLBACK
        data = msg.pdu.data
        ctx = self.context(ex.api_key, is_request)
        ctx.record_fragments = text and self.links is None  # the links read record offsets
        return decode_body_json(
            ex.api_key, ex.api_version, is_request, data, msg.body_offset, len(data), ctx, walk
        )

    def json(
        self,
        ex: Exchange,
        msg: Message,
        is_request: bool,
        walk: JsonWalk | None = None,
        text: bool = False,
    ) -> object:
        """The body's JSON value (None when its api is unknown), equal to
        `node_to_json(self.node(...))`; with `walk`, the body's diagnostics are appended to
        `walk.diagnostics` (JSON form) and odd floats noted. `text`: records may come as their
        JSON text (`fast_json`), for a caller that only writes the value out."""
        w = JsonWalk() if walk is None else walk
        value = self.fast_json(ex, msg, is_request, w, text)
        if value is FALLBACK:
            node, ctx = self.node(ex, msg, is_request)
            if node is None:
                return None
            if walk is None:
                value = node_to_json(node, ctx)
            else:
                value = node_to_json_collect(node, ctx, walk)
        if (ex.api_key, is_request) in DATA_BODIES and isinstance(value, dict):
            self.internal.decode(value, not is_request, self.context(ex.api_key, is_request))
            if not is_request and self.links is not None:
                self.links.observe(ex, value)
        return value

    def learn(self, ex: Exchange) -> None:
        """Decode the response now if it teaches topic names (call in capture order)."""
        if TopicNames.teaches(ex):
            self.node(ex, ex.response, False)  # type: ignore[arg-type]
