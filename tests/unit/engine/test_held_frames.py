"""Exchanges held back behind a long-waiting request keep their frames in a temporary file
(kanalyze.held), not in memory, and every output stays byte-identical (docs/performance.md,
"Exchanges held behind a waiting request")."""

from __future__ import annotations

import json
import tempfile

import pytest

from kanalyze import held as H
from kanalyze.capture import Packet
from kanalyze.cli import main
from kanalyze.engine import EXCHANGE_COST, PENDING_COST, Engine, EngineOptions
from kanalyze.session import Session
from tests.support import adversarial as A
from tests.support import packets as P
from tests.support.engine import apiv_request, apiv_response

T0 = 1_700_000_000_000_000_000


def _behind_one(n: int, first_answered: bool = False) -> list[bytes]:
    """A request (ApiVersions) answered last or never, then `n` exchanges answered at once;
    every other response carries 100 KB (the direct path) besides the small ones."""
    c = P.Conversation()
    pkts = c.handshake() + [c.send(True, apiv_request(1))]
    for corr in range(2, n + 2):
        pkts += [c.send(True, apiv_request(corr)), c.send(False, apiv_response(corr))]
        if corr % 2:
            big = P.request_frame(18, 0, 10_000 + corr, "big", b"x" * 100_000)
            pkts += [c.send(True, big[:50_000]), c.send(True, big[50_000:])]
            pkts.append(c.send(False, P.response_frame(10_000 + corr, b"\0\0")))
    if first_answered:
        pkts.append(c.send(False, apiv_response(1)))
    return pkts


def test_the_engine_hands_only_held_exchanges_to_hold() -> None:
    """Exchanges that go out at once are never shown to `hold` (no copy of their frames)."""
    seen: list = []
    out: list = []
    eng = Engine(out.append, EngineOptions(), hold=seen.append)
    c = P.Conversation()
    pkts = c.handshake()
    for corr in range(1, 20):  # each answered before the next: nothing waits
        pkts += [c.send(True, apiv_request(corr)), c.send(False, apiv_response(corr))]
    pkts.append(c.send(True, apiv_request(100)))  # waits: the ones after it are held
    for corr in range(20, 30):
        pkts += [c.send(True, apiv_request(corr)), c.send(False, apiv_response(corr))]
    for no, raw in enumerate(pkts, 1):
        eng.feed(Packet(no, T0 + no * 1000, 228, raw))
    assert len(out) == 19 and [ex.correlation_id for ex in seen] == list(range(20, 30))
    eng.close()
    assert len(out) == 30


def test_parked_frames_come_back_byte_identical(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(H, "MIN_BYTES", 0)  # the small frames too
    held = H.HeldFrames(keep=0)
    out: list = []
    eng = Engine(out.append, EngineOptions(), hold=held.park)
    held.stats = eng.stats
    frames: dict[int, tuple] = {}
    for no, raw in enumerate(_behind_one(60, first_answered=True), 1):
        eng.feed(Packet(no, T0 + no * 1000, 228, raw))
        for ex in eng.done:
            frames.setdefault(id(ex[2]), ex[2])
        if no == 200:  # the frames of held exchanges are stubs of no length
            assert held.parked > 0 and held._file is not None
            assert all(len(e.request.pdu.data) == 0 for e in frames.values())
            assert eng.stats.held < len(frames) * (EXCHANGE_COST + 40) + 2 * PENDING_COST
    eng.close()
    assert len(out) == 91 and held.parked > 0
    plain = list(Session([_pcap(_behind_one(60, True))], park_held=False).exchanges())
    for ex, ref in zip(out, plain, strict=True):
        ex = held.unpark(ex)  # noqa: PLW2901
        assert bytes(ex.request.pdu.data) == bytes(ref.request.pdu.data)
        assert bytes(ex.response.pdu.data) == bytes(ref.response.pdu.data)
    assert held.parked == 0 and held.peak_bytes > 30 * 100_000
    assert held._flushed == 0  # nothing out: the file is written again from its start
    held.close()


def test_small_frames_and_a_light_wait_stay_in_memory() -> None:
    """Frames under MIN_BYTES are not worth a copy; nothing is parked while the engine holds
    under `keep`."""
    pkts = _behind_one(10)
    exs = list(Session([_pcap(pkts)], park_held=False).exchanges())
    held = H.HeldFrames(keep=0)
    for ex in exs:
        held.park(ex)
    msgs = [m for ex in exs for m in (ex.request, ex.response) if m is not None]
    big = [m for m in msgs if len(m.pdu.data) >= H.MIN_BYTES or type(m.pdu.data) is H.Parked]
    assert held.parked == len(big) == 5 and len(msgs) == 2 * len(exs) - 1
    assert all(type(m.pdu.data) is H.Parked for m in big)
    held.close()
    light = H.HeldFrames(keep=1 << 30)
    light.stats = Engine(list.append).stats
    for ex in list(Session([_pcap(pkts)], park_held=False).exchanges()):
        light.park(ex)
    assert light.parked == 0 and light._file is None


def test_requests_released_behind_a_waiting_one_leave_stubs_in_the_engine(tmp_path) -> None:  # noqa: ANN001
    """Released by the order window but still listed behind an unanswered request, a big
    request is handed on in a new Message; the engine's lists keep an empty stub."""
    cap = tmp_path / "late.pcap"
    cap.write_bytes(A.released_behind_one(n=80, size=10_000))
    session = Session([str(cap)])
    got = []
    for ex in session.exchanges():
        got.append(ex)
        if ex.request.header["correlation_id"] == 15:  # 1-15 handed on, kept by the engine
            assert session.engine is not None
            kept = [w[2] for w in session.engine.waiting if w[2].done]
            early = [m for m in kept if m.header["correlation_id"] <= 15]
            assert len(early) == 15 and all(len(m.pdu.data) == 0 for m in early)
    big = [ex for ex in got if ex.request.header["correlation_id"]]
    assert len(big) == 80 and all(len(ex.request.pdu.data) == 10_013 for ex in big)
    ref = list(Session([str(cap)], park_held=False).exchanges())
    assert [bytes(e.request.pdu.data) for e in got] == [bytes(e.request.pdu.data) for e in ref]


def test_a_file_that_cannot_be_written_keeps_the_frames_in_memory(monkeypatch) -> None:  # noqa: ANN001
    def no_space(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_space)
    monkeypatch.setattr(H, "KEEP_BYTES", 0)
    monkeypatch.setattr(H, "MIN_BYTES", 0)
    path = _pcap(_behind_one(40, True))
    got = list(Session([path], park_held=True).exchanges())
    ref = list(Session([path], park_held=False).exchanges())
    assert [bytes(e.response.pdu.data) for e in got] == [
        bytes(e.response.pdu.data) for e in ref
    ]


@pytest.mark.parametrize("command", ["export", "summary", "metadata"])
def test_outputs_are_the_same_with_frames_parked(tmp_path, capsys, monkeypatch, command) -> None:  # noqa: ANN001
    """One request never answered, 2,000 exchanges behind it: every frame parked (keep 0),
    the output of each command as with every frame in memory."""
    cap = tmp_path / "behind.pcap"
    cap.write_bytes(A.answered_behind_one(2000))
    argv = [command, "--json", str(cap)] if command != "export" else [command, str(cap)]
    park = H.HeldFrames.park
    monkeypatch.setattr(H.HeldFrames, "park", lambda s, ex: None)  # frames stay in memory
    assert main(argv) == 0
    ref = capsys.readouterr().out
    monkeypatch.setattr(H, "KEEP_BYTES", 0)
    monkeypatch.setattr(H, "MIN_BYTES", 0)
    parked: list[int] = []
    monkeypatch.setattr(H.HeldFrames, "park", lambda s, ex: (parked.append(1), park(s, ex)))
    assert main(argv) == 0
    got = capsys.readouterr().out
    assert len(parked) >= 1999
    if command == "summary":  # what the engine held at most: the frames no longer count
        before, after = json.loads(ref)["peaks"], json.loads(got)["peaks"]
        assert after["held_bytes"] < before["held_bytes"] - 1000 * 1999
        ref, got = _without_held_peak(ref), _without_held_peak(got)
    assert got == ref


def _without_held_peak(text: str) -> dict:
    doc = json.loads(text)
    doc["peaks"]["held_bytes"] = None
    return doc


def _pcap(pkts: list[bytes]) -> str:
    f = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False)  # noqa: SIM115
    with f:
        f.write(P.pcap([(1_700_000_000 + i * 1e-3, p) for i, p in enumerate(pkts)], 101))
    return f.name


def test_frames_not_wanted_are_dropped_with_the_same_accounting(monkeypatch) -> None:  # noqa: ANN001
    """`Session.frames_wanted` False (export --header-only): what would be parked is dropped,
    no file is made, the engine's accounting is the parking one, and the header lines and
    sizes are the same."""
    from dissectors import DecodeContext
    from kanalyze.export import ExchangeEncoder

    monkeypatch.setattr(H, "KEEP_BYTES", 0)
    path = _pcap(_behind_one(60, True))
    made: list = []
    real = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: made.append(1) or real())
    parking = Session([path])
    parked = list(parking.exchanges())
    assert made  # the frames went to a file
    made.clear()
    dropping = Session([path], frames_wanted=False)
    dropped = list(dropping.exchanges())
    assert not made
    assert dropping.engine.stats.held_peak == parking.engine.stats.held_peak  # type: ignore[union-attr]
    big = [e for e in dropped if e.request.pdu.size >= H.MIN_BYTES]
    assert big and all(len(e.request.pdu.data) == 0 for e in big)  # nothing kept
    enc = ExchangeEncoder(DecodeContext(), decode=False)
    assert [enc.line(e) for e in dropped] == [enc.line(e) for e in parked]
