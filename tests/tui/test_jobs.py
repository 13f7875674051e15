"""`kanalyze tui --jobs N`: the index built from byte ranges holds exactly the exchanges one
process indexes (rows, frames read back from the spill file, stream offsets)."""

from __future__ import annotations

from kanalyze.parallel import range_engine, range_session
from kanalyze.parallel.range_export import RANGE_BYTES_ENV
from kanalyze.session import Session
from kanalyze.tui import app as tui_app
from kanalyze.tui.app import KanalyzeApp
from tests.tui.conftest import CAPTURES, aio, wait_indexed

CODECS = str(CAPTURES / "kp_codecs.pcap")


@aio
async def _indexed(jobs: int) -> list:
    app = KanalyzeApp([CODECS], jobs=jobs)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_indexed(pilot)
        store = app.store
        return [(store.row(i), store.exchange(i)) for i in range(len(store))]


def test_tui_index_from_ranges(monkeypatch) -> None:
    """Ranges of 1500 bytes with few tail marks (connections handed over, their stream
    offsets moved), run in this process."""
    real = tui_app.with_jobs

    def in_process(session, jobs):  # noqa: ANN001, ANN202
        got = real(session, jobs)
        assert isinstance(got, range_session.RangeSession)
        got.processes = False
        return got

    monkeypatch.setattr(tui_app, "with_jobs", in_process)
    monkeypatch.setattr(range_engine, "MAX_TAIL", 8)
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    got = _indexed(2)
    assert range_session.last_fallback is None and range_session.last_ranges > 5
    want = list(Session([CODECS]).exchanges())
    assert [ex for _row, ex in got] == want
    assert [row.index for row, _ex in got] == list(range(len(want)))
    assert [row.conn for row, _ex in got] == [ex.conn for ex in want]


def test_tui_index_forked_workers(monkeypatch) -> None:
    """The app's own path: forked workers from the indexing thread."""
    monkeypatch.setenv(RANGE_BYTES_ENV, "1500")
    got = _indexed(3)
    assert range_session.last_fallback is None and range_session.last_ranges > 5
    assert [ex for _row, ex in got] == list(Session([CODECS]).exchanges())
