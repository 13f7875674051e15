"""Stage 1 of the Spark pipeline: the packets of some work units become *segment rows*
(capture group, normalized connection key, time, file rank, frame number, and the TCP
segment's numbers and payload without link or IP headers: `kanalyze.spark.payload`); non-TCP
packets are counted and dropped. Each unit also yields one *unit row* with its reading
statistics (the `files` table). Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa

from kanalyze.capture import CaptureError, CaptureStats
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.spark.payload import FROM_FIRST, kafka_hint
from kanalyze.spark.payload import conn_key as payload_key
from kanalyze.spark.schemas import BATCH_ROWS, KIND_PACKET, KIND_UNIT, SEGMENT_SCHEMA
from kanalyze.spark.units import Plan, iter_unit


def conn_key(seg) -> bytes:  # noqa: ANN001 - kanalyze.flows.Segment
    """Direction-free key of a 4-tuple: the two endpoints in sorted order."""
    return payload_key(seg)[0]


def _flush(cols: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    batch = pa.RecordBatch.from_pydict(cols, schema=schema)
    for v in cols.values():
        v.clear()
    return batch


def extract(
    plan: Plan,
    unit_indices: Iterable[int],
    ports: frozenset[int] = frozenset(),
    max_frame: int = 256 * 1024 * 1024,
) -> Iterator[pa.RecordBatch]:
    """Stage 1: segment rows (TCP headers' numbers and payload only) and one unit row per unit
    (statistics as JSON in `data`)."""
    cols: dict[str, list] = {f.name: [] for f in SEGMENT_SCHEMA}
    kind, cap, key, ts, order, rank, fno, flg, seqs, acks, cuts, hints, data = (
        cols[f.name] for f in SEGMENT_SCHEMA
    )
    for ui in unit_indices:
        unit = plan.units[ui]
        info = plan.files[unit.rank]
        stats = CaptureStats()
        flows = FlowStats()
        tcp = other = 0
        first = last = None
        top = 0  # the latest time so far in this unit: a packet stamped earlier keeps its place
        error = info.error
        try:
            for pkt in iter_unit(plan, unit, stats):
                if first is None:
                    first = pkt.ts_ns
                last = pkt.ts_ns
                seg = decode_segment(pkt.linktype, pkt.data, flows)
                if seg is None:
                    other += 1
                    continue
                tcp += 1
                k, from_first = payload_key(seg)
                kind.append(KIND_PACKET)
                cap.append(info.capture_id)
                key.append(k)
                ts.append(pkt.ts_ns)
                if pkt.ts_ns > top:
                    top = pkt.ts_ns
                order.append(top)
                rank.append(unit.rank)
                fno.append(pkt.file_no)
                flg.append(seg.flags | FROM_FIRST if from_first else seg.flags)
                seqs.append(seg.seq)
                acks.append(seg.ack)
                cuts.append(seg.cut)
                hints.append(kafka_hint(seg, ports, max_frame))
                data.append(bytes(seg.payload))
                if len(kind) >= BATCH_ROWS:
                    yield _flush(cols, SEGMENT_SCHEMA)
        except CaptureError as e:
            error = str(e)
        stat = {
            "rank": unit.rank,
            "unit": unit.index,
            "whole": unit.whole,
            "start": unit.start,
            "end": unit.end,
            "packets": tcp + other,
            "tcp_packets": tcp,
            "other_packets": other,
            "fragments": flows.fragments,
            "not_ip": flows.not_ip,
            "first_ns": first,
            "last_ns": last,
            "error": error,
            "diagnostics": [f"offset {d.offset}: {d.message}" for _n, d in stats.diagnostics],
        }
        kind.append(KIND_UNIT)
        cap.append(info.capture_id)
        key.append(b"")
        ts.append(first or 0)
        order.append(first or 0)
        rank.append(unit.rank)
        fno.append(unit.index)
        flg.append(0)
        seqs.append(0)
        acks.append(0)
        cuts.append(0)
        hints.append(False)
        data.append(json.dumps(stat).encode())
    if kind:
        yield _flush(cols, SEGMENT_SCHEMA)
