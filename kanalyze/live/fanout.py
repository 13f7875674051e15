"""N capture sockets that share one interface's traffic by flow: an AF_PACKET fanout group.

With `PACKET_FANOUT_HASH` the kernel picks a group member per packet from the flow hash
(`__skb_get_hash_symmetric` since Linux 4.5), so both directions of a TCP connection reach the
same socket and each worker's engine sees whole connections (tested on loopback).
The member is the hash modulo the group size, so the group is built completely before anything
is read (all sockets open and joined in the calling process) and stays unchanged while the
workers capture; a member leaving only happens at the end, after the stop time every worker
drains up to.
"""

from __future__ import annotations

import errno
import os
import socket
import struct

from kanalyze.live.afpacket import SOL_PACKET, AfPacketSource, open_source
from kanalyze.live.errors import LiveError

PACKET_FANOUT = 18
PACKET_FANOUT_HASH = 0
PACKET_FANOUT_FLAG_UNIQUEID = 0x2000  # the kernel assigns a free group id (Linux 4.4)
PACKET_FANOUT_FLAG_DEFRAG = 0x8000  # IP fragments are reassembled before hashing
_MODE = PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG


def _join(sock: socket.socket, group: int, flags: int = 0) -> None:
    arg = (group & 0xFFFF) | ((_MODE | flags) << 16)
    sock.setsockopt(SOL_PACKET, PACKET_FANOUT, struct.pack("@I", arg))


def _group_id(sock: socket.socket) -> int:
    raw = sock.getsockopt(SOL_PACKET, PACKET_FANOUT, 4)
    return int(struct.unpack("@I", raw)[0]) & 0xFFFF


def join_group(sources: list[AfPacketSource]) -> int:
    """Put the sockets in one new fanout group (hash mode); returns the group id."""
    first = sources[0].sock
    try:
        _join(first, 0, PACKET_FANOUT_FLAG_UNIQUEID)
        group = _group_id(first)
    except OSError:
        # older kernels: try ids of our own until one is free (EINVAL/EBUSY: taken by another)
        group = -1
        for k in range(64):
            candidate = (os.getpid() + k * 7919) & 0xFFFF
            try:
                _join(first, candidate)
            except OSError as e:
                if e.errno in (errno.EINVAL, errno.EBUSY, errno.EEXIST):
                    continue
                raise LiveError(f"cannot create a fanout group: {e.strerror or e}") from e
            group = candidate
            break
        if group < 0:
            raise LiveError("cannot create a fanout group: no free group id") from None
    for src in sources[1:]:
        try:
            _join(src.sock, group)
        except OSError as e:
            raise LiveError(f"cannot join fanout group {group}: {e.strerror or e}") from e
    return group


def open_fanout(
    iface: str, bpf: str, n: int, snaplen: int, buffer_bytes: int
) -> tuple[list[AfPacketSource], int]:
    """`n` capture sockets on `iface`, each with the BPF filter and its own `buffer_bytes`
    receive buffer, joined in one flow-hash fanout group. Returns (sources, group id); on an
    error every socket is closed and LiveError raised."""
    sources: list[AfPacketSource] = []
    try:
        sources.extend(open_source(iface, bpf, snaplen, buffer_bytes) for _ in range(n))
        group = join_group(sources)
    except BaseException:
        for src in sources:
            src.sock.close()
        raise
    return sources, group
