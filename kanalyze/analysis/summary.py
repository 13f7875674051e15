"""The numbers `kanalyze summary` prints: what was seen, how it went, where bytes went.

Byte totals come from the engine and obey stream = frames + skipped + gaps
per direction, which the summary reports rather than assumes.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats
from kanalyze.correlation import Exchange
from kanalyze.engine import DirectionTotals, EngineStats


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return None
    k = max(0, math.ceil(q / 100 * len(sorted_values)) - 1)
    return sorted_values[k]


@dataclass
class Summary:
    by_api: dict[tuple[int | None, str | None, int | None], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    counts: Counter = field(default_factory=Counter)
    status: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # (api, code) -> count
    exchanges: int = 0
    diagnostics: Counter = field(
        default_factory=Counter
    )  # diagnostic code -> count (limits hit, damage)

    def add(self, ex: Exchange, codes: list[int], diagnostics: Iterable[str] = ()) -> None:
        self.exchanges += 1
        for m in (ex.request, ex.response):
            if m is not None:
                for d in m.diagnostics:
                    self.diagnostics[str(d.code)] += 1
        for code in diagnostics:
            self.diagnostics[code] += 1
        key = (ex.api_key, ex.api, ex.api_version)
        self.counts[key] += 1
        self.status[ex.status] += 1
        lat = ex.latency_ns
        if lat is not None:
            self.by_api[key].append(lat / 1e6)
        for c in codes:
            self.errors[(ex.api, c)] += 1

    def to_json(self, engine: EngineStats, capture: CaptureStats) -> dict[str, object]:
        from dissectors.errors import error_name

        apis = []
        for key in sorted(
            self.counts, key=lambda k: (k[0] if k[0] is not None else 1 << 20, k[2] or 0)
        ):
            lats = sorted(self.by_api.get(key, []))
            apis.append(
                {
                    "api_key": key[0],
                    "api": key[1],
                    "api_version": key[2],
                    "count": self.counts[key],
                    "latency_ms": {
                        "p50": percentile(lats, 50),
                        "p99": percentile(lats, 99),
                        "max": lats[-1] if lats else None,
                    },
                }
            )
        all_lat = sorted(v for vs in self.by_api.values() for v in vs)
        errors = [
            {"api": api, "code": code, "name": error_name(code), "count": n}
            for (api, code), n in sorted(
                self.errors.items(), key=lambda kv: (-kv[1], str(kv[0][0]), kv[0][1])
            )
        ]
        doc: dict[str, object] = {
            "files": capture.files,
            "packets": capture.packets,
            "exchanges": self.exchanges,
            "status": dict(sorted(self.status.items())),
            "latency_ms": {
                "p50": percentile(all_lat, 50),
                "p99": percentile(all_lat, 99),
                "max": all_lat[-1] if all_lat else None,
            },
            "apis": apis,
            "errors": errors,
            "connections": {
                "total": engine.connections,
                "kafka": engine.kafka_connections,
                "non_kafka": engine.non_kafka_connections,
                "empty": engine.empty_connections,
            },
            "bytes": {
                "client_to_broker": _bytes(engine.client),
                "broker_to_client": _bytes(engine.broker),
                "non_kafka": engine.non_kafka_bytes,
            },
            "packets_not_tcp": {
                "not_ip": engine.flows.not_ip,
                "not_tcp": engine.flows.not_tcp,
                "ip_fragments": engine.flows.fragments,
                "malformed": engine.flows.malformed,
                "unsupported_linktypes": {
                    str(k): v for k, v in engine.flows.unsupported_linktypes.items()
                },
            },
            "diagnostics": dict(sorted(self.diagnostics.items())),
            "limits": self.limits(engine),
            "peaks": {
                "buffered_bytes": engine.buffered_peak,
                "held_bytes": engine.held_peak,
                "open_connections": engine.open_peak,
            },
            "stream_event_counts": dict(sorted(engine.event_counts.items())),
            "stream_events_dropped": engine.events_dropped,
            "stream_events": [
                {
                    "connection": c,
                    "side": side,
                    "code": code,
                    "stream_offset": off,
                    "frame": pk,
                    "message": msg,
                }
                for c, side, code, off, pk, msg in engine.events
            ],
            "capture_diagnostics": [
                {"file": name, **d.to_json()} for name, d in capture.diagnostics
            ],
        }
        if engine.flows.cut_packets:
            doc["snaplen"] = snaplen_json(engine)
        return doc

    def limits(self, engine: EngineStats) -> dict[str, int]:
        """How often each resource bound was hit, by its option name (docs/limits.md). The
        decoding bounds count what this summary decoded (response bodies, no records)."""
        d = self.diagnostics
        hits = engine.limit_hits
        return {
            "max_frame": engine.event_counts.get("frame_too_large", 0),
            "max_ooo": engine.client.limit_gaps + engine.broker.limit_gaps,
            "max_buffered": hits.get("max_buffered", 0),
            "max_connections": hits.get("max_connections", 0),
            "max_pending": d.get("pending_limit", 0),
            "max_decompressed": d.get("decompression_limit", 0),
            "max_nesting": d.get("nesting_too_deep", 0),
            "max_array_count": d.get("array_too_large", 0),
            "decode_budget": d.get("decode_budget", 0),
            "max_events": engine.events_dropped,
            # orphans and SYN-less connections whose response layouts went unsearched
            "layout_search": hits.get("layout_search", 0),
        }


def _bytes(t: DirectionTotals) -> dict[str, int]:
    return {
        "stream": t.stream,
        "decoded": t.frames,
        "skipped": t.skipped,
        "gaps": t.gaps,
        "gap_count": t.gap_count,
        "retransmitted": t.retransmitted,
        "overlap_conflicts": t.overlap_conflicts,
        "frames": t.pdus,
    }


SNAPLEN_PARTIAL = "bodies and records of frames longer than the captured part; client ids cut short"


def snaplen_json(engine: EngineStats) -> dict[str, object]:
    """What a snaplen-truncated capture (`tcpdump -s N`) lost and which outputs are partial."""
    fl = engine.flows
    return {
        "bytes_per_packet": fl.snaplen,
        "packets_cut": fl.cut_packets,
        "payload_bytes_not_captured": fl.cut_bytes,
        "partial": SNAPLEN_PARTIAL,
    }


def snaplen_notice(engine: EngineStats) -> str | None:
    """The one line that says the capture was truncated, or None."""
    fl = engine.flows
    if not fl.cut_packets:
        return None
    return (
        f"capture truncated to {fl.snaplen} bytes per packet (snaplen): {fl.cut_packets} "
        "packets lost "
        f"{fl.cut_bytes} payload bytes; framing, headers and latencies are exact, partial: "
        f"{SNAPLEN_PARTIAL}"
    )
