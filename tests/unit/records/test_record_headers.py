"""`DecodeContext.record_headers` (`records_json.headers_json`): record batches read for their
headers only, for consumers of facts (the Spark rows). Whenever it answers, each batch holds
the full decode's header fields that facts read; every exchange of the committed captures has
the same facts either way; a frame whose records the full decode would cut by its budget is
declined (the reference path decodes it in full)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from records_inputs import MAKER

from dissectors.context import RECORD_COST, DecodeContext, Limits
from dissectors.records_json import FACT_FIELDS, NotClean, headers_json, records_json
from kanalyze.bodies import Bodies, BodyDecoder
from kanalyze.session import Session

CAPTURES = Path(__file__).resolve().parents[3] / "captures"


def _inputs() -> list[bytes]:
    out = [MAKER.builder_batch(n, codec) for n in (1, 3, 40) for codec in (0, 1, 2, 3, 4)]
    out.append(
        MAKER.builder_batch(5, 0, base_offset=1000) + MAKER.builder_batch(2, 4, base_offset=1005)
    )
    return out


def test_headers_are_the_full_decode_s_header_fields() -> None:
    checked = 0
    for buf in _inputs():
        for cut in (len(buf), len(buf) - 7, 70):  # whole, and cut as a trimmed Fetch is
            full = headers = None
            with contextlib.suppress(NotClean):
                full = records_json(buf, memoryview(buf), 0, cut, DecodeContext())
            with contextlib.suppress(NotClean):
                headers = headers_json(buf, memoryview(buf), 0, cut, DecodeContext())
            if full is None:  # the reference path decides: the headers path must not answer
                assert headers is None
                continue
            assert headers is not None
            want = [{k: b.get(k) for k in FACT_FIELDS} for b in full["batches"]]
            got = [{k: b.get(k) for k in FACT_FIELDS} for b in headers["batches"]]
            assert got == want
            assert "records" not in (headers["batches"] or [{}])[0]
            checked += 1
    assert checked > 10


def test_a_frame_the_budget_would_cut_is_declined() -> None:
    buf = MAKER.builder_batch(40, 0)
    ctx = DecodeContext()
    ctx.budget = 10 * RECORD_COST  # the full decode would stop after 10 of its 40 records
    with pytest.raises(NotClean):
        headers_json(buf, memoryview(buf), 0, len(buf), ctx)
    ctx.budget = 10_000 * RECORD_COST
    assert headers_json(buf, memoryview(buf), 0, len(buf), ctx)["batches"][0]["record_count"] == 40
    assert ctx.budget < 10_000 * RECORD_COST  # charged as the full decode would be


def _facts(path: Path, headers: bool) -> list[tuple]:
    ctx = DecodeContext(limits=Limits(max_value_bytes=64), record_headers=headers)
    decoder = BodyDecoder(ctx)
    out = []
    for ex in Session([str(path)]).exchanges():
        f = Bodies(ex, decoder).facts
        out.append((f.error_code, f.throttle_time_ms, f.replica_id, f.partitions,
                    f.listed_topics, f.partition_error_count))
    return out


@pytest.mark.parametrize(
    "path",
    sorted(CAPTURES.glob("*.pcap")) + sorted((CAPTURES / "replication").glob("*.pcap*")),
    ids=lambda p: p.name,
)
def test_every_exchange_has_the_same_facts(path: Path) -> None:
    full = _facts(path, False)
    assert _facts(path, True) == full
