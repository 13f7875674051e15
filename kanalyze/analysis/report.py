"""The report: every analyzer fed from one pass over the wire-ordered events of a session."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from dissectors.context import DecodeContext
from kanalyze.analysis.consumers import ConsumerAnalyzer
from kanalyze.analysis.events import Event, analysis_decoder, events_of, ordered_events
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.formats import RecordFormatAnalyzer
from kanalyze.analysis.groups import GroupAnalyzer
from kanalyze.analysis.offsets import ListOffsetsAnalyzer
from kanalyze.analysis.producers import ProducerAnalyzer
from kanalyze.analysis.replication import ReplicationAnalyzer
from kanalyze.analysis.stats import StatsAnalyzer
from kanalyze.analysis.transactions import TransactionAnalyzer
from kanalyze.bodies import Bodies, BodyDecoder
from kanalyze.correlation import Exchange

REPORT_SCHEMA = "kanalyze.report/1"


def analyzer_error(findings: Findings, analyzer: object, ev: Event, e: Exception) -> None:
    """An analyzer raised on one event: say which, where and what, then go on with the next."""
    name = type(analyzer).__name__
    tb = traceback.extract_tb(e.__traceback__)
    where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    # the exception's text is left out on purpose: it may quote decoded values (credentials)
    findings.add(
        "error",
        "analyzer_error",
        f"internal error in {name} on frame {ev.frame}: {type(e).__name__} at {where}",
        [ev.frame] if isinstance(ev.frame, int) and ev.frame > 0 else [],
        ev.ts_s,
        analyzer=name,
        error=type(e).__name__,
        where=where,
    )


def analyze(
    exchanges: Iterable[Exchange],
    ctx: DecodeContext | None = None,
    timeline_cap: int = 5000,
    stall_ms: float = 10_000.0,
    observers: Sequence[object] = (),
    decoded: Callable[[BodyDecoder], Iterable[Bodies]] | None = None,
) -> dict[str, object]:
    """Run all analyzers over `exchanges` and return the report document (docs/report.schema.json);
    `observers` (objects with `feed(event)`, e.g. the HTML report's chart series) see the same
    wire-ordered events in the same pass. `decoded`, instead of `exchanges`: the exchanges
    with their bodies bound to the analysis decoder (`RangeSession.decoded`, which decodes
    them in its ranges)."""
    findings = Findings()
    decoder = analysis_decoder(ctx)
    replication = ReplicationAnalyzer(
        findings, cap=timeline_cap, stall_ms=stall_ms, names=decoder.names
    )

    def hw_of(topic: str, partition: int) -> int | None:
        st = replication.parts.get((replication.label(topic), partition))
        return None if st is None else st.hw

    producers = ProducerAnalyzer(findings)
    transactions = TransactionAnalyzer(findings)
    consumers = ConsumerAnalyzer(findings)
    groups = GroupAnalyzer(findings, hw_of=hw_of)
    stats = StatsAnalyzer()
    formats = RecordFormatAnalyzer(findings)
    offsets = ListOffsetsAnalyzer(findings)
    analyzers = (
        stats,
        replication,
        producers,
        transactions,
        consumers,
        groups,
        formats,
        offsets,
        *observers,
    )
    first_ts = last_ts = None
    strict = bool(ctx and ctx.strict)  # tests: re-raise, as the dissectors do
    events = (ordered_events(exchanges, decoder) if decoded is None
              else events_of(decoded(decoder), decoder))
    for ev in events:
        if first_ts is None:
            first_ts = ev.ts_s
        last_ts = ev.ts_s
        for a in analyzers:
            try:
                a.feed(ev)
            except Exception as e:  # the exception boundary: an analyzer bug is a finding
                if strict:
                    raise
                analyzer_error(findings, a, ev, e)
    replication.finish()
    return {
        "schema": REPORT_SCHEMA,
        "time": {"first": first_ts, "last": last_ts},
        "stats": stats.to_json(producers.topic_producers, consumers.topic_consumers),
        "replication": replication.to_json(),
        "producers": producers.to_json(),
        "transactions": transactions.to_json(),
        "consumers": consumers.to_json(),
        "groups": groups.to_json(),
        "findings": findings.to_json(),
    }
