"""The spill file: frames go to disk and come back byte for byte; nothing is left behind."""

from __future__ import annotations

import os
import random

import pytest

from kanalyze.framing import Pdu
from kanalyze.tui import spill as spill_mod
from kanalyze.tui.spill import FrameSpill, SpillClosed


def pdus(n: int, seed: int = 7, big: int = 5000) -> list[Pdu]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        data = rnd.randbytes(rnd.choice((0, 1, 8, 100, big)))
        out.append(
            Pdu(
                data,
                len(data) + rnd.randint(0, 3),
                rnd.randint(0, 2**40),
                i,
                10**18 + i,
                i + rnd.randint(0, 5),
                10**18 + 2 * i,
                rnd.choice((0, 0, 3)),
            )
        )
    return out


def test_every_pdu_field_is_spilled():
    """The spill header lists Pdu's fields by hand: a new field must be added there too."""
    assert list(Pdu._fields) == [
        "data",
        "size",
        "offset",
        "first_pkt",
        "first_ts",
        "last_pkt",
        "last_ts",
        "missing",
    ]


@pytest.mark.parametrize("flush", [0, 300, 1 << 20])
def test_round_trip_from_file_and_buffer(monkeypatch, tmp_path, flush):
    monkeypatch.setattr(spill_mod, "FLUSH_BYTES", flush)
    monkeypatch.setattr(spill_mod, "WINDOW_BYTES", 1000)  # frames larger than the window too
    sp = FrameSpill(str(tmp_path))
    src = pdus(300)
    offs = [sp.put(p) for p in src]
    order = list(range(len(src)))
    random.Random(1).shuffle(order)
    assert all(sp.get(offs[i]) == src[i] for i in order)
    rd = sp.reader()
    assert [rd.get(o) for o in offs] == src
    assert sp.size == sum(spill_mod.HEAD_SIZE + len(p.data) for p in src)
    sp.close()


def test_file_has_no_name_and_close_frees_it(tmp_path):
    sp = FrameSpill(str(tmp_path))
    off = sp.put(pdus(1)[0])
    sp._flush()
    assert (
        os.listdir(tmp_path) == []
    )  # unlinked (or O_TMPFILE): gone with the process, whatever happens
    fd = sp._fd
    sp.close()
    sp.close()  # idempotent
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(SpillClosed):
        sp.get(off)
    with pytest.raises(SpillClosed):
        sp.put(pdus(1)[0])
