"""Exchanges split into time-ordered request and response events, with bodies decoded on demand.

`Session.exchanges()` yields exchanges in request order, each once its response is in. An
analyzer that follows state across connections (the leader's HW moves when a follower's
request arrives, before an older pending fetch is answered) needs the frames in wire order:
request events and response events merged by (time, frame). Exchanges arrive in start order,
so every event at or before the newest exchange's start is final; the heap holds only the
responses of exchanges still ahead of that point.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dissectors.context import DecodeContext
from dissectors.jsonify import node_to_json
from dissectors.node import Node
from kanalyze.correlation import Exchange, Message
from kanalyze.export.ndjson import ExchangeEncoder

# (api key, is_request) whose bodies need record batches decoded: Produce requests carry the
# producer's batches, Fetch responses the leader's log (control markers, follower LEO).
RECORDS_NEEDED = frozenset({(0, True), (1, False)})
# responses that teach topic-id names to later decodes (Metadata, CreateTopics, DescribeTopicPartitions)
NAME_SOURCES = frozenset({3, 19, 75})


class BodyDecoder:
    """Decodes bodies to JSON-like values; record batches only where `RECORDS_NEEDED` says."""

    def __init__(self, ctx: DecodeContext | None = None) -> None:
        base = ctx or DecodeContext()
        names: dict[str, str] = base.topic_names
        from dataclasses import replace

        self.with_records = ExchangeEncoder(replace(base, decode_records=True, topic_names=names))
        self.without = ExchangeEncoder(replace(base, decode_records=False, topic_names=names))

    def node(self, ex: Exchange, msg: Message, is_request: bool) -> tuple[Node | None, DecodeContext]:
        enc = self.with_records if (ex.api_key, is_request) in RECORDS_NEEDED else self.without
        return enc.body(ex, msg, is_request)

    def json(self, ex: Exchange, msg: Message | None, is_request: bool) -> dict | None:
        if msg is None or ex.api_key is None or ex.api_key < 0:
            return None
        node, ctx = self.node(ex, msg, is_request)
        if node is None:
            return None
        value = node_to_json(node, ctx)
        return value if isinstance(value, dict) else None


@dataclass(slots=True)
class Item:
    """One exchange with its bodies, decoded at most once each and only when asked."""

    ex: Exchange
    decoder: BodyDecoder
    _req: dict | None = None
    _rsp: dict | None = None
    _done: set = field(default_factory=set)

    @property
    def req(self) -> dict | None:
        if "req" not in self._done:
            self._done.add("req")
            self._req = self.decoder.json(self.ex, self.ex.request, True)
        return self._req

    @property
    def rsp(self) -> dict | None:
        if "rsp" not in self._done:
            self._done.add("rsp")
            self._rsp = self.decoder.json(self.ex, self.ex.response, False)
        return self._rsp


@dataclass(slots=True)
class Event:
    """A request or a response on the wire: `frame` and `ts` (ns) of its last packet."""

    is_request: bool
    item: Item
    frame: int
    ts: int

    @property
    def ex(self) -> Exchange:
        return self.item.ex

    @property
    def body(self) -> dict | None:
        return self.item.req if self.is_request else self.item.rsp

    @property
    def ts_s(self) -> float:
        return round(self.ts / 1e9, 6)


def dispatch(owner: object, ev: Event, apis: frozenset[int]) -> None:
    """Hand a decoded event of one of `apis` to `owner._api<key>_req` / `_api<key>_rsp`."""
    if ev.ex.api_key not in apis or ev.body is None:
        return
    handler = getattr(owner, f"_api{ev.ex.api_key}_{'req' if ev.is_request else 'rsp'}", None)
    if handler is not None:
        handler(ev, ev.body)


def _msg_key(msg: Message) -> tuple[int, int]:
    return (msg.pdu.last_ts, msg.pdu.last_pkt)


def ordered_events(exchanges: Iterable[Exchange], decoder: BodyDecoder) -> Iterator[Event]:
    """Request and response events in wire order (time, then frame number)."""
    heap: list[tuple[int, int, int, Event]] = []
    seq = 0
    for ex in exchanges:
        item = Item(ex, decoder)
        if ex.api_key in NAME_SOURCES and ex.response is not None:
            item.rsp  # noqa: B018 - decode now so later decodes see the topic-id names
        start = _msg_key(ex.request) if ex.request else _msg_key(ex.response)  # type: ignore[arg-type]
        while heap and heap[0][:2] <= start:
            yield heapq.heappop(heap)[3]
        for msg, is_req in ex.messages():
            seq += 1
            key = _msg_key(msg)
            heapq.heappush(heap, (key[0], key[1], seq, Event(is_req, item, key[1], key[0])))
    while heap:
        yield heapq.heappop(heap)[3]
