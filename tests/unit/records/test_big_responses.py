"""Big legitimate responses decode whole (docs/limits.md, decode budget).

A cluster of tens of thousands of partitions answers Metadata, DescribeConfigs, ListOffsets,
OffsetFetch and Fetch with bodies of a few MB, each over what the first decode budget
(16 x frame + 64 MiB) allowed: that cut Metadata responses over ~1.2 MB. Each body here is
encoded by kio (records by kafka-python), decoded by ours on the tree and the fast JSON paths,
and compared field by field with kio's own reading (records with kafka-python's).
"""

from __future__ import annotations

import pytest

import dissectors.embedded  # noqa: F401 -- the body hooks export has (Metadata's topic names)
import dissectors.records  # noqa: F401 -- registers the records decoder (Fetch)
from dissectors.context import DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.fastjson import FALLBACK, decode_body_json
from dissectors.jsonify import JsonWalk, node_to_json
from dissectors.registry import BODY_HOOKS
from tests.support import big_responses as B

pytestmark = pytest.mark.slow  # ~20 s alone, ~35 s on a loaded machine: MBs through kio
MB = 1024 * 1024
# sizes chosen over the old budget's cut (asserted below), a few MB each
CASES = {
    "metadata": (3, 12, lambda: B.metadata_v12(partitions=50_000)),
    "describe_configs": (32, 4, lambda: B.describe_configs_v4(topics=300)),
    "list_offsets": (2, 7, lambda: B.list_offsets_v7(partitions=90_000)),
    "offset_fetch": (9, 8, lambda: B.offset_fetch_v8(partitions=80_000)),
    "fetch": (1, 12, lambda: B.fetch_v12(partitions=20_000, records=5)),
}


def _ours(doc: object) -> object:
    """Our JSON with squashed keys, the derived `*_code_name` keys dropped and record batches
    reduced to what kafka-python reads back (offset, timestamp, key, value)."""
    if isinstance(doc, dict):
        if "batches" in doc:
            return [(r["offset"], r["timestamp_ms"], r["key"], r["value"])
                    for b in doc["batches"] for r in b["records"]]
        return {B.squash(k): _ours(v) for k, v in doc.items() if not k.endswith("_code_name")}
    if isinstance(doc, list):
        return [_ours(x) for x in doc]
    return doc


def _theirs(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _records(v) if k == "records" else _theirs(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_theirs(x) for x in doc]
    return doc


def _records(data: bytes | None) -> object:
    if data is None:
        return None
    out, recs = [], B.kafka_records().MemoryRecords(data)
    while (batch := recs.next_batch()) is not None:
        out.extend((r.offset, r.timestamp, r.key.decode(), r.value.decode()) for r in batch)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_big_response_decodes_whole_and_as_kio_reads_it(name: str) -> None:
    key, version, build = CASES[name]
    body = build()
    ctx = DecodeContext(strict=True)
    ctx.start_budget(len(body))
    start = ctx.budget
    assert start is not None
    node = decode_body(key, version, False, body, 0, len(body), ctx)
    spent = start - ctx.budget
    # the first budget cut this body; the default one does not, and stays well under its max
    assert spent > 16 * len(body) + 64 * MB
    assert spent < Limits().decode_budget_max / 2
    assert [d for n in node.walk() for d in n.diagnostics] == []
    whole = node_to_json(node, DecodeContext())
    fast = decode_body_json(key, version, False, body, 0, len(body), DecodeContext(), JsonWalk())
    if (key, False) in BODY_HOOKS:  # Metadata teaches topic names: export takes the walker
        assert fast is FALLBACK
    else:  # export's fast path: not handed to the walker (budget), the same JSON
        assert fast == whole
    assert _ours(whole) == _theirs(B.kio_view(key, version, body))


def test_the_max_cuts_a_big_frame_whatever_the_ratio() -> None:
    """The absolute bound: a frame whose ratio allows more still stops at decode_budget_max."""
    body = B.metadata_v12(partitions=2_000)
    lim = Limits(decode_budget_ratio=10_000, decode_budget_max=2 * MB)
    node = decode_body(3, 12, False, body, 0, len(body), DecodeContext(strict=True, limits=lim))
    assert "decode_budget" in [str(d.code) for n in node.walk() for d in n.diagnostics]
    rest = node.child("_undecoded")
    assert rest is not None and rest.offset + rest.length == len(body)
    ctx = DecodeContext(limits=Limits(decode_budget_max=2 * MB))
    ctx.start_budget(len(body))
    assert ctx.budget == 2 * MB
