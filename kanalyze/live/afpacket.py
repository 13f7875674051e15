"""The Linux capture backend: an AF_PACKET socket on one interface (or `any`).

The BPF program is attached in the kernel (`SO_ATTACH_FILTER`), timestamps come from the
kernel in nanoseconds (`SO_TIMESTAMPNS`), a 256 KiB receive buffer per packet (loopback
segments reach 64 KiB), the kernel's packet/drop counters (`PACKET_STATISTICS`).
Ethernet-like interfaces (Ethernet, loopback) are read with their link header
(LINKTYPE_ETHERNET); others, and the `any` pseudo-interface, as Linux cooked capture
(LINKTYPE_LINUX_SLL). On loopback every packet passes the tap twice (outgoing and
incoming); like libpcap the outgoing copy is skipped: on `lo` by the filter in the kernel
(`bpf.skip_outgoing`), elsewhere (`any`, or no filter) here.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import time
from dataclasses import dataclass

from kanalyze.live.bpf import DEFAULT_BPF, DLT_EN10MB, DLT_RAW, compile_bpf
from kanalyze.live.errors import LiveError, LivePermissionError, permission_message

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
SNAPLEN = 262_144  # loopback TSO/GSO segments reach 64 KiB; keep headroom
_TIMESPEC = struct.Struct("@qq")


@dataclass(slots=True)
class CaptureCounters:
    """What the capture backend saw. `kernel_*` come from the socket (None if unavailable)."""

    packets: int = 0  # delivered to the engine
    bytes: int = 0
    truncated: int = 0  # longer than the snap length (kept cut)
    skipped_outgoing: int = 0  # loopback duplicates
    kernel_packets: int | None = None  # passed the filter, per the kernel
    kernel_drops: int | None = None  # dropped by the kernel (receive buffer full)
    interface_down: int = (
        0  # times the interface went down while capturing (capture resumes when it is up)
    )


class AfPacketSource:
    """A Linux AF_PACKET capture on one interface (or `any`), BPF-filtered in the kernel."""

    _timeout: float | None = -1.0  # the socket's timeout, set only when it changes

    def __init__(
        self,
        iface: str,
        bpf: str = DEFAULT_BPF,
        snaplen: int = SNAPLEN,
        buffer_bytes: int = 32 << 20,
    ) -> None:
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        self.counters = CaptureCounters()
        self.any = iface == "any"
        hatype = None if self.any else _iface_type(iface)
        self.cooked = self.any or hatype not in (ARPHRD_ETHER, ARPHRD_LOOPBACK)
        self.linktype = LINKTYPE_LINUX_SLL if self.cooked else LINKTYPE_ETHERNET
        # on loopback the kernel drops the outgoing copy of each packet (bpf.skip_outgoing)
        loop = hatype == ARPHRD_LOOPBACK
        program = (
            compile_bpf(bpf, DLT_RAW if self.cooked else DLT_EN10MB, drop_outgoing=loop)
            if bpf
            else None
        )
        try:
            sock = socket.socket(
                socket.AF_PACKET,
                socket.SOCK_DGRAM if self.cooked else socket.SOCK_RAW,
                socket.htons(ETH_P_ALL),
            )
        except PermissionError as e:
            raise LivePermissionError(permission_message(iface)) from e
        self.sock = sock
        try:
            if program is not None:
                sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            for opt in (33, socket.SO_RCVBUF):  # SO_RCVBUFFORCE (root) else SO_RCVBUF (capped)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
                    break
                except OSError:
                    continue
            if not self.any:
                sock.bind((iface, ETH_P_ALL))
        except OSError as e:
            sock.close()
            if e.errno == errno.ENODEV:
                raise LiveError(f"no such interface: {iface!r}") from e
            raise LiveError(f"cannot capture on {iface!r}: {e.strerror or e}") from e
        self._buf = bytearray(snaplen)
        self._view = memoryview(self._buf)
        self._anc = socket.CMSG_SPACE(_TIMESPEC.size)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self, timeout: float | None) -> tuple[int, bytes] | None:
        """One packet (kernel timestamp in ns, link-layer bytes), or None after `timeout` seconds
        without one (0: do not wait)."""
        sock = self.sock
        if timeout != self._timeout:  # a system call each time (the blocking mode)
            sock.settimeout(timeout)
            self._timeout = timeout
        while True:
            try:
                n, anc, _flags, addr = sock.recvmsg_into([self._buf], self._anc, socket.MSG_TRUNC)
            except (TimeoutError, BlockingIOError):
                return None
            except OSError as e:
                if e.errno == errno.ENETDOWN:
                    # reported once per down; the socket stays bound and the kernel delivers
                    # again when the interface comes back up
                    self.counters.interface_down += 1
                    return None
                if e.errno in (errno.ENODEV, errno.ENXIO):
                    raise LiveError(f"interface {self.iface} went away") from e
                raise
            ifname, proto, pkttype, hatype, haddr = addr
            if pkttype == PACKET_OUTGOING and hatype == ARPHRD_LOOPBACK:
                self.counters.skipped_outgoing += 1
                continue
            if not self.any and ifname != self.iface:
                continue  # arrived before bind()
            if n > self.snaplen:
                self.counters.truncated += 1
                n = self.snaplen
            ts = 0
            for level, kind, data in anc:
                if (
                    level == socket.SOL_SOCKET
                    and kind == SCM_TIMESTAMPNS
                    and len(data) >= _TIMESPEC.size
                ):
                    sec, nsec = _TIMESPEC.unpack_from(data)
                    ts = sec * 1_000_000_000 + nsec
            if not ts:
                ts = time.time_ns()
            payload = bytes(self._view[:n])
            if self.cooked:
                head = struct.pack(">HHH", pkttype, hatype, min(len(haddr), 8)) + haddr[:8].ljust(
                    8, b"\0"
                )
                payload = head + struct.pack(">H", proto) + payload
            self.counters.packets += 1
            self.counters.bytes += len(payload)
            return ts, payload

    def update_counters(self) -> None:
        """Fold the kernel's counters (reset on every read) into ours."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return
        got, drops = struct.unpack("@II", raw[:8])
        c = self.counters
        c.kernel_packets = (c.kernel_packets or 0) + got
        c.kernel_drops = (c.kernel_drops or 0) + drops

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.update_counters()
        self.sock.close()


def _iface_type(iface: str) -> int:
    try:
        with open(f"/sys/class/net/{iface}/type", encoding="ascii") as f:
            return int(f.read().strip())
    except FileNotFoundError:
        raise LiveError(f"no such interface: {iface!r}") from None
    except (OSError, ValueError):
        return -1


def open_source(
    iface: str, bpf: str, snaplen: int = SNAPLEN, buffer_bytes: int = 32 << 20
) -> AfPacketSource:
    """The capture backend for this platform."""
    if not hasattr(socket, "AF_PACKET"):
        raise LiveError("live capture is implemented for Linux (AF_PACKET) only")
    return AfPacketSource(iface, bpf, snaplen, buffer_bytes)
