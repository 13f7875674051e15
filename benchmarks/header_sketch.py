#!/usr/bin/env python3
"""The header-only floor: how fast plain Python walks a classic pcap to Kafka frame headers.

struct over mmap, Ethernet + IPv4/IPv6 TCP only, each direction's bytes taken in order
(out-of-order and retransmitted segments are dropped, not reassembled), and for each frame the
size prefix and the 8 bytes after it (api key, version, correlation id) read, the rest jumped
over. No correlation, no output: it prints the frame count. A floor, not a competitor: it
does a fraction of what `export --header-only` does (`bench_jobs.py` prints both).
"""

from __future__ import annotations

import mmap
import struct
import sys


def walk(path: str) -> int:
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    endian = "<" if m[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    rec = struct.Struct(endian + "IIII").unpack_from
    u16 = struct.Struct("!H").unpack_from
    tcp = struct.Struct("!HHIIB").unpack_from
    size_of = struct.Struct("!i").unpack_from
    head = struct.Struct("!hhi").unpack_from
    # per direction: [next seq or None, bytes left in the current frame, carried header bytes]
    flows: dict[bytes, list] = {}
    frames = 0
    pos, end_all = 24, len(m)
    while pos + 16 <= end_all:
        _s, _f, incl, _o = rec(m, pos)
        p = pos + 16
        pos = p + incl
        eth = u16(m, p + 12)[0]
        if eth == 0x0800:
            ip = p + 14
            ihl = (m[ip] & 15) * 4
            if m[ip + 9] != 6:
                continue
            end = ip + u16(m, ip + 2)[0]
            t = ip + ihl
            key = m[ip + 12 : ip + 20]
        elif eth == 0x86DD:
            ip = p + 14
            if m[ip + 6] != 6:
                continue
            end = ip + 40 + u16(m, ip + 4)[0]
            t = ip + 40
            key = m[ip + 8 : ip + 40]
        else:
            continue
        sport, dport, seq, _ack, off = tcp(m, t)
        data = t + (off >> 4) * 4
        n = end - data
        if n <= 0:
            continue
        key += sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
        st = flows.get(key)
        if st is None:
            st = flows[key] = [seq, 0, b""]
        if seq != st[0]:
            continue  # not the next bytes in order: dropped (a floor does not reassemble)
        st[0] = (seq + n) & 0xFFFFFFFF
        left, carry = st[1], st[2]
        i = data
        while i < end:
            if left:
                step = min(left, end - i)
                left -= step
                i += step
                continue
            need = 12 - len(carry)
            if end - i < need:
                carry += m[i:end]
                i = end
                break
            hdr = carry + m[i : i + need] if carry else m[i : i + 12]
            carry = b""
            size = size_of(hdr, 0)[0]
            head(hdr, 4)
            frames += 1
            left = max(size - 8, 0)
            i += need
        st[1], st[2] = left, carry
    m.close()
    return frames


if __name__ == "__main__":
    print(walk(sys.argv[1]))
