"""The packets carrying a set of exchanges, copied from the input captures into a pcap file
(Wireshark opens the selection the TUI found). Headless: no textual import.

Each selected exchange's request and response frame was carried by packets first_pkt..last_pkt
(the input's frame numbers); those of its connection (either direction) are kept, other
connections' packets in between are not. The input is read again: packets are not kept."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

from kanalyze.capture import read_captures
from kanalyze.capture.writer import PcapWriter
from kanalyze.flows import ETHERNET, FlowStats, decode_segment, format_endpoint
from kanalyze.tui.store import ExchangeStore


def packet_spans(
    store: ExchangeStore, rows: Iterable[int]
) -> list[tuple[int, int, frozenset[str]]]:
    """(first, last, endpoints) for every frame of the rows, sorted and merged per connection."""
    spans: dict[frozenset[str], list[tuple[int, int]]] = {}
    for i in rows:
        conn = store.row(i).conn
        key = frozenset((conn.client, conn.broker))
        spans.setdefault(key, []).extend(store.frames(i))
    out: list[tuple[int, int, frozenset[str]]] = []
    for key, ss in spans.items():
        ss.sort()
        merged: list[list[int]] = []
        for a, b in ss:
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out.extend((a, b, key) for a, b in merged)
    out.sort(key=lambda s: s[0])
    return out


def write_pcap(
    store: ExchangeStore,
    rows: Sequence[int],
    paths: Sequence[str],
    out: str,
    cancelled: Callable[[], bool] = lambda: False,
) -> int:
    """Write the packets of `rows` from `paths` to `out`; the number of packets written.
    Packets of another link type than the first one kept are skipped (pcap has one)."""
    spans = packet_spans(store, rows)
    if not spans:
        PcapWriter(out, ETHERNET).close()  # a valid, empty capture
        return 0
    starts = [s[0] for s in spans]
    last = max(s[1] for s in spans)
    stats = FlowStats()
    writer: PcapWriter | None = None
    linktype = None
    n = 0
    try:
        for pkt in read_captures(paths):
            if pkt.no > last or cancelled():
                break
            k = bisect_right(starts, pkt.no)
            # spans may overlap across connections: look back over those starting before
            hit = False
            for a, b, ends in reversed(spans[max(0, k - 64) : k]):
                if a <= pkt.no <= b:
                    seg = decode_segment(pkt.linktype, pkt.data, stats)
                    if (
                        seg is not None
                        and {
                            format_endpoint(seg.src, seg.sport),
                            format_endpoint(seg.dst, seg.dport),
                        }
                        == ends
                    ):
                        hit = True
                        break
            if not hit:
                continue
            if writer is None:
                linktype = pkt.linktype
                writer = PcapWriter(out, linktype)
            if pkt.linktype != linktype:
                continue
            writer.write(pkt.ts_ns, pkt.data)
            n += 1
    finally:
        if writer is None:
            writer = PcapWriter(out, ETHERNET)
        writer.close()
    return n
