#!/usr/bin/env python3
"""A larger capture from a smaller one, for measuring how kanalyze's cost grows with size.

Writes `--copies` copies of a classic pcap (Ethernet, IPv4) one after the other: copy k has its
timestamps moved past the end of copy k-1 and the second octet of every IPv4 address raised by
k, so its connections are new ones (no 4-tuple repeats, no sequence numbers seen twice) with the
same traffic. IPv6 and other packets are copied as they are. Not a test: a tool for
docs/performance.md's scaling table.

    python benchmarks/scale_capture.py benchmarks/.data/bench-250mb-plain.pcap /tmp/1gb.pcap \\
        --copies 4
    python benchmarks/scale_capture.py benchmarks/.data/bench-250mb-plain.pcap /tmp/60mb.pcap \\
        --copies 1 --max-mb 60
"""

from __future__ import annotations

import argparse
import mmap
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kanalyze
from kanalyze.capture.pcap import PCAP_MAGICS  # noqa: E402


def scale(src: Path, dst: Path, copies: int, max_bytes: int | None = None) -> int:
    """Write the copies (stopping before `max_bytes`, when given: a prefix); returns the
    packets written."""
    with open(src, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    endian, ns_mult = PCAP_MAGICS[m[:4]]
    per_s = 1_000_000_000 // ns_mult  # timestamp fraction units per second
    linktype = struct.unpack_from(endian + "I", m, 20)[0] & 0x0FFFFFFF
    rec = struct.Struct(endian + "IIII")
    first = last = None
    pos = 24
    while pos + 16 <= len(m):  # the time span of one copy
        sec, frac, incl, _ = rec.unpack_from(m, pos)
        t = sec * per_s + frac
        first = t if first is None else first
        last = t
        pos += 16 + incl
    span_s = (last - first) // per_s + 1 if first is not None else 1
    written = 0
    with open(dst, "wb", buffering=1 << 22) as out:
        out.write(m[:24])
        for k in range(copies):
            pos = 24
            while pos + 16 <= len(m):
                sec, frac, incl, orig = rec.unpack_from(m, pos)
                if max_bytes is not None and out.tell() + 16 + incl > max_bytes:
                    return written
                data = bytearray(m[pos + 16 : pos + 16 + incl])
                if k and linktype == 1 and len(data) >= 34 and data[12:14] == b"\x08\x00":
                    data[27] = (data[27] + k) & 0xFF  # source address, second octet
                    data[31] = (data[31] + k) & 0xFF  # destination address, second octet
                out.write(rec.pack(sec + k * span_s, frac, incl, orig))
                out.write(data)
                written += 1
                pos += 16 + incl
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--max-mb", type=float, help="stop before the output reaches this size")
    args = ap.parse_args(argv)
    cap = None if args.max_mb is None else int(args.max_mb * 1e6)
    n = scale(args.src, args.dst, args.copies, cap)
    sys.stderr.write(f"{args.dst}: {n} packets, {args.dst.stat().st_size / 1e6:.0f} MB\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
