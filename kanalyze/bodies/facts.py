"""The small facts every consumer asks of an exchange, read from its decoded bodies once:
error codes, the topics and partitions it touches (topic ids named through the registry),
record counts and the offsets it produced or fetched.

`error_codes` is the one error scanner and `topic_entries` the one topic/partition reader;
`facts_of` combines them into a frozen `ExchangeFacts` that filters, events, stats,
the TUI and the Spark rows share.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kanalyze.bodies.batches import batch_bytes, batch_count, batch_end
from kanalyze.bodies.names import TopicNames

# JSON keys (snake_case spec names) that name a topic in a struct, in preference order
TOPIC_NAME_KEYS = ("name", "topic", "topic_name")
PARTITION_INDEX_KEYS = ("partition_index", "index", "partition")
# lists whose entries are per-topic records of the data (the Spark partitions table)
TOPIC_LISTS = frozenset({"topics", "topic_data", "responses"})
_PARTITION_INDEX_SET = frozenset(PARTITION_INDEX_KEYS)
_TOPIC_NAME_SET = frozenset(TOPIC_NAME_KEYS)


def error_codes(body: object) -> list[int]:
    """Every non-zero error code in a decoded (JSON) body, depth first in field order: any
    field named `error_code` or `*_error_code` (the spec's ErrorCode, *ErrorCode)."""
    out: list[int] = []
    _scan(body, out)
    return out


# A decoded record (`dissectors.record_reader.read_records`): these keys, scalars but for the
# key, the value and the headers. A list of them holds no error code, topic or partition, so
# both walks below skip it whole (most of a Produce or Fetch body; walked, it cost more than
# the rest of `kanalyze stats`).
_RECORD_KEYS = frozenset(
    {"offset", "offset_delta", "timestamp", "timestamp_ms", "timestamp_type", "attributes",
     "key", "value", "headers"}
)
_HEADER_KEYS = frozenset({"key", "value"})
_BYTES_KEYS = frozenset({"b64", "text", "truncated", "size"})  # `render_bytes` objects
_SCALARS = (str, int, bool, float, type(None))


def _inert(v: object) -> bool:
    """A record's key or value: text, null, or bytes rendered as an object of scalars."""
    t = type(v)
    if t is str or v is None:
        return True
    if t is not dict:
        return False
    d: dict = v  # type: ignore[assignment]
    return d.keys() <= _BYTES_KEYS and all(type(x) in _SCALARS for x in d.values())


def plain_records(items: list) -> bool:
    """Whether every item is a decoded record with nothing but scalars, text and plain
    headers in it (nothing either walk reports); False sends the list through the walk."""
    keys = _RECORD_KEYS
    for r in items:
        if type(r) is not dict or r.keys() != keys:
            return False
        v, k = r["value"], r["key"]  # text mostly: checked inline (this runs per record)
        if (type(v) is not str and not _inert(v)) or (type(k) is not str and not _inert(k)):
            return False
        if type(r["timestamp"]) not in _SCALARS or type(r["timestamp_type"]) not in _SCALARS:
            return False
        if type(r["offset"]) is not int or type(r["offset_delta"]) is not int:
            return False
        if type(r["timestamp_ms"]) not in _SCALARS or type(r["attributes"]) not in _SCALARS:
            return False
        headers = r["headers"]
        if type(headers) is not list:
            return False
        for h in headers:
            if type(h) is not dict or h.keys() != _HEADER_KEYS:
                return False
            v, k = h["value"], h["key"]
            if (type(v) is not str and not _inert(v)) or (type(k) is not str and not _inert(k)):
                return False
    return True


def _scan(value: object, out: list[int]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if type(v) is int:
                if v and (k == "error_code" or k.endswith("_error_code")):
                    out.append(v)
            elif isinstance(v, dict | list):
                if k == "records" and type(v) is list and plain_records(v):
                    continue
                _scan(v, out)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict | list):
                _scan(v, out)


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """A struct of a body that holds partition structs, or names a topic (by name or id) in a
    list."""

    name: str | None  # the first topic-name field in field order, as written
    topic_id: str | None  # a topic id other than the null id
    partitions: tuple[tuple[int, dict], ...]  # (index, partition struct) of its partition lists
    list_key: str | None  # the key of the list this struct is an element of (None: a field)


def topic_entries(body: object) -> Iterator[TopicEntry]:
    """Every struct of a JSON body that holds partitions, or names a topic and is a list
    element, depth first: the one reader of topics and partitions."""
    stack: list[tuple[object, str | None]] = [(body, None)]
    while stack:
        value, list_key = stack.pop()
        if isinstance(value, list):
            stack.extend((v, list_key) for v in reversed(value) if isinstance(v, dict | list))
            continue
        if not isinstance(value, dict):
            continue
        name = tid = None
        parts: list[tuple[int, dict]] = []
        children: list[tuple[object, str | None]] = []
        for k, v in value.items():
            if isinstance(v, str):
                if k == "topic_id":
                    if v.strip("0-"):
                        tid = v
                elif name is None and k in _TOPIC_NAME_SET and v:
                    name = v
            elif isinstance(v, list):
                if k == "records" and plain_records(v):
                    continue  # nothing to report in there (no partition index either)
                for item in v:
                    if isinstance(item, dict):
                        idx = _partition_index(item)
                        if idx is not None:
                            parts.append((idx, item))
                children.append((v, k))
            elif isinstance(v, dict):
                children.append((v, None))
        # a list element that only names something is a topic when its list is a topic list
        # (JoinGroup's `protocols[].name` names an assignor, not a topic)
        named = tid is not None or (
            name is not None and list_key is not None and "topic" in list_key
        )
        if parts or named:
            yield TopicEntry(name, tid, tuple(parts), list_key)
        stack.extend(reversed(children))


# The usual shape of a Produce body (v3 on, request and response, as the JSON path renders
# them): `produce_entries` reads it without the generic walk, which visits every batch header
# (a third of a Spark task's CPU went to the facts of Produce exchanges). Any other key, a
# tagged field, a nested value where a scalar belongs, or full records send it to the walk.
_PRODUCE_REQUEST = frozenset({"transactional_id", "acks", "timeout_ms", "topic_data"})
_PRODUCE_TOPIC = frozenset({"name", "topic_id", "partition_data"})
_PRODUCE_RESPONSE = frozenset({"responses", "throttle_time_ms"})
_PRODUCE_RESULT = frozenset({"name", "topic_id", "partition_responses"})
_PRODUCE_PARTITION_RESULT = frozenset({
    "index", "error_code", "error_code_name", "base_offset", "log_append_time_ms",
    "log_start_offset", "record_errors", "error_message"})  # fmt: skip
_RECORD_ERROR = frozenset({"batch_index", "batch_index_error_message"})


def _scalar(v: object) -> bool:
    t = type(v)
    return v is None or t is int or t is str or t is bool or t is float


def _scalars(d: dict, keys: frozenset[str] | None = None) -> bool:
    """Whether `d` holds scalars only (under keys among `keys` when given)."""
    for k, v in d.items():  # noqa: SIM110 - a loop: compiled, `all` takes a generator
        if (keys is not None and k not in keys) or not _scalar(v):
            return False
    return True


def _headers_only(records: object) -> bool:
    """Whether a partition's `records` holds nothing the walk reports: null, or batch headers
    only (`DecodeContext.record_headers`: scalars, no topic id)."""
    if records is None:
        return True
    if type(records) is not dict:
        return False
    for k, v in records.items():
        if k == "batches":
            if type(v) is not list:
                return False
            for b in v:  # no topic id, no partition index: the walk would report those
                if (type(b) is not dict or "topic_id" in b or "partition_index" in b
                        or "index" in b or "partition" in b or not _scalars(b)):
                    return False
        elif k == "topic_id" or not _scalar(v):
            return False
    return True


def _request_partition(p: dict) -> bool:
    for k, v in p.items():
        if k == "records":
            if not _headers_only(v):
                return False
        elif k != "index" or not _scalar(v):
            return False
    return True


def _response_partition(p: dict) -> bool:
    for k, v in p.items():
        if k not in _PRODUCE_PARTITION_RESULT:
            return False
        if k == "record_errors":
            if v is None:
                continue
            if type(v) is not list:
                return False
            for e in v:
                if type(e) is not dict or not _scalars(e, _RECORD_ERROR):
                    return False
        elif not _scalar(v):
            return False
    return True


def _named(item: dict) -> tuple[str | None, str | None]:
    """(name, topic id) of a topic struct, as `topic_entries` reads them."""
    name = tid = None
    for k, v in item.items():
        if type(v) is str:
            if k == "topic_id":
                if v.strip("0-"):
                    tid = v
            elif name is None and k in _TOPIC_NAME_SET and v:
                name = v
    return name, tid


def _list_in(d: dict, key: str, keys: frozenset[str]) -> list | None:
    """`d[key]` when it is a list, `d`'s keys are among `keys` and its other values scalars."""
    got = d.get(key)
    if type(got) is not list:
        return None
    for k, v in d.items():
        if k not in keys or (k != key and not _scalar(v)):
            return None
    return got


def produce_entries(body: dict, is_req: bool) -> list[TopicEntry] | None:
    """What `topic_entries(body)` yields, for a Produce request (`is_req`) or response of the
    usual shape; None when `body` has another shape (the caller walks it)."""
    topics_key = "topic_data" if is_req else "responses"
    parts_key = "partition_data" if is_req else "partition_responses"
    topic_keys = _PRODUCE_TOPIC if is_req else _PRODUCE_RESULT
    items = _list_in(body, topics_key, _PRODUCE_REQUEST if is_req else _PRODUCE_RESPONSE)
    if items is None:
        return None
    out: list[TopicEntry] = []
    for item in items:
        plist = _list_in(item, parts_key, topic_keys) if type(item) is dict else None
        if plist is None:
            return None
        parts: list[tuple[int, dict]] = []
        for p in plist:
            if type(p) is not dict or not (
                    _request_partition(p) if is_req else _response_partition(p)):
                return None
            idx = _partition_index(p)
            if idx is not None:
                parts.append((idx, p))
        name, tid = _named(item)
        # as `topic_entries`: a list element that only names something is a topic when its
        # list is a topic list ("topic_data" is one, "responses" is not)
        if parts or tid is not None or (name is not None and is_req):
            out.append(TopicEntry(name, tid, tuple(parts), topics_key))
    return out


def produce_error_codes(body: dict) -> list[int]:
    """`error_codes` of a Produce response `produce_entries` took (its partitions' codes)."""
    out: list[int] = []
    for item in body["responses"]:
        for p in item["partition_responses"]:
            v = p.get("error_code")
            if type(v) is int and v:
                out.append(v)
    return out


def _partition_index(item: dict) -> int | None:
    for k, v in item.items():
        if k in _PARTITION_INDEX_SET and type(v) is int:
            return v
    return None


def topic_label(entry: TopicEntry, names: TopicNames) -> str | None:
    """How a topic is shown: its name, else the name its id was taught, else the id's head
    (None when the struct names no topic)."""
    if entry.name is not None:
        return entry.name
    if entry.topic_id is None:
        return None
    return names.get(entry.topic_id) or entry.topic_id[:8]


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """One (topic, partition) of an exchange, request and response merged (the response's
    values win; the request gives fetch offsets, timestamps and produced records)."""

    topic: str | None
    topic_id: str | None
    partition: int
    error_code: int | None = None
    fetch_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    base_offset: int | None = None
    offset: int | None = None
    timestamp: int | None = None
    record_batches: int | None = None
    record_count: int | None = None
    records_bytes: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None


PARTITION_FIELDS: tuple[str, ...] = tuple(PartitionFacts.__dataclass_fields__)
_RESPONSE_VALUES = (
    "error_code", "high_watermark", "last_stable_offset", "log_start_offset", "base_offset",
    "offset", "timestamp",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ExchangeFacts:
    """What consumers ask of an exchange's bodies (empty when bodies were not decoded)."""

    error_codes: tuple[int, ...] = ()  # every non-zero error code of the response, in order
    error_code: int | None = None  # the response's top-level error code
    throttle_time_ms: int | None = None
    replica_id: int | None = None  # the fetching/listing replica (Fetch, ListOffsets; -1 consumers)
    # (topic label, partitions) of both bodies, first seen first (names resolved, as the TUI shows)
    topics: tuple[tuple[str, frozenset[int]], ...] = ()
    # per (topic, partition) of the per-topic lists (topics, topic_data, responses)
    partitions: tuple[PartitionFacts, ...] = field(default=())
    # names (or ids, as written) of the entries of the per-topic lists, first seen first
    listed_topics: tuple[str, ...] = ()

    @property
    def record_count(self) -> int:
        """Records produced (Produce) or fetched (Fetch) in this exchange."""
        return sum(p.record_count or 0 for p in self.partitions)

    @property
    def partition_error_count(self) -> int:
        return sum(1 for p in self.partitions if p.error_code)


def facts_of(req: dict | None, rsp: dict | None, names: TopicNames) -> ExchangeFacts:
    """The facts of an exchange from its decoded bodies (`exchange_facts` / `Bodies.facts`
    compute them once per exchange)."""
    topics: dict[str, set[int]] = {}
    listed: dict[str, None] = {}
    merged: dict[tuple[str | None, int], dict] = {}
    fast_rsp = False
    for body, is_req in ((req, True), (rsp, False)):
        if body is None:
            continue
        entries: Iterable[TopicEntry] | None = produce_entries(body, is_req)
        if entries is None:
            entries = topic_entries(body)
        elif not is_req:
            fast_rsp = True
        for e in entries:
            label = topic_label(e, names)
            if label is not None:
                topics.setdefault(label, set()).update(i for i, _p in e.partitions)
            if e.list_key in TOPIC_LISTS:
                _merge(e, is_req, merged)
                if e.name or e.topic_id:
                    listed[e.name or e.topic_id] = None  # type: ignore[index]
    parts = []
    for row in merged.values():
        if row["topic"] is None and row["topic_id"] is not None:
            row["topic"] = names.get(row["topic_id"])
        parts.append(PartitionFacts(**row))
    err = throttle = None
    if rsp is not None:
        if type(rsp.get("error_code")) is int:
            err = rsp["error_code"]
        if type(rsp.get("throttle_time_ms")) is int:
            throttle = rsp["throttle_time_ms"]
    return ExchangeFacts(
        error_codes=(() if rsp is None else tuple(produce_error_codes(rsp)) if fast_rsp
                     else tuple(error_codes(rsp))),
        error_code=err,
        throttle_time_ms=throttle,
        replica_id=replica_id(req),
        topics=tuple((t, frozenset(p)) for t, p in topics.items()),
        partitions=tuple(parts),
        listed_topics=tuple(listed),
    )


def _merge(e: TopicEntry, is_req: bool, merged: dict[tuple[str | None, int], dict]) -> None:
    for idx, p in e.partitions:
        key = (e.name or e.topic_id, idx)
        row = merged.get(key)
        if row is None:
            row = merged[key] = dict.fromkeys(PARTITION_FIELDS)
            row["partition"] = idx
        if e.name and not row["topic"]:
            row["topic"] = e.name
        if e.topic_id and not row["topic_id"]:
            row["topic_id"] = e.topic_id
        if is_req and type(p.get("fetch_offset")) is int:
            row["fetch_offset"] = p["fetch_offset"]
        for f in _RESPONSE_VALUES:
            v = p.get(f)
            if type(v) is int and (not is_req or f == "timestamp"):
                row[f] = v
        if "records" in p and (is_req or row["record_count"] is None):
            _records(p["records"], row)


def _records(rec: object, out: dict) -> None:
    """Batch count, record count, bytes and offset range of a decoded records field."""
    if not isinstance(rec, dict):
        return
    batches = rec.get("batches")
    if isinstance(batches, list):
        out["record_batches"] = len(batches)
        cnt = size = 0
        lo = hi = None
        for b in batches:
            if not isinstance(b, dict):
                continue
            cnt += batch_count(b)
            size += batch_bytes(b)
            base, end = b.get("base_offset"), batch_end(b)
            if isinstance(base, int):
                lo = base if lo is None else min(lo, base)
                last = end - 1 if end is not None else base
                hi = last if hi is None else max(hi, last)
        out["record_count"] = cnt
        out["records_bytes"] = size
        out["first_offset"], out["last_offset"] = lo, hi
    elif isinstance(rec.get("size"), int):
        out["records_bytes"] = rec["size"]


def replica_id(body: object) -> int | None:
    """The fetching/listing replica of a Fetch or ListOffsets request (-1 for consumers):
    `replica_id` (Fetch < v15, ListOffsets) or `replica_state.replica_id` (Fetch v15+)."""
    if not isinstance(body, dict):
        return None
    rid = body.get("replica_id")
    if isinstance(rid, int):
        return rid
    state = body.get("replica_state")  # Fetch v15+
    if isinstance(state, dict) and isinstance(state.get("replica_id"), int):
        return state["replica_id"]
    return None
