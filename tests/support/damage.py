"""Damage corpus: variants of a real-client capture as operators hand them over.

Each variant is derived from a clean capture (the repo's ``captures/*.pcap``: classic pcap,
Ethernet) the way real captures go wrong:

* ``cut``: the capture starts at packet k (live sniffing started mid-stream: no handshake,
  the first frames of a direction may be cut anywhere);
* ``drop``: one packet is missing (tcpdump dropped it under load);
* ``reorder``: a window of packets is listed in reverse order;
* ``snaplen``: every packet is truncated to N captured bytes (``tcpdump -s N``), the original
  length kept in the record header;
* ``remap``: the broker port is rewritten to one above the ephemeral range, so every client
  port is lower than the broker's;
* ``remapcut``: both at once, a mid-stream start where "the lower port is the broker" is wrong
  for every connection (the bytes must decide, even when only the broker's side speaks).

Used by the tests (variants written into a tmp dir at test time) and by hand::

    python -m tests.support.damage captures/lib_acks.pcap OUTDIR [--broker-port 19095]
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ABOVE_EPHEMERAL = 65000  # Linux's ephemeral range ends at 60999: every client port is lower


@dataclass(frozen=True, slots=True)
class Record:
    """One pcap record: timestamp, the bytes captured and the packet's length on the wire."""

    ts_sec: int
    ts_frac: int
    data: bytes
    orig_len: int


@dataclass(frozen=True, slots=True)
class Pcap:
    header: bytes  # the 24-byte global header, kept as it is
    endian: str
    records: tuple[Record, ...]


def read_pcap(path: Path) -> Pcap:
    raw = path.read_bytes()
    magic = raw[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a classic pcap file")
    rec = struct.Struct(endian + "IIII")
    pos, records = 24, []
    while pos + 16 <= len(raw):
        sec, frac, incl, orig = rec.unpack_from(raw, pos)
        pos += 16
        records.append(Record(sec, frac, raw[pos : pos + incl], orig))
        pos += incl
    return Pcap(raw[:24], endian, tuple(records))


def write_pcap(path: Path, pcap: Pcap, records: list[Record], snaplen: int | None = None) -> Path:
    header = pcap.header
    if snaplen is not None:
        header = header[:16] + struct.pack(pcap.endian + "I", snaplen) + header[20:]
    rec = struct.Struct(pcap.endian + "IIII")
    out = bytearray(header)
    for r in records:
        out += rec.pack(r.ts_sec, r.ts_frac, len(r.data), r.orig_len) + r.data
    path.write_bytes(bytes(out))
    return path


def _tcp_offset(data: bytes) -> int | None:
    """Offset of the TCP header in an Ethernet frame (IPv4 or IPv6, no VLAN), or None."""
    if len(data) < 14:
        return None
    etype = int.from_bytes(data[12:14], "big")
    if etype == 0x0800 and len(data) >= 34 and data[23] == 6:
        return 14 + (data[14] & 0x0F) * 4
    if etype == 0x86DD and len(data) >= 54 and data[20] == 6:
        return 54
    return None


def ports(data: bytes) -> tuple[int, int] | None:
    off = _tcp_offset(data)
    if off is None or len(data) < off + 4:
        return None
    return int.from_bytes(data[off : off + 2], "big"), int.from_bytes(
        data[off + 2 : off + 4], "big"
    )


def has_payload(r: Record) -> bool:
    """Whether the packet carries TCP payload (by the IP length, so snaplen does not matter)."""
    off = _tcp_offset(r.data)
    if off is None or len(r.data) < off + 13:
        return False
    doff = (r.data[off + 12] >> 4) * 4
    if r.data[12:14] == b"\x08\x00":
        total = 14 + int.from_bytes(r.data[16:18], "big")
    else:
        total = 54 + int.from_bytes(r.data[18:20], "big")
    return total > off + doff


def closes(r: Record) -> bool:
    """Whether the packet carries FIN or RST."""
    off = _tcp_offset(r.data)
    return off is not None and len(r.data) > off + 13 and bool(r.data[off + 13] & 0x05)


def remap_port(r: Record, old: int, new: int) -> Record:
    """The record with TCP port `old` rewritten to `new` on both sides (checksums left stale:
    analyzers must not drop packets on checksum grounds, real captures have bad ones too)."""
    off = _tcp_offset(r.data)
    if off is None or len(r.data) < off + 4:
        return r
    data = bytearray(r.data)
    for at in (off, off + 2):
        if int.from_bytes(data[at : at + 2], "big") == old:
            data[at : at + 2] = new.to_bytes(2, "big")
    return Record(r.ts_sec, r.ts_frac, bytes(data), r.orig_len)


def cut(recs: tuple[Record, ...], k: int) -> list[Record]:
    return list(recs[k:])


def drop(recs: tuple[Record, ...], i: int) -> list[Record]:
    return list(recs[:i]) + list(recs[i + 1 :])


def reorder(recs: tuple[Record, ...], i: int, width: int) -> list[Record]:
    """Packets i..i+width-1 listed in reverse order (timestamps travel with them)."""
    return list(recs[:i]) + list(reversed(recs[i : i + width])) + list(recs[i + width :])


def snap(recs: tuple[Record, ...], n: int) -> list[Record]:
    return [Record(r.ts_sec, r.ts_frac, r.data[:n], r.orig_len) for r in recs]


def payload_indexes(pcap: Pcap) -> list[int]:
    return [i for i, r in enumerate(pcap.records) if has_payload(r)]


def variants(src: Path, out: Path, broker_port: int, sample: int = 8) -> Iterator[tuple[str, Path]]:
    """(name, path) of the damaged variants of `src`, written under `out`. `sample` bounds the
    cut points, dropped packets and reorder windows (spread evenly over the payload packets)."""
    pcap = read_pcap(src)
    recs = pcap.records
    stem = src.name.removesuffix(".pcap")
    data_at = payload_indexes(pcap)
    step = max(1, len(data_at) // sample)
    picks = data_at[::step][:sample]
    for k in picks:
        yield f"cut{k}", write_pcap(out / f"{stem}.cut{k}.pcap", pcap, cut(recs, k))
    for i in picks:
        yield f"drop{i}", write_pcap(out / f"{stem}.drop{i}.pcap", pcap, drop(recs, i))
    for i in picks:
        yield f"reorder{i}", write_pcap(out / f"{stem}.reorder{i}.pcap", pcap, reorder(recs, i, 3))
    for n in (96, 200, 512):
        yield f"snap{n}", write_pcap(out / f"{stem}.snap{n}.pcap", pcap, snap(recs, n), snaplen=n)
    moved = [remap_port(r, broker_port, ABOVE_EPHEMERAL) for r in recs]
    yield "remap", write_pcap(out / f"{stem}.remap.pcap", pcap, moved)
    for k in picks:
        yield f"remapcut{k}", write_pcap(out / f"{stem}.remapcut{k}.pcap", pcap, moved[k:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("capture", type=Path)
    p.add_argument("outdir", type=Path)
    p.add_argument(
        "--broker-port", type=int, default=None, help="default: from the .truth.json next to it"
    )
    p.add_argument("--sample", type=int, default=8)
    args = p.parse_args()
    port = args.broker_port
    if port is None:
        import json

        truth = args.capture.with_name(args.capture.name.removesuffix(".pcap") + ".truth.json")
        port = json.loads(truth.read_text())["broker"]["port"]
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name, path in variants(args.capture, args.outdir, port, args.sample):
        print(name, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
