"""Captures taken without a port filter (a real client's Kafka next to an SSH session that
spans it, an HTTP exchange and a TLS handshake: `tests/functional/other_flows.py`) take the
range path, not the shuffle fallback: the stitch keeps the one view that saw each such flow
whole, and every table equals the shuffle path's (its exchanges `kanalyze export`'s). With
--port naming the other flows' ports the shuffle path decodes them and writes their
connections rows (not Kafka, their bytes, the engine's roles): the range path rebuilds them.
What one process would judge differently is still refused, and only that capture group takes
the shuffle path, with the same tables.

Two captures sets, each built once on each path (module fixtures): ~50 s in all here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.functional import other_flows
from tests.spark.support import frame_offsets, offline_keys, rotate, spark_keys

pytest.importorskip("pyarrow", reason="the Spark extra is not installed")
from kanalyze.parallel.range_export import RANGE_BYTES_ENV  # noqa: E402
from kanalyze.parallel.range_plan import RANK_BITS, conn_key  # noqa: E402
from kanalyze.parallel.ranges import Unstitchable  # noqa: E402
from kanalyze.spark import range_stage  # noqa: E402
from kanalyze.spark.pipeline import build  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # ~50 s: four builds (module fixtures)
ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"
OTHER_PORTS = (other_flows.SSH[3], other_flows.HTTP[3], other_flows.TLS[3])
PORTS = (19097, *OTHER_PORTS, other_flows.LOW_HTTP[3])  # kp_codecs' broker and the others
RANGE_BYTES = "4096"  # the SSH session spans ~30 ranges
# what only tells how the work was cut (one unit per range, or per file)
HOW = {"units", "split_verified"}
# capture group -> (source capture, other_flows.write's options, the stitch's refusal or None)
GROUPS = {
    "plain": ("kp_codecs.pcap", {}, None),
    # an encrypted-looking SSH payload; a Kafka connection on the HTTP 4-tuple before it
    "random": ("kp_v25.pcap", {"seed": 3, "reuse": "before"}, None),
    "mid": ("kp_codecs.pcap", {"mid_stream": True}, "found mid-stream after the first range"),
    "reuse": ("kp_codecs.pcap", {"reuse": "after"}, "a later connection on its 4-tuple"),
}


def _norm(v: object) -> object:
    """Floats to 12 significant digits: Spark's averages add in task order."""
    if isinstance(v, float):
        return float(f"{v:.12g}") if math.isfinite(v) else v
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items() if k not in HOW}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def _tables(spark, inputs: list[str], ranges: bool, ports: tuple[int, ...]) -> dict:
    """{"balance", "stitched": what each capture group's stitch did, "tables": table name ->
    its rows as sorted JSON}, nothing written."""
    stitched: list[dict] = []
    real = range_stage.stitch

    def spy(results, opts, **kw):  # noqa: ANN001, ANN003, ANN202 - the driver's stitch
        got = {"ranks": {r.base >> RANK_BITS for r in results}, "results": results}
        stitched.append(got)
        try:
            got["st"] = real(results, opts, **kw)
        except Unstitchable as e:
            got["refused"] = str(e)
            raise
        return got["st"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RANGE_BYTES_ENV, RANGE_BYTES)
        mp.setattr(range_stage, "stitch", spy)
        t = build(spark, inputs, ranges=ranges, ports=ports)
    try:
        # (the aggregates are functions of exchanges and partitions: not collected here)
        frames = {"exchanges": t.exchanges, "partitions": t.partitions, "files": t.files,
                  "connections": t.connections, "topics": t.topics}
        out = {name: sorted(json.dumps(_norm(r.asDict(recursive=True)), sort_keys=True,
                                       default=str) for r in df.collect())
               for name, df in frames.items()}
    finally:
        t.unpersist()
    paths = {f.rank: f.path for f in t.plan.files}
    for got in stitched:
        got["paths"] = {paths[r] for r in got.pop("ranks")}
    return {"balance": t.balance or {}, "stitched": stitched, "tables": out, "notes": t.notes}


def _both(spark, inputs: list[str], ports: tuple[int, ...] = ()) -> dict:
    return {"inputs": inputs, "ranged": _tables(spark, inputs, True, ports),
            "shuffled": _tables(spark, inputs, False, ports)}


@pytest.fixture(scope="module")
def no_port(spark, tmp_path_factory) -> dict:
    """Four capture groups (a directory each) in one run: two the stitch takes, two it
    refuses."""
    base = tmp_path_factory.mktemp("other-flows")
    inputs = []
    for name, (src, kw, _why) in GROUPS.items():
        (base / name).mkdir()
        other_flows.write(CAPTURES / src, base / name / f"{name}.pcap", **kw)
        inputs.append(str(base / name))
    return _both(spark, inputs)


@pytest.fixture(scope="module")
def ports(spark, tmp_path_factory) -> dict:
    """One capture rotated into three files (`tcpdump -C` style), --port naming every flow's
    server port: a health check on the broker's port and an HTTP exchange from a port below
    its server's besides the three flows."""
    base = tmp_path_factory.mktemp("other-ports")
    path = other_flows.write(CAPTURES / "kp_codecs.pcap", base / "probe.pcap", probe=19097)
    pieces = rotate(path, base / "rotated", 150)
    assert len(pieces) == 3
    return {**_both(spark, [str(base / "rotated")], PORTS), "whole": path, "pieces": pieces}


def _rows(run: dict, table: str, path: str = "ranged") -> list[dict]:
    return [json.loads(r) for r in run[path]["tables"][table]]


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_the_stitch_takes_the_groups_one_process_would_count_alike(no_port):
    ranged = no_port["ranged"]
    by_group = {Path(p).parent.name: s for s in ranged["stitched"] for p in s["paths"]}
    assert sorted(by_group) == sorted(GROUPS)
    for name, (_src, _kw, why) in GROUPS.items():
        got = by_group[name].get("refused")
        assert (got is None) if why is None else (why in (got or "")), (name, got)
    b = ranged["balance"]
    assert b["refused_groups"] == 2 and b["refused_files"] == 2  # mid, reuse: shuffled
    assert b["ranges"] >= 4 * 20 and b["refused_ranges"] >= 2 * 20
    # the SSH session is cut across many ranges: one view kept, the later ones dropped
    ssh = conn_key(other_flows.SSH)
    for name in ("plain", "random"):
        results, st = by_group[name]["results"], by_group[name]["st"]
        views = [(r, lid) for r, res in enumerate(results) for lid, e in res.conns.items()
                 if e.key == ssh and e.opened <= res.end_pkt]
        kept = [v for v in views if v[1] in st.own[v[0]]]
        assert len(views) > 20 and kept == [views[0]] and views[0][0] == 0, name
        assert results[0].conns[views[0][1]].judged is not None  # judged not Kafka
    assert "refused_groups" not in no_port["shuffled"]["balance"]  # the path forced
    # the user is told which group left the range path and why (the CLI prints these notes)
    notes = {Path(n.split(": ", 1)[0]).parent.name: n for n in ranged["notes"]}
    refused = {name: why for name, (_s, _k, why) in GROUPS.items() if why is not None}
    assert sorted(notes) == sorted(refused)
    for name, why in refused.items():
        assert why in notes[name] and "shuffle path" in notes[name], notes[name]
    assert no_port["shuffled"]["notes"] == []


def test_every_group_on_both_paths_has_export_s_exchanges(no_port):
    for path in ("ranged", "shuffled"):
        rows = _rows(no_port, "exchanges", path)
        for group in no_port["inputs"]:
            mine = [r for r in rows if r["capture_id"] == group]
            cap = next(Path(group).glob("*.pcap"))
            assert mine and spark_keys(mine) == offline_keys(cap), (path, group)


@pytest.mark.parametrize("run", ["no_port", "ports"])
def test_every_table_equals_the_shuffle_paths(request, run):
    got = request.getfixturevalue(run)
    ranged, shuffled = got["ranged"]["tables"], got["shuffled"]["tables"]
    assert ranged.keys() == shuffled.keys()
    for name in ranged:
        assert ranged[name] == shuffled[name], name
    assert len(ranged["connections"]) >= 8 and len(ranged["exchanges"]) >= 40


def test_without_a_port_the_other_flows_have_no_connections_rows(no_port):
    """The shuffle path's flow census ships only flows with a plausible Kafka request: the
    others have no row on either path; a 4-tuple that carries Kafka before or after the
    HTTP exchange has one per incarnation (the HTTP one not Kafka, without exchanges)."""
    conns = _rows(no_port, "connections")
    others = [c for c in conns if _port(c["broker"]) in OTHER_PORTS]
    got = sorted((Path(c["capture_id"]).name, c["broker"], c["incarnation"], c["exchanges"])
                 for c in others)
    assert got == [("random", "10.0.0.9:80", 1, 1), ("random", "10.0.0.9:80", 2, 0),
                   ("reuse", "10.0.0.9:80", 1, 0), ("reuse", "10.0.0.9:80", 2, 1)]
    http = next(c for c in others if Path(c["capture_id"]).name == "random"
                and c["incarnation"] == 1)  # the 4-tuple's numbers: its Kafka and HTTP bytes
    assert http["kafka"] and http["incarnations"] == 2 and http["non_kafka_bytes"] > 0


def test_with_ports_the_other_flows_rows_are_rebuilt(ports):
    """On the range path alone (nothing shuffled) each flow has its row as the engine that
    saw it whole counts it: not Kafka, no stream bytes, its bytes as not Kafka, the roles the
    engine gave it (a SYN's sender is the client, whichever port is lower)."""
    b = ports["ranged"]["balance"]
    assert b["ranges"] >= 20 and b["refused_files"] == 0 and b["bytes_shuffled_est"] == 0
    assert [s.get("refused") for s in ports["ranged"]["stitched"]] == [None]
    conns = {(c["client"], c["broker"]): c for c in _rows(ports, "connections")}
    ssh = conns[("10.0.0.5:50022", "10.0.0.9:22")]
    assert ssh["kafka"] is False and ssh["client_stream_bytes"] == 0 and not ssh["exchanges"]
    assert ssh["non_kafka_bytes"] > 80 * 1200 and ssh["packets"] > 160
    for flow in (("10.0.0.5:50080", "10.0.0.9:80"), ("10.0.0.5:50443", "10.0.0.9:443"),
                 ("10.0.0.5:1080", "10.0.0.9:8080")):
        assert conns[flow]["kafka"] is False and conns[flow]["non_kafka_bytes"] > 0, flow
    assert ssh["files_spanned"] == 3 and ssh["fin_seen"]  # its views in every file dropped
    probe = conns[("10.0.0.5:40000", "10.0.0.9:19097")]  # connected and closed, no payload
    assert probe["packets"] == 6 and probe["exchanges"] == 0 and probe["fin_seen"]
    assert sum(1 for c in conns.values() if c["kafka"]) >= 3
    offsets = frame_offsets(ports["pieces"])  # frames of the pieces -> of the whole capture
    rows = _rows(ports, "exchanges")
    assert spark_keys(rows, offsets) == offline_keys(ports["whole"])
