"""The damage corpus: real-client captures damaged the way operators' captures are, no hints.

Variants are derived at test time (tests/support/damage.py) from a few of the repo's real-client
captures into a tmp dir: mid-stream cuts, single packets dropped, reordered windows, snaplen
96/200/512 and the broker port moved above the ephemeral range. kanalyze gets no `--port`.
What must hold (issue 13):

* everywhere: no packet number 0, no negative latency, no latency above the clean capture's
  largest, and per direction stream bytes = frame bytes + skipped + gaps;
* cuts: an exchange whose request and response are both inside the cut is identical to the
  clean capture's; an orphan response (request before the cut) is never inferred wrong, and
  when the cut capture can tell what it answered (tests/support/orphan_cuts.py: its bytes fit
  one layout, or its client id sent one of the fitting pairs), it is inferred (>= 95 %);
* drops and reorders: every request of the clean capture whose packets are intact is found,
  and exchanges whose packets are all intact come out identical;
* snaplen: the same exchanges at header level (client ids may be cut), latencies exact;
* broker port above the ephemeral range: the same exchanges, the broker on its new port, and
  every request tshark finds when told that port; cut mid-stream as well, every connection
  still has the broker on that port (also those whose only captured side is the broker's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kanalyze.correlation import Exchange
from kanalyze.session import Session
from tests.support import damage as D
from tests.support import orphan_cuts as OC
from tests.support.tshark import tshark_binary, tshark_pdus

ROOT = Path(__file__).resolve().parents[2]
# lib_legacy and kp_v25: cuts where only the broker's side of a connection remains, its
# small correlation ids reading as "Produce vN" request headers
CAPTURES = ("lib_acks", "lib_idempotent", "aio_group", "kp_codecs", "lib_legacy", "kp_v25")
SAMPLE = 6  # cut points, dropped packets and reorder windows per capture


@dataclass
class Clean:
    name: str
    port: int
    pcap: D.Pcap
    exchanges: list[Exchange]

    @property
    def max_latency(self) -> int:
        return max((e.latency_ns for e in self.exchanges if e.latency_ns is not None), default=0)


def run(path: Path) -> tuple[list[Exchange], Session]:
    s = Session([str(path)])
    return list(s.exchanges()), s


@pytest.fixture(scope="module")
def corpus(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Clean, list[tuple[str, Path]]]]:
    out = tmp_path_factory.mktemp("damage")
    got = {}
    for name in CAPTURES:
        src = ROOT / "captures" / f"{name}.pcap"
        port = json.loads(src.with_name(f"{name}.truth.json").read_text())["broker"]["port"]
        clean = Clean(name, port, D.read_pcap(src), run(src)[0])
        got[name] = (clean, list(D.variants(src, out, port, SAMPLE)))
    return got


def all_variants(corpus: dict) -> Iterator[tuple[Clean, str, Path]]:
    for clean, variants in corpus.values():
        for kind, path in variants:
            yield clean, kind, path


def header_key(e: Exchange, renumber: Callable[[int], int] = lambda p: p) -> tuple:
    """What an exchange says, its packet numbers mapped through `renumber` (clean -> variant)."""
    return (
        e.conn.client.rsplit(":", 1)[0],
        e.api_key,
        e.api_version,
        e.correlation_id,
        e.client_id,
        e.status,
        e.latency_ns,
        e.request.pdu.last_ts if e.request else None,
        e.response.pdu.last_ts if e.response else None,
        renumber(e.request.pdu.last_pkt) if e.request else None,
        renumber(e.response.pdu.last_pkt) if e.response else None,
    )


def test_no_frame_zero_no_negative_or_inflated_latency_bytes_add_up(corpus: dict) -> None:
    checked = 0
    for clean, kind, path in all_variants(corpus):
        exs, s = run(path)
        for e in exs:
            for msg, _is_req in e.messages():
                assert 1 <= msg.pdu.first_pkt <= msg.pdu.last_pkt, (path.name, e)
            lat = e.latency_ns
            assert lat is None or 0 <= lat <= clean.max_latency, (
                path.name,
                kind,
                e.api,
                e.correlation_id,
                lat,
            )
        st = s.engine.stats  # type: ignore[union-attr]
        for t in (st.client, st.broker):
            assert t.stream == t.frames + t.skipped + t.gaps, (path.name, t)
        checked += 1
    assert checked >= len(CAPTURES) * (3 * SAMPLE // 2)


def _cut_index(kind: str) -> int:
    return int(kind.removeprefix("cut"))


def test_mid_stream_cuts(corpus: dict) -> None:
    compared = 0
    tally = OC.Tally()
    for clean, kind, path in all_variants(corpus):
        if not kind.startswith("cut"):
            continue
        k = _cut_index(kind)  # packets 1..k of the clean capture are gone
        exs, _ = run(path)
        got = {header_key(e, lambda p, k=k: p + k) for e in exs}
        for e in clean.exchanges:
            if e.request is None or e.response is None or e.request.pdu.first_pkt <= k:
                continue
            assert header_key(e) in got, (path.name, e.api, e.correlation_id)
            compared += 1
        # orphans: a response inside the cut whose request began before it
        OC.score_cut(path.name, clean.exchanges, k, exs, tally)
    print(f"cuts: {compared} exchanges compared; orphans: {tally.line()}")
    assert compared > 50
    _assert_orphans(tally)


def _assert_orphans(tally: OC.Tally) -> None:
    """Never wrong; >= 95 % of the decidable ones right (decidable: the frame fits one response
    layout only, or the orphan's own client id sent, inside the cut, exactly one of the
    (api, version) pairs whose layout fits it -- see tests/support/orphan_cuts.py)."""
    wrong = [o for o in tally.orphans if o.outcome == "wrong"]
    assert not wrong, wrong[:3]
    decidable = [o for o in tally.orphans if o.decidable]
    right = [o for o in decidable if o.outcome == "right"]
    assert decidable and len(right) >= 0.95 * len(decidable), tally.line()


def test_orphans_of_every_capture_cut_at_every_other_packet(tmp_path: Path) -> None:
    """Every real-client capture in captures/ (17), cut at every other payload packet (617
    cuts, 354 orphans; ~9 s): the issue's bar over all orphans is out of reach of honest
    evidence (a third answer requests of an api or version nothing the same client sends in
    the rest of the cut capture), so the decidable ones must be right (209 of 211) and none
    wrong; the rest are counted, not guessed (232 right in all)."""
    tally = OC.measure(sorted((ROOT / "captures").glob("*.pcap")), 2, OC.Tally(), tmp_path)
    print(f"every other cut: {tally.line()}")
    _assert_orphans(tally)
    assert len(tally.orphans) > 300
    assert tally.count("right") >= 0.65 * len(tally.orphans), tally.line()


def _intact(e: Exchange, lo: int, hi: int) -> bool:
    """Whether none of the exchange's packets is in lo..hi (1-based, clean numbering)."""
    return all(msg.pdu.last_pkt < lo or msg.pdu.first_pkt > hi for msg, _r in e.messages())


def test_drops_and_reorders_keep_intact_exchanges(corpus: dict) -> None:
    compared = 0
    for clean, kind, path in all_variants(corpus):
        if kind.startswith("drop"):
            i = int(kind.removeprefix("drop"))  # 0-based record index: packet i + 1 is gone
            lo, hi = i + 1, i + 1

            def renumber(p: int, gone: int = i + 1) -> int:
                return p - 1 if p > gone else p
        elif kind.startswith("reorder"):
            i = int(kind.removeprefix("reorder"))
            lo, hi = i + 1, i + 3

            def renumber(p: int) -> int:
                return p
        else:
            continue
        exs, _ = run(path)
        got = {header_key(e) for e in exs}
        for e in clean.exchanges:
            if not _intact(e, lo, hi) or e.status != "ok":
                continue
            assert header_key(e, renumber) in got, (path.name, e.api, e.correlation_id)
            compared += 1
    print(f"drops/reorders: {compared} exchanges compared")
    assert compared > 200


def test_reordered_windows_lose_no_exchange(corpus: dict) -> None:
    """A window of 3 packets listed in reverse: a request whose packet comes after the answer
    that acknowledges it still fills its hole (reassembled out of order, as tshark does with
    tcp.reassemble_out_of_order) and is paired with that answer, no gap declared; every
    exchange of the clean capture comes out with the same api, version and status.
    (Not yet: a window that moves data after the FIN or RST closing its connection -- the
    late packet opens a new connection; those windows are skipped and counted.)"""
    compared = skipped = 0
    for clean, kind, path in all_variants(corpus):
        if not kind.startswith("reorder"):
            continue
        i = int(kind.removeprefix("reorder"))
        if any(D.closes(r) for r in clean.pcap.records[i : i + 3]):
            skipped += 1
            continue
        exs, s = run(path)
        st = s.engine.stats  # type: ignore[union-attr]
        assert st.client.gaps == st.broker.gaps == 0, path.name
        got = {_what(e) for e in exs}
        for e in clean.exchanges:
            assert _what(e) in got, (path.name, e.api, e.correlation_id)
            compared += 1
    print(f"reorders: {compared} exchanges compared, {skipped} windows with a FIN/RST skipped")
    assert compared > 300


def _what(e: Exchange) -> tuple:
    return (e.conn.client, e.api_key, e.api_version, e.correlation_id, e.client_id, e.status)


def test_snaplen_keeps_headers_and_latencies(corpus: dict) -> None:
    compared = 0
    for clean, kind, path in all_variants(corpus):
        if not kind.startswith("snap"):
            continue
        exs, s = run(path)
        strip = {header_key(e)[:4] + header_key(e)[5:] for e in exs}
        for e in clean.exchanges:
            key = header_key(e)
            assert key[:4] + key[5:] in strip, (path.name, e.api, e.correlation_id)
            compared += 1
        assert s.engine is not None and s.engine.stats.flows.snaplen <= int(
            kind.removeprefix("snap")
        )
    assert compared > 100


def test_broker_port_above_ephemeral_range(corpus: dict) -> None:
    for clean, kind, path in all_variants(corpus):
        if kind != "remap":
            continue
        exs, _ = run(path)
        assert {header_key(e) for e in exs} == {header_key(e) for e in clean.exchanges}
        assert all(e.conn.broker.endswith(f":{D.ABOVE_EPHEMERAL}") for e in exs)


def test_mid_stream_cuts_with_the_broker_above_the_ephemeral_range(corpus: dict) -> None:
    """No SYN and every client port below the broker's: the lower-port fallback would be wrong
    for every connection, so the bytes (headers, then bodies) must decide the roles."""
    compared = conns = 0
    for clean, kind, path in all_variants(corpus):
        if not kind.startswith("remapcut"):
            continue
        k = int(kind.removeprefix("remapcut"))
        exs, _ = run(path)
        brokers = {e.conn.id: e.conn.broker for e in exs}
        assert all(b.endswith(f":{D.ABOVE_EPHEMERAL}") for b in brokers.values()), (
            path.name,
            brokers,
        )
        conns += len(brokers)
        got = {header_key(e, lambda p, k=k: p + k) for e in exs}
        for e in clean.exchanges:
            if e.request is None or e.response is None or e.request.pdu.first_pkt <= k:
                continue
            assert header_key(e) in got, (path.name, e.api, e.correlation_id)
            compared += 1
    print(f"remapped cuts: {conns} connections, {compared} exchanges compared")
    assert conns > 20 and compared > 50


@pytest.mark.slow  # ~35 s: 30 tshark runs
@pytest.mark.tshark
@pytest.mark.skipif(tshark_binary() is None, reason="tshark is not installed")
def test_tshark_requests_found_without_hint(corpus: dict) -> None:
    """Every request tshark finds when told the (moved) broker port, kanalyze finds with no hint;
    per capture on the remapped capture, a cut, a remapped cut, a drop, a reordered window and
    snaplen 200 (tshark with tcp.reassemble_out_of_order, kanalyze within its hole patience:
    a request listed after the answer that acknowledges it is reassembled late, not a gap)."""
    checked = 0
    for clean, variants in corpus.values():
        chosen = [(k, p) for k, p in variants if k in ("remap", "snap200")]
        for prefix in ("cut", "remapcut", "drop", "reorder"):
            chosen += [(k, p) for k, p in variants if k.startswith(prefix)][1:2]
        for kind, path in chosen:
            port = D.ABOVE_EPHEMERAL if kind.startswith("remap") else clean.port
            t = {
                (p.frame, p.api_key, p.api_version, p.correlation_id)
                for p in tshark_pdus(path, port)
                if p.is_request
            }
            exs, _ = run(path)
            k = {
                (e.request.pdu.last_pkt, e.api_key, e.api_version, e.correlation_id)
                for e in exs
                if e.request
            }
            assert t <= k, (path.name, sorted(t - k)[:5])
            checked += len(t)
    print(f"tshark: {checked} requests found")
    assert checked > 300


@pytest.mark.parametrize("name", ["lib_idempotent", "lib_acks"])
def test_every_single_packet_dropped(tmp_path: Path, name: str) -> None:
    """Each packet dropped in turn: the invariants hold and every exchange whose own packets are
    all there comes out identical (the dropped packet cannot hide anything else)."""
    src = ROOT / "captures" / f"{name}.pcap"
    pcap = D.read_pcap(src)
    clean = Clean(name, 0, pcap, run(src)[0])
    compared = 0
    for i in range(len(pcap.records)):
        path = D.write_pcap(tmp_path / f"drop{i}.pcap", pcap, D.drop(pcap.records, i))
        exs, s = run(path)
        for e in exs:
            assert all(1 <= m.pdu.first_pkt <= m.pdu.last_pkt for m, _r in e.messages()), (i, e)
            assert e.latency_ns is None or 0 <= e.latency_ns <= clean.max_latency, (
                i,
                e.api,
                e.correlation_id,
            )
        st = s.engine.stats  # type: ignore[union-attr]
        assert all(t.stream == t.frames + t.skipped + t.gaps for t in (st.client, st.broker)), i
        got = {header_key(e) for e in exs}
        for e in clean.exchanges:
            if e.status == "ok" and _intact(e, i + 1, i + 1):
                assert header_key(e, lambda p, gone=i + 1: p - 1 if p > gone else p) in got, (
                    i,
                    e.api,
                    e.correlation_id,
                )
                compared += 1
    assert compared > 10 * len(pcap.records)
