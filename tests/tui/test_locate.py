"""A finding's field (kanalyze/tui/locate.py): every finding of the anomaly captures with a
frame is located in its exchange at a field whose value is the one the finding reports."""

from __future__ import annotations

from dissectors.errors import error_name
from dissectors.jsonify import json_key
from kanalyze.session import Session
from kanalyze.tui.analysis_source import analyze_exchanges
from kanalyze.tui.locate import FIELDS, Target, jump_frame, locate, locate_any, target_of
from kanalyze.tui.store import ExchangeStore
from tests.tui.conftest import CAPTURES

# finding detail -> the field that must hold the same value
SAME_VALUE = {
    "hw_regression": ("high_watermark", "high_watermark"),
    "commit_ahead_of_consumption": ("committed", "committed_offset"),
    "epoch_end_offset": ("end_offset", "end_offset"),
}


def located(path: str) -> list[tuple[dict, object]]:
    """(finding, the located node) for each finding with a frame."""
    store = ExchangeStore()
    store.add(Session([path]).exchanges())
    report = analyze_exchanges((ex for _i, ex in store.iter_exchanges()), {})
    out = []
    for f in report["findings"]:
        if not f["frames"]:
            continue
        i = store.find_frame(jump_frame(f))
        ex = store.exchange(i)
        t = target_of(f)
        bodies = [store.bodies.node(ex, msg, is_req)[0] for msg, is_req in ex.messages()]
        found = locate_any([b for b in bodies if b is not None], t, store.topic_names.mapping)
        out.append((f, None if found is None else found[1][-1]))
    store.close()
    return out


def test_findings_land_on_their_field():
    checked = set()
    for name in ("anomalies.pcap", "isr.pcap"):
        for f, node in located(str(CAPTURES / "replication" / name)):
            kind = f["kind"]
            if kind not in FIELDS:
                continue
            assert node is not None, f
            key = json_key(node.name)[0]
            assert key in FIELDS[kind] or node.kind == "struct", (kind, key)
            if kind in SAME_VALUE:
                detail, field = SAME_VALUE[kind]
                assert key == field and node.value == f[detail], (f, node.value)
                checked.add(kind)
    assert checked == set(SAME_VALUE)


def test_produce_error_lands_on_the_partitions_error_code():
    hits = [
        (f, n) for f, n in located(str(CAPTURES / "kp_legacy.pcap")) if f["kind"] == "produce_error"
    ]
    assert hits
    for f, node in hits:
        assert json_key(node.name)[0] == "error_code" and error_name(node.value) == f["error"]


def test_scope_without_the_field_selects_the_scope_and_nothing_outside_it():
    from dissectors.node import ARRAY, PRIM, STRUCT, Node

    part = Node("0", STRUCT, 10, 8, children=[Node("PartitionIndex", PRIM, 10, 4, 3)])
    topic = Node(
        "0",
        STRUCT,
        2,
        20,
        children=[Node("Name", PRIM, 2, 6, "t"), Node("Partitions", ARRAY, 8, 12, children=[part])],
    )
    body = Node("body", STRUCT, 0, 30, children=[Node("Topics", ARRAY, 0, 30, children=[topic])])
    path = locate(body, Target(("high_watermark",), "t", None, 3))
    assert path is not None and path[-1] is part
    assert locate(body, Target(("high_watermark",), "other", None, 3)) is None
    assert locate(body, Target(("high_watermark",), "t", None, 4)) == [
        body,
        body.children[0],
        topic,
    ]
