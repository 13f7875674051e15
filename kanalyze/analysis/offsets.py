"""ListOffsets answers that contradict the partition's own high watermark.

A ListOffsets for the latest offset (timestamp -1) is answered with the high watermark
(read_uncommitted) or the last stable offset (read_committed): the offset a consumer would reach.
Neither goes down, so an answer below the HW (LSO) a Fetch response already reported for the
partition is wrong, or the log was truncated; so is one below the end of a batch an acks=all
Produce response acknowledged (the broker acknowledges acks=all once the HW covers the batch).
Either way a consumer that seeks to "latest" from it re-reads records. Real case: tansu answers
the latest offset with the base offset of the last batch + 1 (kafkajs' fetchTopicOffsets: 13
where Fetch says HW 18; Sarama's consumer: 1 after an acknowledged batch of 8).
"""

from __future__ import annotations

from dissectors import ApiKey
from kanalyze.analysis.events import Event, Handlers
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import (
    batch_count,
    fetch_responses,
    produce_partitions,
    produce_results,
    topic_of,
    tp,
)

LATEST = -1
READ_COMMITTED = 1


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class ListOffsetsAnalyzer:
    """Findings `list_offsets_behind`: a latest-offset answer below a known HW (LSO)."""

    def __init__(self, findings: Findings) -> None:
        self.findings = findings
        # (topic, partition) -> (highest HW, its frame, what said so), (highest LSO, ...)
        self.hw: dict[tuple[str, int], tuple[int, int, str]] = {}
        self.lso: dict[tuple[str, int], tuple[int, int, str]] = {}
        self.reported: set[tuple[object, ...]] = set()

    def feed(self, ev: Event) -> None:
        self.HANDLERS.dispatch(self, ev)

    @staticmethod
    def _raise(seen: dict, key: tuple[str, int], v: int | None, frame: int, why: str) -> None:
        if v is not None and v >= 0 and v > seen.get(key, (-1,))[0]:
            seen[key] = (v, frame, why)

    def _fetch(self, ev: Event, body: dict) -> None:
        for topic, partition, p in fetch_responses(body):
            if _int(p.get("error_code")):
                continue
            why = "a Fetch response reported"
            self._raise(self.hw, (topic, partition), _int(p.get("high_watermark")), ev.frame, why)
            lso = _int(p.get("last_stable_offset"))
            self._raise(self.lso, (topic, partition), lso, ev.frame, why)

    def _produce(self, ev: Event, body: dict) -> None:
        if ev.ex.acks != -1:
            return  # only acks=all waits for the HW
        counts = {
            (t, p): sum(batch_count(b) for b in bs)
            for t, p, bs in produce_partitions(ev.bodies.request)
        }
        for topic, partition, r in produce_results(body):
            base, n = _int(r.get("base_offset")), counts.get((topic, partition))
            if _int(r.get("error_code")) or base is None or base < 0 or not n:
                continue
            why = "an acks=all Produce response implies"
            self._raise(self.hw, (topic, partition), base + n, ev.frame, why)

    def _list_offsets(self, ev: Event, body: dict) -> None:
        req = ev.bodies.request or {}
        committed = req.get("isolation_level") == READ_COMMITTED
        asked = {
            (topic_of(t), p.get("partition_index")): p.get("timestamp")
            for t in req.get("topics") or []
            for p in t.get("partitions") or []
        }
        for t in body.get("topics") or []:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                part = p.get("partition_index")
                if asked.get((topic, part)) != LATEST or _int(p.get("error_code")):
                    continue
                offset = _int(p.get("offset"))
                if offset is None:  # v0: old_style_offsets, newest first
                    old = p.get("old_style_offsets") or []
                    offset = _int(old[0]) if old else None
                seen = (self.lso if committed else self.hw).get((topic, part))  # type: ignore[arg-type]
                if offset is None or seen is None or offset >= seen[0]:
                    continue
                key = (ev.ex.client_id, topic, part, offset, seen[0])
                if key in self.reported:  # the same wrong answer again: once is enough
                    continue
                self.reported.add(key)
                what = "last stable offset" if committed else "high watermark"
                self.findings.add(
                    "warning",
                    "list_offsets_behind",
                    f"{ev.ex.client_id}: ListOffsets v{ev.ex.api_version} answers {offset} as the "
                    f"latest offset of {tp(topic, part)}, below the {what} {seen[0]} {seen[2]}: "
                    "a consumer seeking to the end re-reads records",
                    [seen[1], ev.frame],
                    ev.ts_s,
                    client_id=ev.ex.client_id,
                    partition_key=tp(topic, part),
                    offset=offset,
                    reported=seen[0],
                )

    HANDLERS = Handlers(
        requests={},
        responses={
            ApiKey.PRODUCE: _produce,
            ApiKey.FETCH: _fetch,
            ApiKey.LIST_OFFSETS: _list_offsets,
        },
    )
