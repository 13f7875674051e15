"""Live capture: packets from a network interface into the same engine as offline mode.

Only `kanalyze live` and `kanalyze tui --live` import this package.

    errors.py    LiveError, LivePermissionError: messages meant for the user
    bpf.py       the default filter; compiling a filter for the kernel (scapy, lazily)
    afpacket.py  the Linux backend: AF_PACKET socket, kernel timestamps and drop counters
    session.py   LiveSession: the engine fed from a source, housekeeping, subscribers
"""

from kanalyze.live.afpacket import SNAPLEN, AfPacketSource, CaptureCounters, open_source
from kanalyze.live.bpf import DEFAULT_BPF, compile_bpf, default_filter
from kanalyze.live.errors import LiveError, LivePermissionError, permission_message
from kanalyze.live.session import LiveOptions, LiveSession, LiveStats, Source

__all__ = [
    "DEFAULT_BPF",
    "SNAPLEN",
    "AfPacketSource",
    "CaptureCounters",
    "LiveError",
    "LiveOptions",
    "LivePermissionError",
    "LiveSession",
    "LiveStats",
    "Source",
    "compile_bpf",
    "default_filter",
    "open_source",
    "permission_message",
]
