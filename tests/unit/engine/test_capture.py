"""Capture readers: every container variant yields the same packets with the right times."""

from __future__ import annotations

import pytest

from kanalyze.capture import CaptureError, CaptureStats, read_capture, read_captures
from tests.support import packets as P

PKTS = [(1_700_000_000.000001, b"\x45" + b"a" * 39), (1_700_000_001.5, b"\x45" + b"b" * 59)]


@pytest.mark.parametrize("nanos", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_pcap_variants(tmp_path, nanos, big):
    f = tmp_path / "x.pcap"
    f.write_bytes(P.pcap(PKTS, linktype=101, nanos=nanos, big_endian=big))
    got = list(read_capture(str(f)))
    assert [p.data for p in got] == [d for _, d in PKTS]
    assert [p.file_no for p in got] == [1, 2]
    assert got[0].linktype == 101
    assert abs(got[0].ts_ns - 1_700_000_000_000_001_000) < 1000
    assert got[1].ts_ns == 1_700_000_001_500_000_000


def test_gzip_pcap(tmp_path):
    f = tmp_path / "x.pcap.gz"
    f.write_bytes(P.gz(P.pcap(PKTS)))
    assert [p.data for p in read_capture(str(f))] == [d for _, d in PKTS]


def test_pcapng_sections_and_interfaces(tmp_path):
    f = tmp_path / "x.pcapng"
    f.write_bytes(
        P.pcapng(
            [([1, 101], [(0, 1.0, b"e" * 20), (1, 2.0, b"r" * 30)]), ([113], [(0, 3.0, b"s" * 40)])]
        )
    )
    got = list(read_capture(str(f)))
    assert [(p.linktype, len(p.data)) for p in got] == [(1, 20), (101, 30), (113, 40)]
    assert [p.ts_ns for p in got] == [1_000_000_000, 2_000_000_000, 3_000_000_000]


def test_merge_in_time_order(tmp_path):
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    a.write_bytes(P.pcap([(1.0, b"1"), (3.0, b"3")]))
    b.write_bytes(P.pcap([(2.0, b"2"), (4.0, b"4")]))
    got = list(read_captures([str(b), str(a)]))
    assert [p.data for p in got] == [b"1", b"2", b"3", b"4"]
    assert [p.no for p in got] == [1, 2, 3, 4]
    assert [(p.file_index, p.file_no) for p in got] == [(1, 1), (0, 1), (1, 2), (0, 2)]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty"),
        (b"hello world, this is text\n", "not a pcap"),
        (bytes(range(256)) * 4, "not a pcap"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "truncated"),
    ],
)
def test_not_a_capture(tmp_path, content, words):
    f = tmp_path / "bad"
    f.write_bytes(content)
    with pytest.raises(CaptureError, match=words):
        list(read_capture(str(f)))


def test_missing_file():
    with pytest.raises(CaptureError, match="cannot open"):
        list(read_capture("/nonexistent/file.pcap"))


def test_truncated_record_is_a_diagnostic(tmp_path):
    data = P.pcap(PKTS)
    f = tmp_path / "t.pcap"
    f.write_bytes(data[:-10])
    stats = CaptureStats()
    got = list(read_capture(str(f), stats))
    assert len(got) == 1
    assert len(stats.diagnostics) == 1
    assert "truncated packet record" in stats.diagnostics[0][1].message


def test_absurd_record_length(tmp_path):
    data = bytearray(P.pcap(PKTS))
    data[24 + 8 : 24 + 12] = (0x7FFFFFFF).to_bytes(4, "little")
    f = tmp_path / "t.pcap"
    f.write_bytes(bytes(data))
    stats = CaptureStats()
    assert list(read_capture(str(f), stats)) == []
    assert "claims" in stats.diagnostics[0][1].message


def test_every_prefix_never_raises_unexpectedly(tmp_path):
    data = P.pcapng([([1], [(0, 1.0, b"e" * 20), (0, 2.0, b"r" * 30)])])
    for n in range(len(data) + 1):
        f = tmp_path / "p"
        f.write_bytes(data[:n])
        stats = CaptureStats()
        try:
            got = list(read_capture(str(f), stats))
        except CaptureError:
            assert n < 28  # only a missing/short section header is fatal
            continue
        assert len(got) <= 2


def _read_all(path, monkeypatch, mapped: bool, views: bool):
    if mapped:
        monkeypatch.setenv("KANALYZE_MMAP", "1")
    else:
        monkeypatch.delenv("KANALYZE_MMAP", raising=False)
    stats = CaptureStats()
    got = [
        (p.no, p.ts_ns, p.linktype, bytes(p.data), p.file_no)
        for p in read_capture(str(path), stats, views=views)
    ]
    return got, stats.packets, stats.bytes, [(n, d.offset, d.message) for n, d in stats.diagnostics]


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("cut", [None, 24 + 16 + 20, 24 + 10, 24 + 16 + 40 + 16 + 3, 30])
def test_mapped_pcap_reads_as_streamed(tmp_path, monkeypatch, views, cut):
    """A regular pcap file is mapped rather than read in blocks: the same packets, counts and
    damage diagnostics (truncated record header, truncated record) either way."""
    whole = P.pcap(PKTS, linktype=101)
    f = tmp_path / "x.pcap"
    f.write_bytes(whole if cut is None else whole[:cut])
    mapped = _read_all(f, monkeypatch, True, views)
    assert mapped == _read_all(f, monkeypatch, False, views)
    # records end at byte 80 and 156 of the file
    assert len(mapped[0]) == (2 if cut is None else sum(1 for c in (80, 156) if c <= cut))
    assert bool(mapped[3]) == (cut is not None)


def test_mapped_pcap_absurd_record(tmp_path, monkeypatch):
    whole = bytearray(P.pcap(PKTS, linktype=101))
    whole[24 + 8 : 24 + 12] = (300 * 1024 * 1024).to_bytes(4, "little")
    f = tmp_path / "x.pcap"
    f.write_bytes(bytes(whole))
    mapped = _read_all(f, monkeypatch, True, True)
    assert mapped == _read_all(f, monkeypatch, False, True)
    assert "claims" in mapped[3][0][2]


BIG = [(1.0 + i, bytes([0x45]) + bytes([i]) * (10 + 37 * i)) for i in range(12)]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("cut", [None, 24 + 16 + 5, 500, 1200])
def test_block_reader_keeps_kept_views_intact(tmp_path, monkeypatch, gz, cut):
    """Blocks smaller than most records (each cut record completed on its own) and every
    packet view kept by the consumer: each still reads as its record, with the damage
    diagnostics of the mapped reader."""
    import kanalyze.capture.pcap as pcap_mod

    whole = P.pcap(BIG, linktype=101)
    f = tmp_path / "x.pcap"
    f.write_bytes(whole if cut is None else whole[:cut])
    mapped = _read_all(f, monkeypatch, True, False)
    monkeypatch.setattr(pcap_mod, "BLOCK", 64)
    if gz:
        f = tmp_path / "x.pcap.gz"
        f.write_bytes(P.gz(whole if cut is None else whole[:cut]))
    monkeypatch.delenv("KANALYZE_MMAP", raising=False)
    stats = CaptureStats()
    kept = list(read_capture(str(f), stats, views=True))
    assert all(isinstance(p.data, memoryview) for p in kept)
    got = [(p.no, p.ts_ns, p.linktype, bytes(p.data), p.file_no) for p in kept]
    diags = [(d.offset, d.message) for _n, d in stats.diagnostics]
    assert (got, stats.packets, stats.bytes) == mapped[:3]
    assert diags == [(offset, message) for _n, offset, message in mapped[3]]
    assert len(got) == 12 if cut is None else diags
