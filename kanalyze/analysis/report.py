"""The report: every analyzer fed from one pass over the wire-ordered events of a session."""

from __future__ import annotations

from collections.abc import Iterable

from dissectors.context import DecodeContext
from kanalyze.analysis.consumers import ConsumerAnalyzer
from kanalyze.analysis.events import analysis_decoder, ordered_events
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.groups import GroupAnalyzer
from kanalyze.analysis.producers import ProducerAnalyzer
from kanalyze.analysis.replication import ReplicationAnalyzer
from kanalyze.analysis.stats import StatsAnalyzer
from kanalyze.analysis.transactions import TransactionAnalyzer
from kanalyze.correlation import Exchange

REPORT_SCHEMA = "kanalyze.report/1"


def analyze(exchanges: Iterable[Exchange], ctx: DecodeContext | None = None, timeline_cap: int = 5000,
            stall_ms: float = 10_000.0) -> dict[str, object]:
    """Run all analyzers over `exchanges` and return the report document (docs/report.schema.json)."""
    findings = Findings()
    replication = ReplicationAnalyzer(findings, cap=timeline_cap, stall_ms=stall_ms)

    def hw_of(topic: str, partition: int) -> int | None:
        st = replication.parts.get((topic, partition))
        return None if st is None else st.hw

    producers = ProducerAnalyzer(findings)
    transactions = TransactionAnalyzer(findings)
    consumers = ConsumerAnalyzer(findings)
    groups = GroupAnalyzer(findings, hw_of=hw_of)
    stats = StatsAnalyzer()
    analyzers = (stats, replication, producers, transactions, consumers, groups)
    first_ts = last_ts = None
    for ev in ordered_events(exchanges, analysis_decoder(ctx)):
        if first_ts is None:
            first_ts = ev.ts_s
        last_ts = ev.ts_s
        for a in analyzers:
            a.feed(ev)
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
