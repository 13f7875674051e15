"""Frames of indexed exchanges kept in an anonymous temporary file instead of memory.

A capture's Kafka payload is about its size, so holding every frame would make the TUI's memory
grow with the capture. Each frame is appended here once (its `Pdu` fields in a fixed header, then
the bytes) and read back by offset when a row is shown, summarized, exported or analyzed.

The file has no name (`tempfile.TemporaryFile`: unlinked at once, or O_TMPFILE), so the system
removes it when the process ends, however it ends; `close` frees it earlier. Appends go through
an in-memory buffer of about 1 MiB; reads see buffered frames too. All methods are thread-safe
(one lock; reads are `pread`s, short against the rest of the work).
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import weakref

from kanalyze.framing import Pdu

# data length, size prefix, stream offset, first_pkt, first_ts, last_pkt, last_ts, missing
_HEAD = struct.Struct("<qqqqqqqq")
HEAD_SIZE = _HEAD.size
FLUSH_BYTES = 1 << 20
WINDOW_BYTES = 1 << 20  # a sequential pass reads this much at once
NEAR_BYTES = 8192  # one row read at random: its request and response usually fit in one read


class SpillClosed(Exception):
    """The spill file was closed (the app is exiting): nothing can be read any more."""


class SpillWriteError(OSError):
    """Writing the spill file failed (disk full): not an error of the input being read."""


class FrameSpill:
    """Append-only store of `Pdu`s on disk; `put` returns the offset that `get` takes."""

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(prefix="kanalyze-tui-", dir=directory)  # noqa: SIM115 - lives as long as the store
        self._fd = self._file.fileno()
        weakref.finalize(self, self._file.close)  # a store dropped without close() frees it too
        self._buf = bytearray()  # not yet written; starts at file offset `_flushed`
        self._flushed = 0
        self._lock = threading.Lock()
        self.closed = False

    @property
    def size(self) -> int:
        """Bytes spilled so far (file and buffer)."""
        return self._flushed + len(self._buf)

    def put(self, pdu: Pdu) -> int:
        with self._lock:
            if self.closed:
                raise SpillClosed
            off = self._flushed + len(self._buf)
            buf = self._buf
            buf += _HEAD.pack(len(pdu.data), pdu.size, pdu.offset, pdu.first_pkt, pdu.first_ts,
                              pdu.last_pkt, pdu.last_ts, pdu.missing)
            buf += pdu.data
            if len(buf) >= FLUSH_BYTES:
                try:
                    self._flush()
                except SpillWriteError:
                    raise
                except OSError as e:
                    raise SpillWriteError(e.errno, e.strerror) from e
            return off

    def _flush(self) -> None:
        view = memoryview(self._buf)
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], self._flushed + done)
        view.release()
        self._flushed += done
        self._buf = bytearray()

    def read(self, off: int, n: int) -> bytes:
        """Up to `n` bytes at `off` (fewer only at the end of what was spilled)."""
        with self._lock:  # held across the pread: `close` cannot pull the descriptor away
            if self.closed:
                raise SpillClosed
            flushed = self._flushed
            if off + n <= flushed:  # the common case: all of it in the file
                data = os.pread(self._fd, n, off)
                if len(data) == n:
                    return data
            head = b""
            if off < flushed:
                want = min(n, flushed - off)
                parts = []
                while want > 0:
                    chunk = os.pread(self._fd, want, off)
                    if not chunk:
                        break
                    parts.append(chunk)
                    off += len(chunk)
                    n -= len(chunk)
                    want -= len(chunk)
                head = b"".join(parts) if len(parts) != 1 else parts[0]
            if n > 0 and off >= flushed:
                start = off - flushed
                return head + bytes(self._buf[start:start + n])
            return head

    def get(self, off: int) -> Pdu:
        """The frame put at `off` (random access: two small reads)."""
        head = _HEAD.unpack(self.read(off, HEAD_SIZE))
        return Pdu(self.read(off + HEAD_SIZE, head[0]), *head[1:])

    def packets(self, off: int) -> tuple[int, int]:
        """(first_pkt, last_pkt) of the frame at `off`: its header only, no data read."""
        head = _HEAD.unpack(self.read(off, HEAD_SIZE))
        return head[3], head[5]

    def stream_offset(self, off: int) -> int:
        """The stream offset of the frame at `off` (where its size prefix was in the
        connection's byte stream): its header only, no data read."""
        return _HEAD.unpack(self.read(off, HEAD_SIZE))[2]

    def reader(self, window: int | None = None) -> SpillReader:
        """A reader for frames at ascending offsets; `window` bytes are read at a time."""
        return SpillReader(self, WINDOW_BYTES if window is None else window)

    def close(self) -> None:
        """Free the file now (idempotent); later reads raise `SpillClosed`."""
        with self._lock:
            if not self.closed:
                self.closed = True
                self._buf = bytearray()
                self._file.close()


class SpillReader:
    """Reads frames in ascending offset order through a window: a pass over many rows
    (summaries, analysis, a filter) costs one read per window instead of two per frame."""

    def __init__(self, spill: FrameSpill, window: int) -> None:
        self._spill = spill
        self._window = window
        self._win = b""
        self._start = 0

    def _at(self, off: int, need: int) -> tuple[bytes, int]:
        p = off - self._start
        if p < 0 or p + need > len(self._win):
            # a pass reads on from the window (or close to it): a whole window; a jump further
            # (rows a filter skipped) just this frame and its neighbour
            onward = 0 <= p <= len(self._win) + self._window
            self._win = self._spill.read(off, max(need, self._window if onward else NEAR_BYTES))
            self._start = off
            p = 0
        return self._win, p

    def get(self, off: int) -> Pdu:
        win, p = self._at(off, HEAD_SIZE)
        head = _HEAD.unpack_from(win, p)
        n = head[0]
        win, p = self._at(off, HEAD_SIZE + n)
        return Pdu(win[p + HEAD_SIZE:p + HEAD_SIZE + n], *head[1:])
