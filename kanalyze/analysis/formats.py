"""Record formats an API version does not allow: records the reader cannot be expected to read.

The specs tie record formats to API versions: Fetch v2 is the first whose requester handles
message format v1 (magic 1), Fetch v4 the first for format v2 (magic 2 record batches), Fetch v10
the first that may carry zstd (KIP-110); Produce v3 adds format v2 and Produce v7 zstd. A broker
must down-convert (or refuse) for older versions and a client must not send newer formats with
an older request. Real pairs break this and the capture is the only place it shows: tansu
answers kafka-node's Fetch v0 with magic 2 batches (the client fails on every fetch, "Not a
message set"), Sarama 1.22 produces zstd with Produce v3. Each (client, api, version, rule,
partition) is reported once, at its first frame.
"""

from __future__ import annotations

from dissectors import ApiKey
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import batches, fetch_responses, produce_partitions, tp

# (what the records carry, the first version allowed to carry it) per API and side
PRODUCE_FIRST = {"magic 2 record batches": 3, "zstd-compressed records": 7}
FETCH_FIRST = {
    "magic 1 messages": 2,
    "magic 2 record batches": 4,
    "zstd-compressed records": 10,
}


def _formats(b: dict) -> set[str]:
    out = set()
    magic = b.get("magic")
    if magic == 1:
        out.add("magic 1 messages")
    elif magic == 2:
        out.add("magic 2 record batches")
    if b.get("codec") == "zstd":
        out.add("zstd-compressed records")
    return out


class RecordFormatAnalyzer:
    """Findings `record_format_version`: records of a format the exchange's version excludes."""

    def __init__(self, findings: Findings) -> None:
        self.findings = findings
        self.seen: set[tuple[object, ...]] = set()

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    def _check(self, ev: Event, parts: list[tuple[str, int, list[dict]]], first: dict) -> None:
        ex = ev.ex
        version = ex.api_version
        if not isinstance(version, int):
            return
        for topic, partition, bs in parts:
            found = set().union(*(_formats(b) for b in bs)) if bs else set()
            for what in sorted(found):
                need = first.get(what)
                if need is None or version >= need:
                    continue
                key = (ex.client_id, ex.api_key, version, what, topic, partition)
                if key in self.seen:
                    continue
                self.seen.add(key)
                if ev.is_request:
                    why = "Kafka refuses such a request"
                else:
                    why = f"a v{version} reader need not understand them; Kafka down-converts"
                self.findings.add(
                    "warning",
                    "record_format_version",
                    f"{ex.client_id}: {ex.api} v{version} "
                    f"{'request' if ev.is_request else 'response'} for {tp(topic, partition)} "
                    f"carries {what}, which {ex.api} allows from v{need} ({why})",
                    [ev.frame],
                    ev.ts_s,
                    client_id=ex.client_id,
                    api=ex.api,
                    api_version=version,
                    partition_key=tp(topic, partition),
                    records_format=what,
                    first_version=need,
                )

    def _produce(self, ev: Event, body: dict) -> None:
        self._check(ev, list(produce_partitions(body)), PRODUCE_FIRST)

    def _fetch(self, ev: Event, body: dict) -> None:
        parts = [(t, p, batches(r.get("records"))) for t, p, r in fetch_responses(body)]
        self._check(ev, parts, FETCH_FIRST)

    HANDLERS = Handlers(
        requests={ApiKey.PRODUCE: _produce},
        responses={ApiKey.FETCH: _fetch},
    )
