"""BPF capture filters: the default expression and compiling one for the kernel.

scapy is imported lazily, and only to compile filters through libpcap.
"""

from __future__ import annotations

import ctypes
import struct

from kanalyze.live.errors import LiveError

DLT_EN10MB, DLT_RAW = 1, 12  # link types a filter is compiled for
DEFAULT_BPF = "tcp"
BPF_RET_K = 0x06  # `ret #k`: accept k bytes of the packet (0: drop it)
BPF_LD_W_ABS = 0x20  # `ld [k]`: with k in the ancillary area, a field of the socket buffer
BPF_JEQ_K = 0x15  # `jeq #k, jt, jf`
SKF_AD_PKTTYPE = -0x1000 + 4  # SKF_AD_OFF + SKF_AD_PKTTYPE: the packet's direction and kind
PACKET_OUTGOING = 4
WHOLE_PACKET = 0xFFFFFFFF
_PROGRAMS: list[object] = []  # compiled programs: the kernel was handed pointers into them


def default_filter(ports: list[int] | tuple[int, ...] = ()) -> str:
    """The BPF filter used without --bpf: all TCP, or TCP on the given broker ports."""
    if not ports:
        return DEFAULT_BPF
    return " or ".join(f"tcp port {p}" for p in sorted(set(ports)))


def compile_bpf(expr: str, dlt: int, drop_outgoing: bool = False) -> bytes:
    """A `struct sock_fprog` for SO_ATTACH_FILTER, compiled by libpcap (through scapy).
    The returned bytes point into a program kept alive in `_PROGRAMS`. `drop_outgoing`:
    the kernel drops outgoing packets before the filter runs (see `skip_outgoing`)."""
    try:
        from scapy.arch.common import compile_filter
        from scapy.error import Scapy_Exception
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise LiveError("live capture needs scapy (pip install 'kanalyze[live]')") from e

    try:
        prog = compile_filter(expr, linktype=dlt)
    except (Scapy_Exception, ImportError, OSError) as e:
        raise LiveError(f"bad BPF filter {expr!r}: {e}") from e
    whole_packets(prog)
    _PROGRAMS.append(prog)
    if drop_outgoing:
        insns = skip_outgoing(prog)
        _PROGRAMS.append(insns)
        return struct.pack("HL", len(insns), ctypes.addressof(insns))
    return struct.pack("HL", prog.bf_len, ctypes.addressof(prog.bf_insns.contents))


def skip_outgoing(prog: object) -> ctypes.Array:
    """The program's instructions behind three that drop outgoing packets.

    On loopback every packet passes the tap twice, outgoing and incoming; like libpcap the
    capture keeps the incoming copy. Dropped in Python, the outgoing copy still took a place
    in the socket's buffer, a kernel copy and a `recvmsg` (2.3 calls a packet in a worker);
    dropped here it costs the kernel one comparison. Jumps are relative, so the original
    program is unchanged behind the prefix."""
    n = prog.bf_len  # type: ignore[attr-defined]
    insn = type(prog.bf_insns.contents)  # type: ignore[attr-defined]
    out = (insn * (n + 3))()
    out[0] = insn(BPF_LD_W_ABS, 0, 0, SKF_AD_PKTTYPE)
    out[1] = insn(BPF_JEQ_K, 0, 1, PACKET_OUTGOING)  # outgoing: next (drop); else skip it
    out[2] = insn(BPF_RET_K, 0, 0, 0)
    size = ctypes.sizeof(insn)
    ctypes.memmove(ctypes.byref(out, 3 * size), prog.bf_insns, n * size)  # type: ignore[attr-defined]
    return out


def whole_packets(prog: object) -> None:
    """Make every accepting `ret #k` of a compiled program keep the whole packet.

    libpcap (through scapy) compiles for a snap length of 65535, and in the kernel the filter's
    return value cuts the packet: loopback frames reach 65549 bytes (MTU 65536 plus the
    Ethernet header), so they lost their last 14 bytes before `--snaplen` was even applied."""
    insns = prog.bf_insns  # type: ignore[attr-defined]
    for i in range(prog.bf_len):  # type: ignore[attr-defined]
        ins = insns[i]
        if ins.code == BPF_RET_K and ins.k:
            ins.k = WHOLE_PACKET
