"""BPF capture filters: the default expression and compiling one for the kernel.

scapy is imported lazily, and only to compile filters through libpcap.
"""

from __future__ import annotations

import struct

from kanalyze.live.errors import LiveError

DLT_EN10MB, DLT_RAW = 1, 12  # link types a filter is compiled for
DEFAULT_BPF = "tcp"
_PROGRAMS: list[object] = []  # compiled programs: the kernel was handed pointers into them


def default_filter(ports: list[int] | tuple[int, ...] = ()) -> str:
    """The BPF filter used without --bpf: all TCP, or TCP on the given broker ports."""
    if not ports:
        return DEFAULT_BPF
    return " or ".join(f"tcp port {p}" for p in sorted(set(ports)))


def compile_bpf(expr: str, dlt: int) -> bytes:
    """A `struct sock_fprog` for SO_ATTACH_FILTER, compiled by libpcap (through scapy).
    The returned bytes point into a program kept alive in `_PROGRAMS`."""
    try:
        from scapy.arch.common import compile_filter
        from scapy.error import Scapy_Exception
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise LiveError("live capture needs scapy (pip install 'kanalyze[live]')") from e
    import ctypes

    try:
        prog = compile_filter(expr, linktype=dlt)
    except (Scapy_Exception, ImportError, OSError) as e:
        raise LiveError(f"bad BPF filter {expr!r}: {e}") from e
    _PROGRAMS.append(prog)
    return struct.pack("HL", prog.bf_len, ctypes.addressof(prog.bf_insns.contents))
