"""Capture formats in one package: reading pcap and pcapng (plain, gzip-compressed or on
stdin), writing pcap, and cutting a file into independently readable byte ranges (Spark).

    packets.py  Packet, CaptureStats, CaptureError: what every reader produces
    pcap.py     the pcap global header, records and magics; the streaming pcap reader
    pcapng.py   sections, interfaces and packet blocks; the streaming pcapng reader
    files.py    opening files (gzip, stdin), read_capture, read_captures (merge by time)
    writer.py   PcapWriter (`kanalyze live --write-pcap`)
    split.py    probe, sync points and range walks over the same record decoding
    source.py   where a capture's bytes come from: a local file or a URI through an installed
                remote reader (the byte-range planner's and range reader's opener)
"""

from kanalyze.capture.files import GZIP_MAGIC, open_capture, read_capture, read_captures
from kanalyze.capture.packets import BLOCK, MAX_RECORD, CaptureError, CaptureStats, Packet
from kanalyze.capture.pcap import PCAP_MAGICS
from kanalyze.capture.pcapng import SHB as PCAPNG_SHB

__all__ = [
    "BLOCK",
    "GZIP_MAGIC",
    "MAX_RECORD",
    "PCAPNG_SHB",
    "PCAP_MAGICS",
    "CaptureError",
    "CaptureStats",
    "Packet",
    "open_capture",
    "read_capture",
    "read_captures",
]
