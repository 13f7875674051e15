"""Writing captures: the pcap file `kanalyze live --write-pcap` saves what it captured to."""

from __future__ import annotations

import struct
from typing import BinaryIO

from kanalyze.capture.pcap import header_bytes

DEFAULT_SNAPLEN = 262_144


class PcapWriter:
    """A nanosecond pcap file written as packets arrive (flushed by `flush()`)."""

    def __init__(self, path: str, linktype: int, snaplen: int = DEFAULT_SNAPLEN) -> None:
        self.f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.f.write(header_bytes(linktype, snaplen))
        self._rec = struct.Struct("<IIII")

    def write(self, ts_ns: int, data: bytes) -> None:
        sec, ns = divmod(ts_ns, 1_000_000_000)
        self.f.write(self._rec.pack(sec, ns, len(data), len(data)))
        self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()
