"""The capture package's split walker decodes blocks as the offline reader does."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, read_capture
from kanalyze.capture.split import RangeResult, iter_range, probe_layout, sync
from kanalyze.capture.writer import PcapWriter
from tests.support import packets as P


@dataclass
class _Layout:
    size: int = 0
    format: str = ""
    endian: str = "<"
    ns_mult: int = 1000
    linktype: int = -1
    snaplen: int = 0
    data_start: int = 0
    first_ts_ns: int = 0
    ifaces: list[list[int]] = field(default_factory=list)
    rank: int = 0


def _walk(
    path, start: int | None = None
) -> tuple[list[tuple[int, int, bytes]], RangeResult, _Layout]:
    info = _Layout(size=path.stat().st_size)
    with open(path, "rb") as f:
        probe_layout(info, f)
        result = RangeResult()
        got = [
            (p.ts_ns, p.linktype, bytes(p.data))
            for p in iter_range(
                f, info, info.data_start if start is None else start, info.size, result
            )
        ]
    return got, result, info


def _offline(path) -> list[tuple[int, int, bytes]]:
    return [(p.ts_ns, p.linktype, bytes(p.data)) for p in read_capture(str(path), CaptureStats())]


def test_pcapng_damaged_block_is_reported_like_offline(tmp_path):
    good = P.pcapng([([1, 101], [(0, 1.5, b"a" * 30), (1, 2.5, b"b" * 40)])])
    short_epb = struct.pack("<II", 6, 16) + b"\0" * 4 + struct.pack("<I", 16)  # body < 20 bytes
    tail = P.pcapng([([1], [(0, 3.5, b"c" * 10)])])[28 + 20 :]  # one more EPB, same section
    path = tmp_path / "d.pcapng"
    path.write_bytes(good + short_epb + tail)
    got, result, info = _walk(path)
    assert got == _offline(path) and len(got) == 3
    assert "enhanced packet block too short" in result.error
    assert info.first_ts_ns == 1_500_000_000 and info.ifaces[1][0] == 101


def test_pcap_ranges_and_sync(tmp_path):
    pkts = [(1_700_000_000 + i * 0.25, bytes([i]) * (50 + i)) for i in range(40)]
    path = tmp_path / "s.pcap"
    path.write_bytes(P.pcap(pkts, 101))
    whole, result, info = _walk(path)
    assert whole == _offline(path) and result.stop == info.size and not result.error
    with open(path, "rb") as f:
        cut = sync(f, info, info.size // 2)
    assert info.data_start < cut < info.size
    tail, _r, _i = _walk(path, cut)
    assert tail == whole[len(whole) - len(tail) :]  # the cut is a true record boundary


def test_writer_output_reads_back(tmp_path):
    path = tmp_path / "w.pcap"
    w = PcapWriter(str(path), 228)
    w.write(1_700_000_000_123_456_789, b"\x45" + b"\0" * 39)
    w.close()
    (pkt,) = read_capture(str(path))
    assert (pkt.ts_ns, pkt.linktype, len(pkt.data)) == (1_700_000_000_123_456_789, 228, 40)
