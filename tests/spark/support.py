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
