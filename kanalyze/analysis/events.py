"""Exchanges split into time-ordered request and response events, with bodies decoded on demand.

`Session.exchanges()` yields exchanges in request order, each once its response is in. An
analyzer that follows state across connections (the leader's HW moves when a follower's
request arrives, before an older pending fetch is answered) needs the frames in wire order:
request events and response events merged by (time, frame). Exchanges arrive in start order,
so every event at or before the newest exchange's start is final; the heap holds only the
responses of exchanges still ahead of that point.

Bodies come from the body service (`kanalyze.bodies`): records only where the data is
(Produce requests, Fetch responses), topic ids named by the run's one registry.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from dissectors import ApiKey, DecodeContext
from kanalyze.bodies import Bodies, BodyDecoder, Records
from kanalyze.correlation import Exchange, Message


def analysis_decoder(ctx: DecodeContext | None = None) -> BodyDecoder:
    """The decoder the analyzers read through: record batches only where the data is, every
    one of them decoded in capture order, so they teach topic names too."""
    return BodyDecoder(ctx, Records.DATA, learn_from_data=True)


@dataclass(slots=True)
class Event:
    """A request or a response on the wire: `frame` and `ts` (ns) of its last packet."""

    is_request: bool
    bodies: Bodies
    frame: int
    ts: int

    @property
    def ex(self) -> Exchange:
        return self.bodies.ex

    @property
    def body(self) -> dict | None:
        return self.bodies.request if self.is_request else self.bodies.response

    @property
    def ts_s(self) -> float:
        return round(self.ts / 1e9, 6)


# an analyzer's handler of one api's requests or responses: handler(analyzer, event, body)
# (with `body_required`), else handler(analyzer, event)
Handler = Callable[..., None]


@dataclass(frozen=True, slots=True)
class Handlers:
    """An analyzer's explicit handler tables: which apis it reads, on which side. With
    `body_required`, an event whose body did not decode to an object is skipped and the
    handler gets the body; without, the handler gets the event alone, whatever its body."""

    requests: Mapping[ApiKey, Handler]
    responses: Mapping[ApiKey, Handler]
    body_required: bool = True

    def dispatch(self, owner: object, ev: Event) -> None:
        """Hand an event to its handler, if the table has one."""
        key = ev.ex.api_key
        handler = (self.requests if ev.is_request else self.responses).get(key)  # type: ignore[call-overload]
        if handler is None:
            return
        if not self.body_required:
            handler(owner, ev)
            return
        body = ev.body
        if body is not None:
            handler(owner, ev, body)


def _msg_key(msg: Message) -> tuple[int, int]:
    return (msg.pdu.last_ts, msg.pdu.last_pkt)


def ordered_events(exchanges: Iterable[Exchange], decoder: BodyDecoder) -> Iterator[Event]:
    """Request and response events in wire order (time, then frame number)."""
    return events_of((Bodies(ex, decoder) for ex in exchanges), decoder)


def events_of(all_bodies: Iterable[Bodies], decoder: BodyDecoder) -> Iterator[Event]:
    """`ordered_events` of exchanges given with their bodies (bound to `decoder`; a `--jobs`
    run decodes them in its ranges: `RangeSession.decoded`)."""
    heap: list[tuple[int, int, int, Event]] = []
    seq = 0
    for bodies in all_bodies:
        ex = bodies.ex
        if decoder.names.teaches(ex):
            bodies.response  # noqa: B018 - decode now so later decodes see the topic-id names
        start = _msg_key(ex.request) if ex.request else _msg_key(ex.response)  # type: ignore[arg-type]
        while heap and heap[0][:2] <= start:
            yield heapq.heappop(heap)[3]
        for msg, is_req in ex.messages():
            seq += 1
            key = _msg_key(msg)
            heapq.heappush(heap, (key[0], key[1], seq, Event(is_req, bodies, key[1], key[0])))
    while heap:
        yield heapq.heappop(heap)[3]
