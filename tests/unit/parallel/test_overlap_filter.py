"""The overlap's walk (`range_plan.read_overlap`) finds every packet of the connections it
follows: untagged Ethernet IPv4 by its TCP ports read in place, anything else by searching
the record's head for the port pairs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kanalyze.flows import FlowStats, decode_segment
from kanalyze.parallel.range_plan import Wanted, conn_key, plan_ranges, read_overlap, read_range

CAPTURES = Path(__file__).resolve().parents[3] / "captures"


def _keyed(packets) -> list[tuple[int, tuple]]:  # noqa: ANN001
    out = []
    for p in packets:
        seg = decode_segment(p.linktype, p.data, FlowStats())
        if seg is not None:
            out.append((p.no, conn_key((seg.src, seg.sport, seg.dst, seg.dport))))
    return out


@pytest.mark.parametrize("name", ["kp_codecs.pcap", "aio_group.pcap", "crafted/ethernet_ipv6.pcap",
                                  "crafted/linux_sll.pcap", "crafted/raw_ipv4.pcap"])
def test_overlap_finds_every_packet_of_the_followed(name: str) -> None:
    ranges = plan_ranges([str(CAPTURES / name)], 2, 400)
    assert ranges is not None and len(ranges) > 2
    first = ranges[0]
    after = [k for r in ranges[1:] for k in _keyed(read_range(r))]
    conns = sorted({k for _no, k in after})
    for some in (conns[:1], conns[1::2] or conns, conns):
        wanted = Wanted()
        wanted.follow(some)
        got = [(no, k) for no, k in _keyed(read_overlap(first, wanted)) if k in some]
        assert got == [(no, k) for no, k in after if k in some]
        assert got


def test_ports_read_in_place_only_without_ip_options() -> None:
    """The in-place read gives the ports of an untagged Ethernet IPv4 header of 20 bytes."""
    from kanalyze.parallel.range_plan import _ETH_IP4_TCP

    frame = bytes(12) + b"\x08\x00" + b"\x45" + bytes(5) + b"\x40\x00" + b"\x40\x06" \
        + bytes(10) + struct.pack(">HH", 41189, 9092) + bytes(20)
    assert _ETH_IP4_TCP.unpack_from(frame, 0) == (0x0800, 0x45, 0x4000, 6,
                                                  struct.pack(">HH", 41189, 9092))
