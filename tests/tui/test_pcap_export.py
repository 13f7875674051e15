"""The TUI's pcap export of a selection is the CLI's: the same exchanges selected in the store
and through `export -Y EXPR -w` give byte-identical files (one code path,
kanalyze/export/pcap.py)."""

from __future__ import annotations

import pytest

from kanalyze.query import Env, compile_filter
from kanalyze.session import Session
from kanalyze.tui.pcap_export import row_keys, write_pcap
from kanalyze.tui.store import ExchangeStore
from tests.functional.test_filter_pcap import CAPTURES, EXPRESSIONS, run

PICKED = [
    c
    for c in CAPTURES
    if c.name in ("lib_codecs.pcap", "lib_acks.pcap", "textbook.pcap", "gap.pcap", "lib_sasl.pcap")
]


def selected_rows(path: str, expr: str) -> list[int]:
    """Rows of the store (capture order) that `expr` selects, names learned in capture order as
    the CLI learns them."""
    env = Env()
    flt = compile_filter(expr, env)
    out = []
    for i, ex in enumerate(Session([path]).exchanges()):
        env.decoder.learn(ex)
        if flt.match(ex):
            out.append(i)
    return out


@pytest.mark.parametrize("cap", PICKED, ids=lambda p: p.name)
def test_tui_pcap_equals_the_cli_pcap(cap, tmp_path):
    assert len(PICKED) >= 4
    path = str(cap)
    store = ExchangeStore()
    store.add(Session([path], hold=store.hold).exchanges())
    wrote = 0
    for expr in EXPRESSIONS:
        rows = selected_rows(path, expr)
        mine, cli = tmp_path / "tui.pcap", tmp_path / "cli.pcap"
        found, packets = write_pcap(store, rows, [path], str(mine))
        assert found == len(row_keys(store, rows)) == len(rows), expr
        run("export", path, "-Y", expr, "-w", str(cli))
        assert mine.read_bytes() == cli.read_bytes(), expr
        wrote += packets
    assert wrote > 0
    store.close()


def test_a_shuffled_selection_writes_the_same_capture(tmp_path):
    """Table order (a sort) does not change the file: packets are written in capture order."""
    path = str(PICKED[0])
    store = ExchangeStore()
    store.add(Session([path]).exchanges())
    rows = list(range(0, len(store), 3))
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    write_pcap(store, rows, [path], str(a))
    write_pcap(store, rows[::-1], [path], str(b))
    assert a.read_bytes() == b.read_bytes() and a.stat().st_size > 24
    store.close()
