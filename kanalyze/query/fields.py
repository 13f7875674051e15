"""The named fields of the filter language: their type, where the value comes from, and what
it costs to get (header fields first; facts and bodies only when the expression needs them).

A getter returns one value (None: the field is absent) or, for a `multi` field, a tuple
of every value the exchange has (an error code per body, a partition per topic, ...); a test
on a multi field matches when any value matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dissectors.errors import ERROR_NAMES
from kanalyze.correlation import SASL_RAW_API, SASL_RAW_NAME
from kanalyze.query.subject import Subject

HEADER, FACTS, BODY = 0, 1, 2  # evaluation cost: terms are tried cheapest first

# kinds: how values are written and which operators apply
TEXT, ENUM, INT, SIZE, DURATION, TIME, BOOL, ANY = (
    "text",
    "enum",
    "int",
    "size",
    "duration",
    "time",
    "bool",
    "any",
)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    kind: str
    get: Callable[[Subject], Any]
    cost: int = HEADER
    multi: bool = False
    doc: str = ""
    choices: tuple[str, ...] = ()  # ENUM: the known values (matched ignoring case)


def _api_names() -> tuple[str, ...]:
    from dissectors.apis import API_NAMES

    return (*API_NAMES.values(), SASL_RAW_NAME)


def _endpoint(ep: str) -> tuple[str, int | None]:
    """('1.2.3.4', 9092) from '1.2.3.4:9092', ('::1', 9092) from '[::1]:9092'."""
    host, _, port = ep.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return ep, None


def _latency(s: Subject) -> float | None:
    lat = s.ex.latency_ns
    return None if lat is None else round(lat / 1e6, 3)


def start_us(ts_ns: int) -> int:
    """A time at the microsecond precision the outputs show, in ns."""
    return (ts_ns + 500) // 1000 * 1000


def _time(s: Subject) -> int | None:
    m = s.ex.request or s.ex.response
    return None if m is None else start_us(m.pdu.last_ts)


def _frames(s: Subject) -> tuple[int, ...]:
    out: list[int] = []
    for m, _req in s.ex.messages():
        out.append(m.pdu.last_pkt)
        if m.pdu.first_pkt != m.pdu.last_pkt:
            out.append(m.pdu.first_pkt)
    return tuple(out)


def _size(s: Subject) -> int | None:
    sizes = [m.pdu.size + 4 for m, _req in s.ex.messages()]
    return sum(sizes) if sizes else None


def _side_size(is_request: bool) -> Callable[[Subject], int | None]:
    def get(s: Subject) -> int | None:
        m = s.ex.request if is_request else s.ex.response
        return None if m is None else m.pdu.size + 4

    return get


def _errors(s: Subject) -> tuple[str, ...]:
    return tuple(ERROR_NAMES.get(c, str(c)) for c in dict.fromkeys(s.facts.error_codes))


def _topics(s: Subject) -> tuple[str, ...]:
    return tuple(t for t, _parts in s.facts.topics if t is not None)


def _partitions(s: Subject) -> tuple[int, ...]:
    seen: dict[int, None] = {}
    for _t, parts in s.facts.topics:
        for p in sorted(parts):
            seen[p] = None
    return tuple(seen)


def _records(s: Subject) -> int | None:
    ex = s.ex
    from kanalyze.bodies import DATA_BODIES

    if (ex.api_key, True) not in DATA_BODIES and (ex.api_key, False) not in DATA_BODIES:
        return None
    return s.facts.record_count


def _api(s: Subject) -> str | None:
    return s.ex.api


FIELDS: dict[str, FieldSpec] = {
    f.name: f
    for f in (
        FieldSpec("api", ENUM, _api, doc="API name (Produce, Fetch, ...)"),
        FieldSpec("api_key", INT, lambda s: s.ex.api_key, doc="API key number"),
        FieldSpec("version", INT, lambda s: s.ex.api_version, doc="API version"),
        FieldSpec("correlation_id", INT, lambda s: s.ex.correlation_id),
        FieldSpec(
            "client_id", TEXT, lambda s: s.ex.client_id, doc="the request header's client id"
        ),
        FieldSpec("client", TEXT, lambda s: s.ex.conn.client, doc="client address ip:port"),
        FieldSpec("client.ip", TEXT, lambda s: _endpoint(s.ex.conn.client)[0]),
        FieldSpec("client.port", INT, lambda s: _endpoint(s.ex.conn.client)[1]),
        FieldSpec("broker", TEXT, lambda s: s.ex.conn.broker, doc="broker address ip:port"),
        FieldSpec("broker.ip", TEXT, lambda s: _endpoint(s.ex.conn.broker)[0]),
        FieldSpec("broker.port", INT, lambda s: _endpoint(s.ex.conn.broker)[1]),
        FieldSpec("conn", INT, lambda s: s.ex.conn.id, doc="connection id (order of appearance)"),
        FieldSpec(
            "status", ENUM, lambda s: s.ex.status, choices=("ok", "no_response", "request_missing")
        ),
        FieldSpec("latency", DURATION, _latency, doc="response time minus request time (ms)"),
        FieldSpec("time", TIME, _time, doc="when the exchange began (absolute)"),
        FieldSpec(
            "frame", INT, _frames, multi=True, doc="a packet number of the request or response"
        ),
        FieldSpec("size", SIZE, _size, doc="request + response bytes (with length prefixes)"),
        FieldSpec("request.size", SIZE, _side_size(True)),
        FieldSpec("response.size", SIZE, _side_size(False)),
        FieldSpec("acks", INT, lambda s: s.ex.acks, doc="Produce acks (-1, 0, 1)"),
        FieldSpec(
            "inferred",
            BOOL,
            lambda s: getattr(s.ex, "inferred", None) is not None,
            doc="the response's api was inferred (its request was not captured)",
        ),
        FieldSpec(
            "error",
            ENUM,
            _errors,
            FACTS,
            multi=True,
            choices=tuple(ERROR_NAMES.values()),
            doc="name of any non-zero error code in the response",
        ),
        FieldSpec(
            "errors",
            BOOL,
            lambda s: bool(s.facts.error_codes),
            FACTS,
            doc="the response has an error code other than NONE",
        ),
        FieldSpec(
            "topic",
            TEXT,
            _topics,
            FACTS,
            multi=True,
            doc="a topic the exchange touches (topic ids named when known)",
        ),
        FieldSpec("partition", INT, _partitions, FACTS, multi=True, doc="a partition it touches"),
        FieldSpec(
            "records", INT, _records, FACTS, doc="records produced (Produce) or fetched (Fetch)"
        ),
    )
}
FIELDS["api"] = FieldSpec(
    "api", ENUM, _api, doc="API name (Produce, Fetch, ...)", choices=_api_names()
)

BODY_SIDES = ("request", "response")


def body_values(value: object, path: tuple[str, ...]) -> list[object]:
    """Every value at `path` under a JSON body: lists are searched element by element, and a
    list at the end contributes its elements."""
    current = [value]
    for key in path:
        nxt: list[object] = []
        stack = current
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                if key in v:
                    nxt.append(v[key])
            elif isinstance(v, list):
                stack.extend(v)
        current = nxt
    out: list[object] = []
    stack = current[::-1]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def body_getter(side: str, path: tuple[str, ...]) -> Callable[[Subject], tuple[object, ...]]:
    is_request = side == "request"

    def get(s: Subject) -> tuple[object, ...]:
        msg = s.ex.request if is_request else s.ex.response
        if msg is None or s.ex.api_key is None or s.ex.api_key == SASL_RAW_API:
            return ()
        body = s.bodies.request if is_request else s.bodies.response
        if body is None:
            return ()
        return tuple(body_values(body, path))

    return get
