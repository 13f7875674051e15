"""Issue 20: one decompression budget across nested legacy wrappers, inner messages counted, and
a per-frame decode budget beyond which the rest stays undecoded with a diagnostic."""

from __future__ import annotations

import gzip

from dissectors.context import NODE_COST, RECORD_COST, DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.jsonify import node_to_json
from dissectors.records import decode_records
from tests.support import adversarial as A


def _codes(node) -> list[str]:
    return [str(d.code) for n in node.walk() for d in n.diagnostics]


def test_nested_wrappers_share_one_decompression_budget() -> None:
    leaf = b"".join(A.legacy_message(i) for i in range(2000))  # 52 KB
    level = leaf
    for _ in range(4):
        level = A.legacy_message(0, 1, gzip.compress(level, 9, mtime=0)) * 16
    top = A.legacy_message(0, 1, gzip.compress(level, 9, mtime=0))
    ctx = DecodeContext(strict=True, limits=Limits(max_nesting_depth=8))
    node = decode_records(top, 0, len(top), ctx)
    cap = 250 * (len(top) - 26)  # the top wrapper's ratio cap, for all the levels together
    assert sum(len(b) for b in ctx.buffers) <= cap
    assert "decompression_limit" in _codes(node)


def test_inner_messages_are_counted() -> None:
    inner = A.legacy_message(0) * 5000
    top = A.legacy_message(4999, 1, gzip.compress(inner, 9, mtime=0))
    ctx = DecodeContext(strict=True, limits=Limits(max_records_per_batch=1000))
    node = decode_records(top, 0, len(top), ctx)
    (batch,) = node.value["batches"]
    assert len(batch["records"]) == 1000
    assert "array_too_large" in [d["code"] for d in batch["diagnostics"]]


def test_frame_budget_cuts_records_with_a_diagnostic() -> None:
    records = A.legacy_message(0) * 3 + A.batch(50)
    body = A.produce_v2(records)[
        4 + 2 + 2 + 4 + 2 + 3 :
    ]  # the body after a header with client id "amp"
    # 20 records, and the 9 schema nodes around them (3 body fields, a topic of 2, a partition
    # of 2, their array elements)
    lim = Limits(decode_budget_ratio=0, decode_budget_base=RECORD_COST * 20 + NODE_COST * 9)
    node = decode_body(0, 2, True, body, 0, len(body), DecodeContext(strict=True, limits=lim))
    j = node_to_json(node, DecodeContext())
    batches = j["topic_data"][0]["partition_data"][0]["records"]["batches"]
    assert sum(len(b["records"]) for b in batches) == 20
    assert batches[-1]["diagnostics"][0]["code"] == "decode_budget"
    whole = decode_body(0, 2, True, body, 0, len(body), DecodeContext(strict=True))
    assert "decode_budget" not in _codes(whole)


def test_frame_budget_keeps_the_rest_of_the_frame_raw() -> None:
    frame = A.metadata_tags(topics=50, tags=20)  # a pcap of one frame in one segment
    body = frame[frame.index(b"amp") + 3 + 1 :]  # after client id "amp" and the header's tags
    n = len(body)
    lim = Limits(decode_budget_ratio=0, decode_budget_base=1024 * 100)
    node = decode_body(3, 12, True, body, 0, n, DecodeContext(strict=True, limits=lim))
    rest = node.child("_undecoded")
    assert rest is not None and rest.offset + rest.length == n
    assert "decode_budget" in _codes(node)
    assert len(node.child("Topics").children) < 50
