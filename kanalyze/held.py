"""Frames of exchanges the engine's orderer holds back, parked in a temporary file.

Exchanges go out in start-time order, so one request waiting long (a Fetch at its max wait, a
JoinGroup during a rebalance) holds every exchange started after it for up to the order window
(60 s): on a busy broker that is most of a minute of traffic, frames included (the 250 MB
bench capture held 144 MB at once; `export` peaked at 186 MB RSS). `Engine.hold` hands each
exchange it is about to hold back to `park`, which moves its frames' bytes to an unnamed
temporary file and leaves an empty stub naming where they are; `unpark` gives the exchange
back with its frames as it is handed on (kanalyze.session, one at a time), so every output is
byte-identical. An exchange that goes out at once is never parked, nor a small frame, nor any
while the engine holds little (`KEEP_BYTES`). When no frame is parked the file is written
again from its start, so it holds at most what was held at once.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO

from kanalyze.correlation import Exchange, Message
from kanalyze.engine_types import EngineStats
from kanalyze.framing import Pdu

FLUSH_BYTES = 1 << 20  # small parked frames are written in blocks of about this size
# a smaller frame stays in memory: an exchange's own objects cost ~1.5 KB (EXCHANGE_COST), and
# parking 100,000 exchanges of 1 KB frames saved 16% of RSS for 40% more CPU
MIN_BYTES = 4096
DIRECT_BYTES = 64 * 1024  # a frame this big is written as it is (no copy in the buffer)
# what the engine may hold (EngineStats.held) before frames are parked: copying every held frame
# twice cost 10% of an export's CPU on the bench capture, where most exchanges wait a little
KEEP_BYTES = 16 * 1024 * 1024
_new = tuple.__new__  # builds a Pdu at C speed (its NamedTuple __new__ is a Python function)


# (the dataclass's fields, not __slots__: a compiled Message has none, tools/compile.py)
_FIELDS = ("pdu", "header", "body_offset", "diagnostics", "done", "cost")
if tuple(f.name for f in dataclasses.fields(Message)) == _FIELDS:

    def _with_pdu(msg: Message, pdu: Pdu) -> Message:  # 6 x faster than dataclasses.replace
        return Message(pdu, msg.header, msg.body_offset, msg.diagnostics, msg.done, msg.cost)

else:  # Message gained a field: the general (slower) copy

    def _with_pdu(msg: Message, pdu: Pdu) -> Message:
        return dataclasses.replace(msg, pdu=pdu)


class Parked(bytes):
    """The (empty) data of a parked frame, and where its bytes are: `len()` is 0, so the
    engine charges a held exchange its Python objects only."""

    at: int
    size: int

    def __new__(cls, at: int, size: int) -> Parked:
        self = super().__new__(cls)
        self.at, self.size = at, size
        return self


class HeldFrames:
    """`park` as the engine's `hold`; `unpark` as each held exchange is handed on. With
    `stats` set (the engine's), frames are parked only once the engine holds over `keep`
    bytes: a short wait costs no copies.

    With `wanted` False the consumer never reads a frame's bytes (`export --header-only`
    writes sizes, packet numbers and times, all in the `Pdu`): the frames that would be parked
    are dropped instead, with no file and no copy (parking cost that export 10-15 % of its
    CPU). The engine sees exactly what parking shows it (empty data from the same frames on),
    so its accounting and hence every output stay the same."""

    def __init__(self, keep: int | None = None, wanted: bool = True) -> None:
        self.keep = KEEP_BYTES if keep is None else keep
        self.wanted = wanted
        self.stats: EngineStats | None = None
        self._file: BinaryIO | None = None  # made on the first frame written
        self._buf = bytearray()  # not written yet; starts at file offset `_flushed`
        self._flushed = 0
        self.parked = 0  # frames out now
        self.peak_bytes = 0  # the most parked at once (file and buffer)
        self.on_disk = True  # False once writing the file failed: the rest stays in memory

    def park(self, ex: Exchange) -> None:
        st = self.stats
        if st is not None and st.held < self.keep:
            return
        for msg in (ex.request, ex.response):
            if msg is None:
                continue
            pdu = msg.pdu
            data = pdu.data
            n = len(data)
            if n < MIN_BYTES:  # small (its exchange's objects cost more), or parked already
                continue
            if not self.wanted:
                msg.pdu = _new(Pdu, (b"", *pdu[1:]))
                continue
            if n >= DIRECT_BYTES and self.on_disk and self._write_out(data):
                at = self._flushed - n  # a big frame went to the file without a copy here
            else:
                at = self._flushed + len(self._buf)
                self._buf += data
                if len(self._buf) >= FLUSH_BYTES and self.on_disk:
                    self._write_out(None)
            msg.pdu = _new(Pdu, (Parked(at, n), *pdu[1:]))  # not _replace: 4 x slower
            self.parked += 1

    def unpark(self, ex: Exchange) -> Exchange:
        """`ex` with its frames back, in new `Message`s: the engine's stale lists (answered
        requests behind an unanswered one, dropped lazily) keep the parked stubs, not the
        frames."""
        req, resp = ex.request, ex.response
        if req is not None and type(req.pdu.data) is Parked:
            req = self._back(req)
        if resp is not None and type(resp.pdu.data) is Parked:
            resp = self._back(resp)
        if not self.parked:  # nothing out: the file is written again from its start
            self.peak_bytes = max(self.peak_bytes, self._flushed + len(self._buf))
            self._flushed = 0
            self._buf = bytearray()
        if req is ex.request and resp is ex.response:
            return ex
        return ex._replace(request=req, response=resp)  # frames of 4 KiB or more: rare enough

    def hand_on(self, ex: Exchange, waits_before: Callable[[int], bool]) -> Exchange:
        """`ex` as it is handed on: parked frames put back (`unpark`); a big request that a
        still-waiting older request keeps in the engine's lists of answered requests (cleaned
        lazily: ~1,000 on the engine's heap, up to 2 x --max-pending per connection) is given
        on in a new `Message`, and the engine keeps an empty stub. Without this, a request
        never answered kept the frames of the next thousands of requests alive after they
        were written out (2,000 requests of 100 KB released by the order window: 236 MB)."""
        req, resp = ex.request, ex.response
        if self.parked and (
            req is not None and type(req.pdu.data) is Parked
            or resp is not None and type(resp.pdu.data) is Parked
        ):
            return self.unpark(ex)
        if req is None or len(req.pdu.data) < MIN_BYTES or not waits_before(ex.start_ts):
            return ex
        pdu = req.pdu
        req.pdu = _new(Pdu, (b"", *pdu[1:]))  # what the engine still holds: the stub
        if not self.wanted:
            return ex
        return ex._replace(request=_with_pdu(req, pdu))

    def _back(self, msg: Message) -> Message:
        pdu = msg.pdu
        stub: Parked = pdu.data  # type: ignore[assignment]
        self.parked -= 1
        return _with_pdu(msg, _new(Pdu, (self._read(stub.at, stub.size), *pdu[1:])))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._buf = bytearray()

    def _write_out(self, data: bytes | memoryview | None) -> bool:
        """The buffer, then `data`, appended to the file; False (and nothing more written
        ever) when the file cannot be written: what is parked then stays in memory."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="kanalyze-held-")  # noqa: SIM115
            if self._buf:
                self._pwrite(self._buf)
                self._buf = bytearray()
            if data is not None:
                self._pwrite(data)
        except OSError:  # no temporary file (disk full)
            self.on_disk = False
            return False
        return True

    def _pwrite(self, data: bytes | bytearray | memoryview) -> None:
        assert self._file is not None
        fd, done = self._file.fileno(), 0
        with memoryview(data) as view:
            while done < len(view):
                done += os.pwrite(fd, view[done:], self._flushed + done)
        self._flushed += done

    def _read(self, at: int, n: int) -> bytes:
        if at >= self._flushed:  # still in the buffer
            start = at - self._flushed
            with memoryview(self._buf) as view:  # one copy (a bytearray slice is another)
                return bytes(view[start:start + n])
        assert self._file is not None
        data = os.pread(self._file.fileno(), n, at)
        while len(data) < n:  # a short read: the rest
            more = os.pread(self._file.fileno(), n - len(data), at + len(data))
            if not more:
                raise OSError("kanalyze: the held-frames file was cut short")
            data += more
        return data
