"""Stage 1 of the Spark pipeline: the packets of some work units become *segment rows*
(capture group, normalized connection key, time, file rank, frame number, raw packet bytes);
non-TCP packets are counted and dropped. Each unit also yields one *unit row* with its reading
statistics (the `files` table). Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa

from kanalyze.capture import CaptureError, CaptureStats
from kanalyze.flows import FlowStats, decode_segment
from kanalyze.spark.schemas import BATCH_ROWS, KIND_PACKET, KIND_UNIT, SEGMENT_SCHEMA
from kanalyze.spark.units import Plan, iter_unit


def conn_key(seg) -> bytes:  # noqa: ANN001 - kanalyze.flows.Segment
    """Direction-free key of a 4-tuple: the two endpoints in sorted order."""
    a = seg.src + seg.sport.to_bytes(2, "big")
    b = seg.dst + seg.dport.to_bytes(2, "big")
    return a + b if a <= b else b + a


def _flush(cols: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    batch = pa.RecordBatch.from_pydict(cols, schema=schema)
    for v in cols.values():
        v.clear()
    return batch


def extract(plan: Plan, unit_indices: Iterable[int]) -> Iterator[pa.RecordBatch]:
    """Stage 1: segment rows and one unit row per unit (statistics as JSON in `data`)."""
    cols: dict[str, list] = {f.name: [] for f in SEGMENT_SCHEMA}
    kind, cap, key, ts, order, rank, fno, lt, flg, data = (cols[f.name] for f in SEGMENT_SCHEMA)
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
                kind.append(KIND_PACKET)
                cap.append(info.capture_id)
                key.append(conn_key(seg))
                ts.append(pkt.ts_ns)
                if pkt.ts_ns > top:
                    top = pkt.ts_ns
                order.append(top)
                rank.append(unit.rank)
                fno.append(pkt.file_no)
                lt.append(pkt.linktype)
                flg.append(seg.flags)
                data.append(pkt.data)
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
        lt.append(info.linktype)
        flg.append(0)
        data.append(json.dumps(stat).encode())
    if kind:
        yield _flush(cols, SEGMENT_SCHEMA)
