"""The TUI's headless data layer: filter language, summaries, matching, sorting, appends."""

from __future__ import annotations

import threading

import pytest

from kanalyze.session import Session
from kanalyze.tui.filters import FilterError, parse_filter
from kanalyze.tui.store import SORT_KEYS, ExchangeStore, summarize
from tests.tui.conftest import CAPTURES


@pytest.fixture(scope="module")
def store() -> ExchangeStore:
    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "lib_codecs.pcap")]).exchanges())
    st.done = True
    return st


def test_parse_terms():
    f = parse_filter("api:Produce topic:lib client:lib-p conn:3 status:ok errors lat>1.5 gzip")
    assert (
        f.apis == ["produce"] and f.topics == ["lib"] and f.clients == ["lib-p"] and f.conns == [3]
    )
    assert (
        f.statuses == ["ok"] and f.errors_only and f.min_latency_ms == 1.5 and f.words == ["gzip"]
    )
    assert parse_filter("").empty and not parse_filter("api:0").needs_summary


@pytest.mark.parametrize(
    "text",
    [
        "lat>x",
        "status:bogus",
        "conn:abc",
        "api:",
        "lat>abc",
        "lat<1",
        "not api:Fetch",
        "frame:57",
        "api:fetch || api:produce",
        "!errors",
        "lat>-1",
        "latency=5",
    ],
)
def test_parse_errors(text):
    """What the bar cannot say is an error shown to the user, never read as free text."""
    with pytest.raises(FilterError):
        parse_filter(text)


def test_addresses_stay_free_text():
    assert parse_filter("127.0.0.1:19091").words == ["127.0.0.1:19091"]


def test_counts_and_connections(store):
    assert len(store) == 52
    assert sum(c.exchanges for c in store.conns.values()) == 52
    assert all(c.client_id != "-" for c in store.conns.values())


def test_match_by_api_topic_latency(store):
    produce = store.match_range(parse_filter("api:produce"), 0, len(store))
    assert len(produce) == 5 and all(store.row(i).api == "Produce" for i in produce)
    assert store.match_range(parse_filter("api:0"), 0, len(store)) == produce
    gzip = store.match_range(parse_filter("topic:lib-gzip"), 0, len(store))
    assert gzip and all("lib-gzip" in store.summary(i)[0] for i in gzip)
    both = store.match_range(parse_filter("api:produce topic:lib-gzip"), 0, len(store))
    assert list(both) == sorted(set(produce) & set(gzip)) and len(both) == 1
    slow = store.match_range(parse_filter("lat>0.3"), 0, len(store))
    assert all(store.row(i).latency_ns > 0.3e6 for i in slow)
    problems = store.match_range(parse_filter("errors"), 0, len(store))
    assert list(problems) == [
        i for i in range(len(store)) if store.row(i).status != "ok" or store.summary(i)[1]
    ]
    assert {store.row(i).status for i in problems} == {"ok", "no_response"}
    assert ("MEMBER_ID_REQUIRED",) in [store.summary(i)[1] for i in problems]
    assert list(store.match_range(parse_filter("nosuchthing"), 0, len(store))) == []


def test_summary_names_topics_and_partitions(store):
    i = next(i for i in range(len(store)) if store.row(i).api == "Produce")
    topics, errors = store.summary(i)
    assert topics.startswith("lib-") and topics.endswith("[0]") and errors == ()


def test_sort(store):
    rows = list(range(len(store)))
    by_lat = store.sort_indices(rows, "latency", reverse=True)
    lats = [store.row(i).latency_ns or -1 for i in by_lat]
    assert lats == sorted(lats, reverse=True)
    assert list(store.sort_indices(by_lat, "time")) == rows


def test_summarize_all_counts_errors_per_connection():
    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "lib_group_rebalance.pcap")]).exchanges())
    before = sum(c.problems for c in st.conns.values())
    assert st.summarize_all() and st.summarized == len(st)
    errors = sum(1 for i in range(len(st)) if st.row(i).status == "ok" and st.summary(i)[1])
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
    assert len(st) == len(st.rows) == 4 * len(exs)
    assert sum(c.exchanges for c in st.conns.values()) == 4 * len(exs)
    # each thread's batch went in whole (the lock): every row reads back as one of the exchanges
    assert sorted(map(repr, (st.exchange(i) for i in range(len(st))))) == sorted(map(repr, exs * 4))


def test_secret_bytes_masked_for_the_hex_view():
    from dissectors.secrets import is_secret
    from kanalyze.tui.widgets.decode_tree import hex_buffer

    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "sasl_scram_rejected.pcap")]).exchanges())
    ex = [e for _i, e in st.iter_exchanges() if e.api == "SaslAuthenticate"][-1]
    node, _ctx = st.bodies.node(ex, ex.request, True)
    proof = next(n for n in node.walk() if is_secret(n.value))
    data = ex.request.pdu.data
    masked = hex_buffer(ex, ex.request, True, node)
    assert masked[proof.offset : proof.offset + proof.length] == b"*" * proof.length
    assert masked[: proof.offset] == data[: proof.offset] and len(masked) == len(data)


# -- memory: rows in arrays, frames in the spill file ---------------------------------------------


def _captures() -> list[str]:
    from kanalyze.capture import CaptureError, read_captures

    out = []
    for p in sorted(CAPTURES.rglob("*.pcap*")):
        try:
            next(iter(read_captures([str(p)])), None)
        except CaptureError:
            continue
        out.append(str(p))
    return out


def test_rebuilt_exchanges_equal_the_indexed_ones_on_every_capture():
    """Every capture in the repo (crafted damage, gaps, SASL, acks=0, orphans included): an
    exchange read back from the store equals the one added, field for field, and encodes to the
    same NDJSON line."""
    from kanalyze.export import ExchangeEncoder

    paths = _captures()
    assert len(paths) > 30
    for path in paths:
        exs = list(Session([path]).exchanges())
        st = ExchangeStore()
        for k in range(0, len(exs), 5):  # several batches
            st.add(exs[k : k + 5])
        assert [st.exchange(i) for i in range(len(st))] == exs, path
        rebuilt = [ex for _i, ex in st.iter_exchanges()]
        assert rebuilt == exs, path
        mine, theirs = ExchangeEncoder(), ExchangeEncoder()
        assert [mine.line(ex) for ex in rebuilt] == [theirs.line(ex) for ex in exs], path
        assert [st.row(i).size for i in range(len(st))] == [
            sum(m.pdu.size for m in (ex.request, ex.response) if m) for ex in exs
        ]
        # summaries decode bodies from a lighter rebuild (frames and body offsets only): same result
        dec = st._summary_bodies
        assert [summarize(st._for_bodies(i, st.spill.get), dec) for i in range(len(st))] == [
            summarize(ex, dec) for ex in exs
        ], path
        st.close()
        # frames spilled while the engine's orderer holds the exchanges (`Engine.hold`, as the
        # app indexes): the same rows come back
        held = ExchangeStore()
        held.add(Session([path], hold=held.hold).exchanges())
        assert [ex for _i, ex in held.iter_exchanges()] == exs, path
        held.close()


def test_the_orderer_holds_no_frame_bytes_when_the_store_spills_them():
    """A JoinGroup waiting for a rebalance holds every later exchange in the engine's orderer:
    with the store's `hold`, what it holds are stubs (the frames are in the spill file)."""
    from kanalyze.tui.store import Spilled

    st = ExchangeStore()
    session = Session([str(CAPTURES / "lib_group_rebalance.pcap")], hold=st.hold)
    held_most = 0
    for ex in session.exchanges():
        done = session.engine.done
        held_most = max(held_most, len(done))
        for _ts, _seq, h in done:
            assert all(type(m.pdu.data) is Spilled for m in (h.request, h.response) if m)
        st.add([ex])
    assert held_most > 0  # the capture does make the orderer wait
    plain = list(Session([str(CAPTURES / "lib_group_rebalance.pcap")]).exchanges())
    assert [st.exchange(i) for i in range(len(st))] == plain
    st.close()


def _reachable(root: object) -> list[object]:
    """Objects reachable from `root`, not following modules, classes and functions."""
    import gc
    import types

    skip = (
        type,
        types.ModuleType,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        types.CodeType,
    )
    seen: set[int] = set()
    out = []
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, skip):
            continue
        seen.add(id(o))
        out.append(o)
        stack.extend(gc.get_referents(o))
    return out


def test_store_holds_no_exchange_and_no_frame_bytes(monkeypatch):
    """What a row costs in memory does not depend on its frames: after indexing, nothing
    reachable from the store is an Exchange, Message or Pdu, and no bytes of frames are held
    (the spill's write buffer is flushed at every frame here)."""
    from kanalyze.correlation import Exchange, Message
    from kanalyze.framing import Pdu
    from kanalyze.tui import spill

    monkeypatch.setattr(spill, "FLUSH_BYTES", 0)
    st = ExchangeStore()
    payload = 0
    for _ in range(20):
        exs = list(Session([str(CAPTURES / "lib_codecs.pcap")]).exchanges())
        payload += sum(len(m.pdu.data) for ex in exs for m in (ex.request, ex.response) if m)
        st.add(exs)
    del exs
    st.summarize_all()
    assert st.summary(0) is not None and st.exchange(len(st) - 1) is not None
    objs = _reachable(st)
    assert not [o for o in objs if isinstance(o, (Exchange, Message, Pdu))]
    held = sum(len(o) for o in objs if isinstance(o, (bytes, bytearray, memoryview)))
    assert payload > 300_000 and held < 4096
    # summaries are stored once per distinct value, not once per row
    assert len(st._summary_values) < 60 and len(st._summary) == len(st) == 20 * 52
    st.close()


def test_header_terms_on_columns_agree_with_filter_match(store):
    """The column matcher (kanalyze/tui/rowfilter.py) against the definition, `Filter.match`."""
    from kanalyze.tui.rowfilter import header_matcher, summary_matcher

    texts = [
        "api:produce",
        "api:0",
        "api:f",
        "api:Fetch api:Metadata",
        "conn:2",
        "conn:1 conn:3",
        "status:no_response",
        "status:ok api:join",
        "lat>0.3",
        "lat>0",
        "client:lib-p",
        "client:127.0.0.1",
        "client:nosuch",
        "api:sasl",
        "conn:4 lat>0.1 client:lib",
    ]
    for text in texts:
        flt = parse_filter(text)
        m = header_matcher(flt, store.rows)
        assert [i for i in range(len(store)) if m(i)] == [
            i for i in range(len(store)) if flt.match(store.row(i), None)
        ], text
    # with the summary terms: both matchers together, and match_range, against the definition
    texts += [
        "errors",
        "topic:lib-gzip",
        "topic:LIB api:fetch",
        "gzip",
        "produce lib-none",
        "none",
        "127.0.0.1",
        "19091",
        "no_response",
        "member_id_required",
        "errors conn:2",
        "ok 7",
    ]
    for text in texts:
        flt = parse_filter(text)
        h, s = header_matcher(flt, store.rows), summary_matcher(flt, store.rows)
        want = [i for i in range(len(store)) if flt.match(store.row(i), store.summary(i))]
        assert [i for i in range(len(store)) if h(i) and s(i, store.summary(i))] == want, text
        assert list(store.match_range(flt, 0, len(store))) == want, text


def test_sort_by_every_column_matches_value_then_index():
    """Sorting works on columns; the order is that of the key (value, index), reversed with S."""
    st = ExchangeStore()
    st.add(Session([str(CAPTURES / "lib_group_rebalance.pcap")]).exchanges())
    st.add(
        Session([str(CAPTURES / "sasl_scram_rejected.pcap")]).exchanges()
    )  # SaslRaw, no_response
    reference = {
        "time": lambda r: r.start_ts,
        "latency": lambda r: r.latency_ns if r.latency_ns is not None else -1,
        "api": lambda r: (r.api or "", r.api_version or 0),
        "conn": lambda r: r.conn.id,
        "corr": lambda r: r.correlation_id if r.correlation_id is not None else -1,
        "status": lambda r: r.status,
        "size": lambda r: r.size,
    }
    rows = list(range(len(st)))[::-1]
    for key in SORT_KEYS:
        for reverse in (False, True):
            got = list(st.sort_indices(rows, key, reverse))
            if key == "time" and not reverse:
                assert got == sorted(rows)  # capture (store) order
                continue
            k = reference[key]
            assert got == sorted(rows, key=lambda i: (k(st.row(i)), i), reverse=reverse), (
                key,
                reverse,
            )


def test_spill_error_keeps_the_rows_before_it(monkeypatch):
    """A full disk mid-batch: the exception reaches the caller, the rows added before it are
    complete and listed, the rest are not."""
    st = ExchangeStore()
    exs = list(Session([str(CAPTURES / "lib_codecs.pcap")]).exchanges())
    put = st.spill.put
    calls = []

    def failing(pdu):
        calls.append(1)
        if len(calls) > 21:
            raise OSError(28, "No space left on device")
        return put(pdu)

    monkeypatch.setattr(st.spill, "put", failing)
    with pytest.raises(OSError):
        st.add(exs)
    assert 0 < len(st) == len(st.rows) == len(st._summary) <= 11
    assert [st.exchange(i) for i in range(len(st))] == exs[: len(st)]
    st.close()
