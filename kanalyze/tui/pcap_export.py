"""The packets carrying a set of exchanges as a capture file (Wireshark opens the selection the
TUI found). Headless: no textual import.

The TUI writes exactly what `kanalyze export -Y ... -w out.pcap` writes for the same exchanges:
it runs the same code (kanalyze/export/pcap.py: the engine over the inputs again, each packet
cut down to the selected frames' bytes, the connections' SYN/SYN-ACK kept) and selects the
exchanges whose frames are the rows' frames. A frame is named by its connection, direction and
stream offset, which the engine assigns alike on every run with the same options."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kanalyze.capture import CaptureStats
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.export.pcap import export_pcap
from kanalyze.tui.rows import NO_MESSAGE
from kanalyze.tui.store import ExchangeStore

Key = tuple[int, int, int]  # connection id, request and response stream offsets (-1: none)


class ExportCancelled(Exception):
    """The app is exiting: the export stopped."""


def exchange_key(ex: Exchange) -> Key:
    req, resp = ex.request, ex.response
    return (
        ex.conn.id,
        -1 if req is None else req.pdu.offset,
        -1 if resp is None else resp.pdu.offset,
    )


def row_keys(store: ExchangeStore, rows: Iterable[int]) -> set[Key]:
    """The key of every row (frame headers read back, no frame data)."""
    spill, cols = store.spill, store.rows
    out = set()
    for i in rows:
        req, resp = cols.req[i], cols.resp[i]
        out.add(
            (
                cols.conn[i],
                -1 if req == NO_MESSAGE else spill.stream_offset(req),
                -1 if resp == NO_MESSAGE else spill.stream_offset(resp),
            )
        )
    return out


def write_pcap(
    store: ExchangeStore,
    rows: Sequence[int],
    paths: Sequence[str],
    out: str,
    opts: EngineOptions | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[int, int]:
    """Write the packets of `rows` from `paths` to `out` as `export -w` does; (exchanges found,
    packets written). `opts` must be the options the store was indexed with."""
    wanted = row_keys(store, rows)

    def keep(ex: Exchange) -> bool:
        if cancelled():
            raise ExportCancelled
        return exchange_key(ex) in wanted

    return export_pcap(out, paths, opts or EngineOptions(), keep, CaptureStats())
