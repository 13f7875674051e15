"""Helpers for the Spark tests: offline reference keys, rotated and converted captures."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kanalyze.capture import read_capture
from kanalyze.export import ExchangeEncoder
from kanalyze.session import Session

LONG_CAPTURE = Path(__file__).resolve().parents[2] / "captures" / "lib_group_rebalance.pcap"


def offline_keys(path: str | Path) -> Counter:
    """Stable exchange keys from the offline path (`kanalyze export`) on one unsplit capture;
    frame numbers are that file's."""
    enc = ExchangeEncoder(decode=False)
    out: Counter = Counter()
    for ex in Session([str(path)]).exchanges():
        d = enc.encode(ex)
        rq, rs = d["request"], d["response"]
        out[
            (
                d["connection"]["client"], d["connection"]["broker"], d["api_key"],
                d["api_version"], d["correlation_id"], d["status"], "inferred" in d,
                rq["frame"] if rq else None, rs["frame"] if rs else None,
            )
        ] += 1  # fmt: skip
    return out


def frame_offsets(files: list[Path]) -> dict[str, int]:
    """For pieces of one capture (in order): frames before each piece."""
    out, total = {}, 0
    for f in files:
        out[str(f)] = total
        total += sum(1 for _ in read_capture(str(f)))
    return out


def spark_keys(rows: list[dict], offsets: dict[str, int] | None = None) -> Counter:
    """The same keys from `exchanges` rows; with `offsets`, piece frames become unsplit frames."""

    def frame(file: str | None, no: int | None) -> int | None:
        if no is None:
            return None
        return no + (offsets[file] if offsets is not None else 0)

    return Counter(
        (
            r["client"], r["broker"], r["api_key"], r["api_version"], r["correlation_id"],
            r["status"], r["inferred"], frame(r["request_file"], r["request_frame"]),
            frame(r["response_file"], r["response_frame"]),
        )
        for r in rows
    )  # fmt: skip


def _editcap() -> str:
    path = shutil.which("editcap")
    if path is None:
        pytest.skip("editcap (Debian package wireshark-common / tshark) is not installed")
    return path


def rotate(src: Path, out_dir: Path, packets_per_file: int, pcap: bool = False) -> list[Path]:
    """tcpdump -C style rotation with editcap -c: pieces named so their names do not sort in
    capture order (the pipeline must order files by their first packet's time); pcapng
    (editcap's default) unless `pcap` (tcpdump's format)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fmt = ["-F", "pcap"] if pcap else []
    subprocess.run(
        [_editcap(), *fmt, "-c", str(packets_per_file), str(src), str(out_dir / "piece.pcap")],
        check=True,
    )
    pieces = sorted(out_dir.glob("piece*.pcap"))
    renamed = []
    for i, p in enumerate(pieces):  # reverse the lexical order of the names
        q = p.with_name(f"z{len(pieces) - i:03d}-{p.name}")
        p.rename(q)
        renamed.append(q)
    return renamed


def to_pcapng(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([_editcap(), "-F", "pcapng", str(src), str(dst)], check=True)
    return dst


def local_pipeline(paths: list[str], split_bytes: int = 1 << 30) -> list[dict]:
    """The Spark pipeline's stages run in this process (no JVM): plan, stage 1 over every unit,
    the shuffle's sort, stage 2; returns stage 2's rows (exchanges, connections, ...)."""
    import pyarrow as pa

    from kanalyze.spark.decode import decode
    from kanalyze.spark.extract import extract
    from kanalyze.spark.pipeline import SHUFFLE_ORDER
    from kanalyze.spark.units import plan_local

    plan = plan_local(paths, split_bytes=split_bytes)
    seg = pa.Table.from_batches(list(extract(plan, range(len(plan.units)))))
    rows = seg.to_pylist()
    kafka = {(r["capture_id"], r["conn_key"]) for r in rows if r["hint"]}  # as Spark's semi-join
    keep = [r["kind"] != 0 or (r["capture_id"], r["conn_key"]) in kafka for r in rows]
    seg = seg.filter(pa.array(keep)).sort_by([(c, "ascending") for c in SHUFFLE_ORDER])
    files = [f.path for f in plan.files]
    out = decode(seg.to_batches(), files, file_ids=[f.file_id for f in plan.files])
    return [r for b in out for r in b.to_pylist()]


def local_ranges(paths: list[str]) -> tuple[dict, str]:
    """The range path's stage 1 and stitch run in this process (no JVM) over one capture
    group: ({"exchanges": rows with their stitched conn_id, "connections": the connections
    rows' data, "units": rank -> [packets, first ns, last ns], "merged": packets the runs
    merged across file edges}, "ok"), or ({}, why the path refuses the group)."""
    import json

    from kanalyze.engine import EngineOptions
    from kanalyze.parallel.range_plan import chain_ordered
    from kanalyze.parallel.ranges import Unstitchable
    from kanalyze.spark.range_rows import range_rows, unpack_edge
    from kanalyze.spark.range_stage import _stitch_group, plan_groups
    from kanalyze.spark.schemas import DECODED_SCHEMA
    from kanalyze.spark.units import plan_local

    plan = plan_local(paths)
    groups, left = plan_groups(plan.files, 2)
    if left or len(groups) != 1:
        return {}, "the plan left the files to the shuffle path"
    files = sorted(plan.files, key=lambda f: f.rank)
    opts = EngineOptions()
    rows, edges = [], []
    for t, rng in enumerate(groups[0]):
        for b in range_rows(rng, opts, [f.path for f in files],
                            files[rng.layout.rank].capture_id, key=t):
            for r in b.to_pylist():
                (edges.append(unpack_edge(r["extra"])) if r["kind"] == "edge" else rows.append(r))
    if not chain_ordered(groups[0], [e.result for e in edges]):
        return {}, "the runs do not read the files in one process's order"
    try:
        g = _stitch_group(edges, 0, files, opts, None, False)
    except Unstitchable as e:
        return {}, str(e)
    keep = {(r, i): (cid, fix) for r, i, cid, fix in g.keep}
    if any(fix for _cid, fix in keep.values()):
        return {}, "topic names taught across ranges (filled in by Spark)"
    cols = [c.name for c in DECODED_SCHEMA]
    out = [{**{c: row[c] for c in cols}, "conn_id": keep[row["rng"], row["idx"]][0]}
           for row in rows if (row["rng"], row["idx"]) in keep]
    units: dict[int, list] = {}
    for e in edges:
        u = json.loads(e.unit)
        got = units.setdefault(u["rank"], [0, None, None])
        got[0] += u["packets"]
        if u["first_ns"] is not None:
            got[1] = u["first_ns"] if got[1] is None else min(got[1], u["first_ns"])
            got[2] = u["last_ns"] if got[2] is None else max(got[2], u["last_ns"])
    return {"exchanges": out, "connections": [json.loads(c["extra"]) for c in g.conns],
            "units": units, "merged": sum(e.result.merged for e in edges)}, "ok"
