"""Live capture: packets from a network interface into the same engine as offline mode.

Only `kanalyze live` (and later `kanalyze tui --live`) imports this module; scapy
is imported lazily, and only to compile BPF filters through libpcap.

Backend (Linux): an AF_PACKET socket bound to the interface, the BPF program
attached in the kernel (`SO_ATTACH_FILTER`), kernel timestamps in nanoseconds
(`SO_TIMESTAMPNS`), a 256 KiB receive buffer per packet (loopback segments
reach 64 KiB), the kernel's packet/drop counters (`PACKET_STATISTICS`).
Ethernet-like interfaces (Ethernet, loopback) are read with their link header
(LINKTYPE_ETHERNET); others, and the `any` pseudo-interface, as Linux cooked
capture (LINKTYPE_LINUX_SLL). On loopback every packet passes the tap twice
(outgoing and incoming); like libpcap the outgoing copy is skipped.

`LiveSession` drives the engine: it feeds packets, expires requests pending
longer than the timeout (emitted as `no_response`), closes idle connections
(memory stays flat over hours), and hands each exchange to its subscribers in
start-time order. A front end that runs in another thread (the TUI) subscribes
an `ExchangeQueue`: bounded, never blocks the capture, counts what it drops.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kanalyze.capture import Packet
from kanalyze.capture.writer import PcapWriter
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions

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
DLT_EN10MB, DLT_RAW = 1, 12  # for compiling the filter
SNAPLEN = 262_144  # loopback TSO/GSO segments reach 64 KiB; keep headroom
DEFAULT_BPF = "tcp"
_TIMESPEC = struct.Struct("@qq")


class LiveError(Exception):
    """A problem starting or running a live capture, with a message meant for the user."""


class LivePermissionError(LiveError):
    """Capturing needs privileges this process does not have."""


def permission_message(iface: str) -> str:
    return (
        f"capturing on {iface!r} needs root or the CAP_NET_RAW capability "
        "(run with sudo, or grant it: sudo setcap cap_net_raw,cap_net_admin=eip <python binary>)"
    )


def default_filter(ports: list[int] | tuple[int, ...] = ()) -> str:
    """The BPF filter used without --bpf: all TCP, or TCP on the given broker ports."""
    if not ports:
        return DEFAULT_BPF
    return " or ".join(f"tcp port {p}" for p in sorted(set(ports)))


# -- capture backends ---------------------------------------------------------------------------


@dataclass(slots=True)
class CaptureCounters:
    """What the capture backend saw. `kernel_*` come from the socket (None if unavailable)."""

    packets: int = 0  # delivered to the engine
    bytes: int = 0
    truncated: int = 0  # longer than the snap length (kept cut)
    skipped_outgoing: int = 0  # loopback duplicates
    kernel_packets: int | None = None  # passed the filter, per the kernel
    kernel_drops: int | None = None  # dropped by the kernel (receive buffer full)
    interface_down: int = 0  # times the interface went down while capturing (capture resumes when it is up)


class AfPacketSource:
    """A Linux AF_PACKET capture on one interface (or `any`), BPF-filtered in the kernel."""

    def __init__(self, iface: str, bpf: str = DEFAULT_BPF, snaplen: int = SNAPLEN, buffer_bytes: int = 32 << 20) -> None:
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        self.counters = CaptureCounters()
        self.any = iface == "any"
        hatype = None if self.any else _iface_type(iface)
        self.cooked = self.any or hatype not in (ARPHRD_ETHER, ARPHRD_LOOPBACK)
        self.linktype = LINKTYPE_LINUX_SLL if self.cooked else LINKTYPE_ETHERNET
        program = compile_bpf(bpf, DLT_RAW if self.cooked else DLT_EN10MB) if bpf else None
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM if self.cooked else socket.SOCK_RAW, socket.htons(ETH_P_ALL))
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
        sock.settimeout(timeout)
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
                if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(data)
                    ts = sec * 1_000_000_000 + nsec
            if not ts:
                ts = time.time_ns()
            payload = bytes(self._view[:n])
            if self.cooked:
                head = struct.pack(">HHH", pkttype, hatype, min(len(haddr), 8)) + haddr[:8].ljust(8, b"\0")
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


_PROGRAMS: list[object] = []


# -- hooks for front ends -----------------------------------------------------------------------


class ExchangeQueue:
    """A bounded, thread-safe hand-off for a front end running in another thread (the TUI).

    Subscribe it with `LiveSession.subscribe(queue.put)`; the consumer calls `drain()`
    (e.g. on a timer) and gets everything since the last call. When the consumer falls
    behind by more than `maxlen` exchanges the oldest are dropped and counted, so the
    capture never blocks and memory stays bounded."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self._items: deque[Exchange] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, ex: Exchange) -> None:
        with self._lock:
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(ex)

    def drain(self) -> list[Exchange]:
        with self._lock:
            out = list(self._items)
            self._items.clear()
        return out


# -- driving the engine -------------------------------------------------------------------------


@dataclass(slots=True)
class LiveOptions:
    engine: EngineOptions = field(default_factory=EngineOptions)
    pending_timeout_s: float = 60.0  # requests unanswered this long become `no_response`
    idle_timeout_s: float = 600.0  # connections silent this long are closed and freed
    acks0_grace_s: float = 5.0  # acks=0 Produce requests unanswered this long are settled
    tick_s: float = 1.0  # housekeeping period
    drain_s: float = 3.0  # at most this long reading what the kernel captured before the stop
    duration_s: float | None = None
    max_packets: int | None = None


@dataclass(slots=True)
class LiveStats:
    started: float = 0.0
    stopped: float = 0.0
    exchanges: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    idle_closed: int = 0
    stop_reason: str = ""


class LiveSession:
    """Packets from a source through the engine to subscribers, until stopped.

    `source` needs `read(timeout) -> (ts_ns, bytes) | None`, `linktype`, `counters`,
    `update_counters()` and `close()` (AfPacketSource, or a fake in tests).
    Subscribers are called in the capture thread, in start-time order; `on_tick`
    callbacks get the session once per housekeeping tick (for gauges and charts)."""

    def __init__(self, source, opts: LiveOptions | None = None, pcap: PcapWriter | None = None) -> None:  # noqa: ANN001
        self.source = source
        self.opts = opts or LiveOptions()
        self.pcap = pcap
        self.stats = LiveStats()
        self._subscribers: list[Callable[[Exchange], None]] = []
        self._tickers: list[Callable[[LiveSession], None]] = []
        self._stop = threading.Event()
        self._stop_ns = 0
        self._hurry = False
        self.failed = False  # the capture ended on an error (the interface went away)
        # refreshed every tick, safe to read from other threads (metrics endpoint, TUI)
        self.pending = 0
        self.open_connections = 0
        eo = self.opts.engine
        if eo.pending_timeout_ns is None:
            eo.pending_timeout_ns = int(self.opts.pending_timeout_s * 1e9)
        self.engine = Engine(self._emit, eo)

    def subscribe(self, fn: Callable[[Exchange], None]) -> None:
        self._subscribers.append(fn)

    def on_tick(self, fn: Callable[[LiveSession], None]) -> None:
        self._tickers.append(fn)

    def stop(self, reason: str = "stopped") -> None:
        """Ask the loop to finish (safe from signal handlers and other threads)."""
        if not self._stop.is_set():
            self.stats.stop_reason = reason
            self._stop_ns = time.time_ns()
        else:
            self._hurry = True  # asked twice: stop reading the kernel's backlog
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _emit(self, ex: Exchange) -> None:
        st = self.stats
        st.exchanges += 1
        st.by_status[ex.status] = st.by_status.get(ex.status, 0) + 1
        for fn in self._subscribers:
            fn(ex)

    def housekeeping(self, now_ns: int) -> None:
        o = self.opts
        eng = self.engine
        # acks=0 Produce requests: held, they would hold back every later exchange in the
        # output for the order window
        eng.settle_unanswered(now_ns - int(min(o.pending_timeout_s, o.acks0_grace_s) * 1e9))
        eng.expire(now_ns - int(o.pending_timeout_s * 1e9))
        self.stats.idle_closed += eng.expire_idle(now_ns - int(o.idle_timeout_s * 1e9))
        self.pending = eng.pending_count
        self.open_connections = eng.open_count
        self.source.update_counters()
        if self.pcap is not None:
            self.pcap.flush()
        for fn in self._tickers:
            fn(self)

    def run(self) -> LiveStats:
        """Capture until stopped, `duration_s` elapsed or `max_packets` read; then drain what
        the kernel still holds, close the engine (flushing every exchange) and return."""
        o = self.opts
        src, feed, pcap = self.source, self.engine.feed, self.pcap
        st = self.stats
        st.started = time.time()
        deadline = None if o.duration_s is None else time.monotonic() + o.duration_s
        next_tick = time.monotonic() + o.tick_s
        n = 0
        drained = True  # the last read found the kernel queue empty
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self.stop("duration reached")
                    break
                if now >= next_tick:
                    # time goes by the wall clock when caught up, by the packets when behind
                    # (a backlog must not make answers still queued in the kernel look late)
                    self.housekeeping(time.time_ns() if drained else self.engine.now)
                    next_tick = now + o.tick_s
                wait = min(0.2, max(0.0, next_tick - now))
                try:
                    got = src.read(wait)
                except LiveError as e:  # the interface is gone: keep what was captured
                    self.stop(str(e))
                    self.failed = True
                    break
                drained = got is None
                if got is None:
                    continue
                n += 1
                ts, data = got
                if pcap is not None:
                    pcap.write(ts, data)
                feed(Packet(n, ts, src.linktype, data))
                if o.max_packets is not None and n >= o.max_packets:
                    self.stop("packet limit reached")
                    break
            if o.max_packets is None or n < o.max_packets:
                # what the kernel captured before the stop belongs to the run (not what traffic
                # still arriving adds: the kernel timestamps tell them apart); bounded in time
                stop_ns = self._stop_ns or time.time_ns()
                drain_until = time.monotonic() + o.drain_s
                while time.monotonic() < drain_until and not self._hurry and not self.failed:
                    got = src.read(0)
                    if got is None or got[0] > stop_ns:
                        break
                    n += 1
                    if pcap is not None:
                        pcap.write(*got)
                    feed(Packet(n, got[0], src.linktype, got[1]))
        finally:
            src.close()
            try:
                self.engine.close()
            finally:
                if pcap is not None:
                    pcap.close()
                st.stopped = time.time()
        return st


def open_source(iface: str, bpf: str, snaplen: int = SNAPLEN, buffer_bytes: int = 32 << 20) -> AfPacketSource:
    """The capture backend for this platform."""
    if not hasattr(socket, "AF_PACKET"):
        raise LiveError("live capture is implemented for Linux (AF_PACKET) only")
    return AfPacketSource(iface, bpf, snaplen, buffer_bytes)


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux), for the summary and the soak test."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
