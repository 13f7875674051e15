"""The TUI's headless data layer: filter language, summaries, matching, sorting, appends."""

from __future__ import annotations

import threading

import pytest

from kanalyze.session import Session
from kanalyze.tui.filters import FilterError, parse_filter
from kanalyze.tui.store import ExchangeStore
from tests.tui.conftest import CAPTURES


@pytest.fixture(scope="module")
def store() -> ExchangeStore:
    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "lib_codecs.pcap")]).exchanges())
    st.done = True
    return st


def test_parse_terms():
    f = parse_filter("api:Produce topic:lib client:lib-p conn:3 status:ok errors lat>1.5 gzip")
    assert f.apis == ["produce"] and f.topics == ["lib"] and f.clients == ["lib-p"] and f.conns == [3]
    assert f.statuses == ["ok"] and f.errors_only and f.min_latency_ms == 1.5 and f.words == ["gzip"]
    assert parse_filter("").empty and not parse_filter("api:0").needs_summary


@pytest.mark.parametrize("text", ["lat>x", "status:bogus", "conn:abc", "api:"])
def test_parse_errors(text):
    with pytest.raises(FilterError):
        parse_filter(text)


def test_counts_and_connections(store):
    assert len(store) == 52
    assert sum(c.exchanges for c in store.conns.values()) == 52
    assert all(c.client_id != "-" for c in store.conns.values())


def test_match_by_api_topic_latency(store):
    produce = store.match_range(parse_filter("api:produce"), 0, len(store))
    assert len(produce) == 5 and all(store.exchanges[i].api == "Produce" for i in produce)
    assert store.match_range(parse_filter("api:0"), 0, len(store)) == produce
    gzip = store.match_range(parse_filter("topic:lib-gzip"), 0, len(store))
    assert gzip and all("lib-gzip" in store.summary(i)[0] for i in gzip)
    both = store.match_range(parse_filter("api:produce topic:lib-gzip"), 0, len(store))
    assert both == sorted(set(produce) & set(gzip)) and len(both) == 1
    slow = store.match_range(parse_filter("lat>0.3"), 0, len(store))
    assert all(store.exchanges[i].latency_ns > 0.3e6 for i in slow)
    problems = store.match_range(parse_filter("errors"), 0, len(store))
    assert problems == [i for i, ex in enumerate(store.exchanges) if ex.status != "ok" or store.summary(i)[1]]
    assert {store.exchanges[i].status for i in problems} == {"ok", "no_response"}
    assert ("MEMBER_ID_REQUIRED",) in [store.summary(i)[1] for i in problems]
    assert store.match_range(parse_filter("nosuchthing"), 0, len(store)) == []


def test_summary_names_topics_and_partitions(store):
    i = next(i for i, ex in enumerate(store.exchanges) if ex.api == "Produce")
    topics, errors = store.summary(i)
    assert topics.startswith("lib-") and topics.endswith("[0]") and errors == ()


def test_sort(store):
    rows = list(range(len(store)))
    by_lat = store.sort_indices(rows, "latency", reverse=True)
    lats = [store.exchanges[i].latency_ns or -1 for i in by_lat]
    assert lats == sorted(lats, reverse=True)
    assert store.sort_indices(by_lat, "time") == rows


def test_summarize_all_counts_errors_per_connection():
    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "lib_group_rebalance.pcap")]).exchanges())
    before = sum(c.problems for c in st.conns.values())
    assert st.summarize_all() and st.summarized == len(st)
    errors = sum(1 for i, ex in enumerate(st.exchanges) if ex.status == "ok" and st.summaries[i][1])
    assert errors and sum(c.problems for c in st.conns.values()) == before + errors


def test_cancelled_match_returns_none(store):
    assert store.match_range(parse_filter("topic:x"), 0, len(store), cancelled=lambda: True) is None


def test_append_from_threads():
    st = ExchangeStore()
    exs = list(Session([str(CAPTURES / "lib_acks.pcap")]).exchanges())
    threads = [threading.Thread(target=st.add, args=(exs,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(st) == len(st.summaries) == 4 * len(exs)
    assert sum(c.exchanges for c in st.conns.values()) == 4 * len(exs)


def test_secret_bytes_masked_for_the_hex_view():
    from dissectors.secrets import is_secret
    from kanalyze.tui.widgets.decode_tree import _mask_secrets

    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "sasl_scram_rejected.pcap")]).exchanges())
    ex = [e for e in st.exchanges if e.api == "SaslAuthenticate"][-1]
    node, _ctx = st.encoder.body(ex, ex.request, True)
    proof = next(n for n in node.walk() if is_secret(n.value))
    data = ex.request.pdu.data
    masked = _mask_secrets(data, node)
    assert masked[proof.offset:proof.offset + proof.length] == b"*" * proof.length
    assert masked[:proof.offset] == data[:proof.offset] and len(masked) == len(data)
