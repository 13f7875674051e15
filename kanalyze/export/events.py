"""`kanalyze export --format events`: one flat, index-ready document per exchange
(docs/dashboards.md, mapping in docs/dashboards/kanalyze-events.index-template.json).

The NDJSON record is nested and shaped by each API version's schema, so one index cannot hold
it (hundreds of field paths, one path an object in one API and a string in another). An event
is the opposite: a fixed set of dotted fields (ECS names where ECS has them, `kafka.*` for the
rest), every field present on every line with one type everywhere (null when unknown), the
topics, partitions and errors lifted to the top from the body facts service, and the bodies,
when asked for, as one JSON string (`kafka.body`) that no mapping looks into. A line is at
most `max_line` bytes: the body is cut first, then the longest lists; `kafka.truncated` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, BinaryIO

from dissectors.errors import error_name
from kanalyze.correlation import OK, Exchange, Message
from kanalyze.export import DEFAULT_MAX_LINE as _MAX_LINE
from kanalyze.jsontext import dumps

try:  # a dependency; json (same text, slower) where it is missing
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from dissectors.context import DecodeContext
    from kanalyze.session import Session

SCHEMA_VERSION = "kanalyze.event/1"
DEFAULT_MAX_LINE = _MAX_LINE  # the line cap (kanalyze.export: the option's help needs it)

# every field of an event, in line order, with its index type (the template's mapping):
# keyword, long, date, ip, boolean, text (kafka.body: kept, not indexed); a `[]` suffix is a
# list of that type
FIELDS: dict[str, str] = {
    "@timestamp": "date",
    "event.end": "date",
    "event.duration": "long",
    "event.outcome": "keyword",
    "event.kind": "keyword",
    "event.dataset": "keyword",
    "client.ip": "ip",
    "client.port": "long",
    "server.ip": "ip",
    "server.port": "long",
    "network.transport": "keyword",
    "network.protocol": "keyword",
    "kafka.schema": "keyword",
    "kafka.connection_id": "long",
    "kafka.api": "keyword",
    "kafka.api_key": "long",
    "kafka.api_version": "long",
    "kafka.correlation_id": "long",
    "kafka.client_id": "keyword",
    "kafka.status": "keyword",
    "kafka.inferred": "boolean",
    "kafka.request_frame": "long",
    "kafka.response_frame": "long",
    "kafka.request_bytes": "long",
    "kafka.response_bytes": "long",
    "kafka.acks": "long",
    "kafka.topics": "keyword[]",
    "kafka.partitions": "keyword[]",
    "kafka.partition_count": "long",
    "kafka.error_codes": "keyword[]",
    "kafka.error_count": "long",
    "kafka.throttle_time_ms": "long",
    "kafka.records": "long",
    "kafka.record_bytes": "long",
    "kafka.group_id": "keyword",
    "kafka.producer_id": "long",
    "kafka.transactional_id": "keyword",
    "kafka.replica_id": "long",
    "kafka.diagnostics": "keyword[]",
    "kafka.truncated": "boolean",
    "kafka.body": "text",
}

# statuses that mean the exchange did not complete normally (docs/ndjson.md)
_FAILED_STATUS = frozenset({"no_response"})


def iso(ts_ns: int) -> str:
    """ISO-8601 UTC with microseconds, from epoch nanoseconds (exact: no float round trip)."""
    sec, ns = divmod(ts_ns, 1_000_000_000)
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns // 1000:06d}Z"


def split_address(addr: str) -> tuple[str | None, int | None]:
    """'1.2.3.4:9092' or '[2001:db8::1]:9092' -> (ip, port)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return None, None
    return host.strip("[]") or None, int(port)


def _int(v: object) -> int | None:
    return v if type(v) is int else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _group_id(req: dict | None) -> str | None:
    """The consumer group a request speaks for: its `group_id`, or the only group of a
    batched request (OffsetFetch v8+, DescribeGroups lists them as strings)."""
    if req is None:
        return None
    g = _str(req.get("group_id"))
    if g is not None:
        return g
    groups = req.get("groups")
    if isinstance(groups, list) and len(groups) == 1:
        one = groups[0]
        return _str(one.get("group_id")) if isinstance(one, dict) else _str(one)
    return None


def _producer_id(req: dict | None, rsp: dict | None) -> int | None:
    """The producer: a request's or response's `producer_id` (InitProducerId, AddPartitionsToTxn,
    EndTxn, ...), else the first idempotent batch of a Produce request."""
    for body in (req, rsp):
        if body is not None:
            pid = _int(body.get("producer_id"))
            if pid is not None and pid >= 0:
                return pid
    for t in (req or {}).get("topic_data") or ():
        for p in t.get("partition_data") or () if isinstance(t, dict) else ():
            rec = p.get("records") if isinstance(p, dict) else None
            for b in rec.get("batches") or () if isinstance(rec, dict) else ():
                pid = _int(b.get("producer_id")) if isinstance(b, dict) else None
                if pid is not None and pid >= 0:
                    return pid
    return None


def _diagnostics(*msgs: Message | None) -> list[str]:
    out: dict[str, None] = {}
    for m in msgs:
        if m is not None:
            for d in m.diagnostics:
                out[str(d.to_json().get("code"))] = None
    return list(out)


class EventEncoder:
    """Exchanges to event documents; `decode` False: header fields only (no topics, errors)."""

    def __init__(
        self,
        ctx: DecodeContext | None = None,
        decode: bool = True,
        with_bodies: bool = False,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        # the body service is imported here, not with the module: `export` imports this module
        # for its option defaults, and a plain NDJSON export must not pay for the decoders
        from kanalyze.bodies import Bodies, BodyDecoder, ExchangeFacts, Records, exchange_facts

        self._bodies, self._facts, self._no_facts = Bodies, exchange_facts, ExchangeFacts
        self.decoder = BodyDecoder(ctx, Records.DATA) if decode else None
        self.with_bodies = with_bodies and decode
        self.max_line = max_line

    def event(self, ex: Exchange) -> dict[str, object]:
        req_m, rsp_m = ex.request, ex.response
        first = req_m or rsp_m
        assert first is not None
        lat = ex.latency_ns
        cip, cport = split_address(ex.conn.client)
        sip, sport = split_address(ex.conn.broker)
        bodies = self._bodies(ex, self.decoder) if self.decoder is not None else None
        facts = self._facts(bodies) if bodies is not None else self._no_facts()
        req = bodies.request if bodies is not None else None
        rsp = bodies.response if bodies is not None else None
        errors = [error_name(c) for c in facts.error_codes]
        # an unnamed topic id is shown as in kafka.topics (its head, `topic_label`)
        parts = [f"{p.topic or (p.topic_id or '?')[:8]}-{p.partition}" for p in facts.partitions]
        has_records = any(p.record_count is not None for p in facts.partitions)
        rec_bytes = [p.records_bytes for p in facts.partitions if p.records_bytes is not None]
        if errors or ex.status in _FAILED_STATUS:
            outcome = "failure"
        elif ex.status == OK and (rsp_m is not None or ex.acks == 0):
            outcome = "success"
        else:
            outcome = "unknown"
        doc: dict[str, object] = {
            "@timestamp": iso(first.pdu.last_ts),
            "event.end": iso(rsp_m.pdu.last_ts) if rsp_m is not None else None,
            "event.duration": lat,
            "event.outcome": outcome,
            "event.kind": "event",
            "event.dataset": "kanalyze.exchange",
            "client.ip": cip,
            "client.port": cport,
            "server.ip": sip,
            "server.port": sport,
            "network.transport": "tcp",
            "network.protocol": "kafka",
            "kafka.schema": SCHEMA_VERSION,
            "kafka.connection_id": ex.conn.id,
            "kafka.api": ex.api,
            "kafka.api_key": ex.api_key,
            "kafka.api_version": ex.api_version,
            "kafka.correlation_id": ex.correlation_id,
            "kafka.client_id": ex.client_id,
            "kafka.status": ex.status,
            "kafka.inferred": bool(getattr(ex, "inferred", None)),
            "kafka.request_frame": req_m.pdu.last_pkt if req_m is not None else None,
            "kafka.response_frame": rsp_m.pdu.last_pkt if rsp_m is not None else None,
            "kafka.request_bytes": req_m.pdu.size + 4 if req_m is not None else None,
            "kafka.response_bytes": rsp_m.pdu.size + 4 if rsp_m is not None else None,
            "kafka.acks": ex.acks,
            "kafka.topics": [t for t, _parts in facts.topics],
            "kafka.partitions": parts,
            "kafka.partition_count": len(parts),
            "kafka.error_codes": list(dict.fromkeys(errors)),
            "kafka.error_count": len(errors),
            "kafka.throttle_time_ms": facts.throttle_time_ms,
            "kafka.records": facts.record_count if has_records else None,
            "kafka.record_bytes": sum(rec_bytes) if rec_bytes else None,
            "kafka.group_id": _group_id(req),
            "kafka.producer_id": _producer_id(req, rsp),
            "kafka.transactional_id": _str((req or {}).get("transactional_id")),
            "kafka.replica_id": facts.replica_id,
            "kafka.diagnostics": _diagnostics(req_m, rsp_m),
            "kafka.truncated": False,
            "kafka.body": None,
        }
        if self.with_bodies:
            doc["kafka.body"] = _dumps({"request": req, "response": rsp}).decode()
        return doc

    def line(self, ex: Exchange) -> bytes:
        """The event as one JSON line (no newline), at most `max_line` bytes."""
        doc = self.event(ex)
        out = _dumps(doc)
        if len(out) <= self.max_line:
            return out
        return self._cut(doc, len(out))

    def _cut(self, doc: dict[str, object], size: int) -> bytes:
        """Shorten the body first, then halve the longest list, until the line fits."""
        doc["kafka.truncated"] = True
        over = size + len(b"true") - len(b"false") - self.max_line
        body = doc["kafka.body"]
        if isinstance(body, str):
            # every character takes at least one byte encoded: cutting `over` of them is enough
            doc["kafka.body"] = body[: max(0, len(body) - over)]
        out = _dumps(doc)
        lists = ("kafka.partitions", "kafka.topics", "kafka.error_codes", "kafka.diagnostics")
        while len(out) > self.max_line:
            items: list = max((_as_list(doc[k]) for k in lists), key=len)
            if not items:  # nothing left to cut (a huge client id): the line goes out as it is
                break
            del items[len(items) // 2 :]
            out = _dumps(doc)
        return out


def _as_list(v: object) -> list:
    return v if isinstance(v, list) else []


class TextLines:
    """An `EventEncoder` whose `line` is text, for outputs that write str (`live`)."""

    def __init__(self, enc: EventEncoder) -> None:
        self.enc = enc

    def line(self, ex: Exchange) -> str:
        return self.enc.line(ex).decode()


def _dumps(obj: object) -> bytes:
    """orjson, or json where orjson refuses (an integer beyond 64 bits in a body)."""
    if orjson is not None:
        try:
            return orjson.dumps(obj)
        except TypeError:
            pass
    return dumps(obj).encode()


def index_template() -> dict[str, object]:
    """The Elasticsearch/OpenSearch composable index template for events (committed as
    docs/dashboards/kanalyze-events.index-template.json; a test keeps the two equal)."""
    props: dict[str, dict] = {}
    for name, kind in FIELDS.items():
        *parents, leaf = name.split(".")
        node = props
        for p in parents:
            node = node.setdefault(p, {"properties": {}})["properties"]
        base = kind.removesuffix("[]")
        if base == "text":  # the bodies: in _source, never indexed, never a field explosion
            node[leaf] = {"type": "text", "index": False}
        elif base == "date":
            node[leaf] = {"type": "date", "format": "strict_date_optional_time_nanos"}
        else:
            node[leaf] = {"type": base}
    return {
        "index_patterns": ["kanalyze-events*"],
        "priority": 200,
        "template": {
            "settings": {"index.mapping.total_fields.limit": 200},
            # unknown fields stay in _source but add nothing to the mapping
            "mappings": {"dynamic": False, "properties": props},
        },
        "_meta": {"schema": SCHEMA_VERSION, "description": "kanalyze export --format events"},
    }


def events(session: Session, encoder: EventEncoder) -> Iterator[bytes]:
    for ex in session.exchanges():
        yield encoder.line(ex)


def write_events(
    session: Session,
    ctx: DecodeContext,
    out: BinaryIO,
    with_bodies: bool = False,
    max_line: int = DEFAULT_MAX_LINE,
    decode: bool = True,
) -> int:
    """Every exchange of `session` as one event line; returns the number of lines."""
    enc = EventEncoder(ctx, decode=decode, with_bodies=with_bodies, max_line=max_line)
    n = 0
    write = out.write
    for line in events(session, enc):
        write(line)
        write(b"\n")
        n += 1
    return n
