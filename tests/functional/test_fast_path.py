"""The engine's fused fast path (`Engine._fast`) against the general stages on every committed
capture: the same exchanges (every field, frames and diagnostics included), the same stream
events and statistics. `EngineOptions(fast_path=False)` (or KANALYZE_GENERAL_PATH=1) runs every
packet through the general stages."""

from __future__ import annotations

from pathlib import Path

import pytest

import kanalyze.session as session_module
from kanalyze.capture import CaptureError
from kanalyze.engine import Engine, EngineOptions
from kanalyze.session import Session

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
FILES = sorted(
    p
    for d in (CAPTURES, CAPTURES / "crafted", CAPTURES / "replication")
    for p in d.iterdir()
    if p.suffix in (".pcap", ".pcapng", ".gz")
)


SKIP = {"sink", "limits", "on_pdu", "expects", "awaited"}  # callables and shared objects


def _state(obj: object) -> dict[str, object]:
    # a class compiled with mypyc (tools/compile.py) lists its attributes in __mypyc_attrs__
    cls = type(obj)
    names = getattr(cls, "__slots__", None) or cls.__mypyc_attrs__  # type: ignore[attr-defined]
    return {k: getattr(obj, k) for k in names if k not in SKIP}


def _run(path: Path, fast: bool, ports: frozenset[int] = frozenset()) -> tuple:
    """(exchanges, engine stats, capture stats, every connection's stream state at its close)."""
    session = Session([str(path)], EngineOptions(ports=ports, fast_path=fast))
    closed: list[tuple] = []

    class Recording(Engine):
        def _close(self, conn, pkt):  # noqa: ANN001, ANN202
            if not conn.closed:
                closed.append(tuple(_state(x) for x in (conn.c2s, conn.s2c, conn.cf, conn.sf)))
            super()._close(conn, pkt)

    session_module.Engine = Recording  # type: ignore[misc]
    try:
        exchanges = list(session.exchanges())
    except CaptureError as e:  # not a capture at all (crafted): the same error either way
        return str(e), None, None, None
    finally:
        session_module.Engine = Engine  # type: ignore[misc]
    assert session.engine is not None
    return exchanges, session.engine.stats, session.capture, closed


def test_there_are_captures() -> None:
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(CAPTURES)) for p in FILES])
def test_fast_path_is_the_general_path(path: Path) -> None:
    fast = _run(path, True)
    general = _run(path, False)
    assert fast[0] == general[0]
    assert fast[1] == general[1]
    assert fast[2] == general[2]
    assert fast[3] == general[3]


def test_the_fast_path_runs_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted through a subclass, as the `--jobs` ranges override it: compiled (mypyc) the
    engine's methods cannot be patched, but an interpreted subclass's override is called."""
    taken = []

    class Counting(Engine):
        def _fast(self, *args):  # noqa: ANN001, ANN002, ANN202
            ok = super()._fast(*args)
            taken.append(ok)
            return ok

    monkeypatch.setattr(session_module, "Engine", Counting)
    path = CAPTURES / "lib_codecs.pcap"
    session = Session([str(path)], EngineOptions(fast_path=True))
    exchanges = list(session.exchanges())
    assert exchanges and sum(taken) > len(exchanges)  # most packets go the fast way
    taken.clear()
    monkeypatch.setenv("KANALYZE_GENERAL_PATH", "1")
    assert not EngineOptions().fast_path
    assert list(Session([str(path)], EngineOptions()).exchanges()) == exchanges
    assert taken == []
