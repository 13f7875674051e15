"""Issue 20: the decoded schema tree is charged to the frame's decode budget on every decoding
path (the Node walker behind the TUI, report and export's fallback; the fast JSON path behind
export), so a frame of many tiny fields is cut like one of many records or unknown tags; and
`summary` counts the frames cut."""

from __future__ import annotations

import json

from dissectors.context import NODE_COST, DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.fastjson import FALLBACK, decode_body_json
from dissectors.jsonify import JsonWalk, node_to_json
from kanalyze.bodies import BodyDecoder
from kanalyze.cli import main
from kanalyze.session import Session
from tests.support import adversarial as A

N = 5000
SMALL = Limits(decode_budget_ratio=0, decode_budget_base=NODE_COST * 2000)


def _codes(node) -> list[str]:  # noqa: ANN001
    return [str(d.code) for n in node.walk() for d in n.diagnostics]


def test_the_node_walker_charges_schema_nodes() -> None:
    """5,000 topics cost ~10,000 nodes: over a 2,000-node budget the rest stays raw (before,
    schema fields were not charged and the whole array was decoded)."""
    body = A.metadata_names(N)
    node = decode_body(3, 1, True, body, 0, len(body), DecodeContext(strict=True, limits=SMALL))
    assert "decode_budget" in _codes(node)
    rest = node.child("_undecoded")
    assert rest is not None and rest.offset + rest.length == len(body)
    whole = decode_body(3, 1, True, body, 0, len(body), DecodeContext(strict=True))
    assert "decode_budget" not in _codes(whole)
    assert len(whole.child("Topics").children) == N


def test_the_fast_json_path_hands_a_spent_frame_to_the_walker() -> None:
    body = A.metadata_names(N)
    ctx = DecodeContext(strict=True, limits=SMALL)
    assert decode_body_json(3, 1, True, body, 0, len(body), ctx, JsonWalk()) is FALLBACK
    assert ctx.budget is None  # given back for the next frame
    fast = decode_body_json(3, 1, True, body, 0, len(body), DecodeContext(strict=True), JsonWalk())
    whole = decode_body(3, 1, True, body, 0, len(body), DecodeContext(strict=True))
    assert fast == node_to_json(whole, DecodeContext())


def test_every_path_cuts_the_frame_at_the_same_place(tmp_path) -> None:  # noqa: ANN001
    """BodyDecoder (export, report, TUI): its JSON and its tree say the same, cut by the budget."""
    frame = A.capture([(True, A.P.request_frame(3, 1, 1, "amp", A.metadata_names(N)))])
    cap = tmp_path / "names.pcap"
    cap.write_bytes(frame)
    (ex,) = list(Session([str(cap)]).exchanges())
    dec = BodyDecoder(DecodeContext(strict=True, limits=SMALL))
    walk = JsonWalk()
    as_json = dec.json(ex, ex.request, True, walk)
    node, ctx = dec.node(ex, ex.request, True)
    assert node is not None
    assert as_json == node_to_json(node, ctx)
    assert "decode_budget" in [str(d["code"]) for d in walk.diagnostics]
    assert "_undecoded" in as_json and len(as_json.get("topics", ())) < N


def test_summary_counts_frames_cut_by_the_budget(tmp_path, capsys) -> None:  # noqa: ANN001
    """A Metadata response of 150,000 unknown tagged fields (450 KB) passes the default budget
    (128 x frame + 64 MiB at 1 KiB a tag): `summary --json` counts it in limits.decode_budget."""
    cap = tmp_path / "tags.pcap"
    cap.write_bytes(A.metadata_response_tags())
    assert main(["summary", "--json", str(cap)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["limits"]["decode_budget"] == 1
    assert doc["peaks"]["held_bytes"] >= doc["peaks"]["buffered_bytes"]
    assert main(["summary", str(cap)]) == 0
    assert "decode_budget 1" in capsys.readouterr().out
