"""`export --jobs N` into a regular file without a merge copy of range 0: the calling process
writes range 0's lines straight into the output file (as one process would), the other ranges
write scratch files, and after the stitch every line that is not already where one process
puts it is copied to its final offset, in the kernel (`os.copy_file_range`) where it can.

Range 0 is the start of the capture, so its run is one process's up to its end: the stitched
output begins with a run of its lines in its own order and with its own connection ids (on the
benchmark capture, 7,105 of its 7,141 lines, 149 MB). That prefix stays where it was written;
range 0's lines after it (its *tail*, released in its overlap, interleaved with the next
range's) are first copied aside to a scratch file, then placed with the other ranges' lines.

Each placement is a list of `Place` (source offset, size, its connection id there, the run's,
final offset): the copying of one range's lines needs nothing from another range's, so
forked workers place their own ranges' lines in parallel (`range_export.run_tasks`).

Only a regular file that is not opened for appending takes this path (positional writes) and
only where it can be reopened for reading (`/proc/self/fd`, for the tail); anything else (a
pipe, a terminal, /dev/null) gets the merge copy (`merge.write_spliced`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

from kanalyze.parallel.worker import LINE_PREFIX

Place = tuple[int, int, int, int, int]  # (source offset, size, local id, run's id, final offset)
CHUNK = 1 << 20


@dataclass(slots=True)
class Target:
    """The output file, opened for positional writes: `fd` writes, `rfd` reads (the tail)."""

    out: BinaryIO
    fd: int
    rfd: int
    base: int  # where the export starts in the file (its position when the run began)

    def close(self) -> None:
        os.close(self.rfd)

    def reset(self) -> None:
        """Undo what range 0 wrote (the stitch refused: one process writes from `base`)."""
        self.out.flush()
        os.ftruncate(self.fd, self.base)
        self.out.seek(self.base)

    def finish(self, end: int) -> None:
        """The export ends at `end` (relative to `base`): cut what is past it, seek there."""
        self.out.flush()
        os.ftruncate(self.fd, self.base + end)
        self.out.seek(self.base + end)


def open_target(out: BinaryIO) -> Target | None:
    """`out` as a `Target`, or None when it is not a regular file written in place."""
    try:
        fd = out.fileno()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            return None
        out.flush()
        base = out.seek(0, os.SEEK_CUR)
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    except (AttributeError, OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        if os.fstat(rfd).st_ino == st.st_ino and os.fstat(rfd).st_dev == st.st_dev:
            return Target(out, fd, rfd, base)
    os.close(rfd)
    return None


def placeable(out: BinaryIO) -> bool:
    """Whether `out` takes the placement path (`open_target`)."""
    target = open_target(out)
    if target is None:
        return False
    target.close()
    return True


def prefix(sequence: Sequence[tuple[int, int]], lines0: Sequence[tuple[int, int, int]],
           ids0: dict[int, int]) -> int:
    """How many of the stitched lines are range 0's first lines, in its order, with its ids:
    those are in place already."""
    k, n = 0, min(len(sequence), len(lines0))
    while k < n and sequence[k] == (0, k) and ids0.get(lines0[k][2]) == lines0[k][2]:
        k += 1
    return k


def layout(sequence: Sequence[tuple[int, int]], lines: Sequence[Sequence[tuple[int, int, int]]],
           ids: Sequence[dict[int, int]], start: int, k: int,
           parts: int) -> tuple[list[list[Place]], int]:
    """Per range, the `Place`s of its lines of `sequence[k:]`, laid out from `start`; and where
    the export ends. A line's size changes by the digits of its new connection id."""
    places: list[list[Place]] = [[] for _ in range(parts)]
    pos = start
    for r, i in sequence[k:]:
        off, size, lid = lines[r][i]
        gid = ids[r][lid]
        if gid != lid:
            size += len(b"%d" % gid) - len(b"%d" % lid)
        places[r].append((off, size, lid, gid, pos))
        pos += size
    return places, pos


def split(places: list[Place], parts: int) -> tuple[list[Place], list[Place]]:
    """`places` cut in two at the line boundary nearest the first (parts - 1) / parts of their
    bytes: what a worker copies of its range after the stitch, and the rest, which the calling
    process copies at once with it (every process is idle then: each copies about as much)."""
    if parts < 2 or not places:
        return places, []
    keep = sum(p[1] for p in places) * (parts - 1) / parts
    acc = 0
    for i, p in enumerate(places):
        if acc + p[1] > keep:  # line i straddles the target: on the nearer side
            cut = i + 1 if acc + p[1] - keep < keep - acc else i
            return places[:cut], places[cut:]
        acc += p[1]
    return places, []


def _copy(src: int, dst: int, n: int, src_off: int, dst_off: int) -> None:
    """`n` bytes from `src` at `src_off` to `dst` at `dst_off`: in the kernel, else through a
    buffer."""
    while n > 0:
        try:
            got = os.copy_file_range(src, dst, n, src_off, dst_off)
        except OSError:
            got = 0
        if got <= 0:  # not supported here (or a short source): read and write
            data = os.pread(src, min(n, CHUNK), src_off)
            if not data:
                raise OSError(f"scratch file ended {n} bytes early")
            got = os.pwrite(dst, data, dst_off)
        n, src_off, dst_off = n - got, src_off + got, dst_off + got


def place(src: int, dst: int, base: int, places: Sequence[Place]) -> None:
    """Copy lines from `src` to their final offsets in `dst` (from `base`); a line whose
    connection id changes gets the new id written before the rest of it is copied. Runs of
    lines that are adjacent in both files and keep their ids go in one copy."""
    cut = len(LINE_PREFIX)
    run_src = run_dst = run_n = 0
    for off, size, lid, gid, pos in places:
        if gid == lid:
            if run_n and run_src + run_n == off and run_dst + run_n == base + pos:
                run_n += size
                continue
            if run_n:
                _copy(src, dst, run_n, run_src, run_dst)
            run_src, run_dst, run_n = off, base + pos, size
            continue
        if run_n:
            _copy(src, dst, run_n, run_src, run_dst)
            run_n = 0
        head = LINE_PREFIX + b"%d" % gid
        os.pwrite(dst, head, base + pos)
        skip = cut + len(b"%d" % lid)
        _copy(src, dst, size - len(head), off + skip, base + pos + len(head))
    if run_n:
        _copy(src, dst, run_n, run_src, run_dst)


def set_tail_aside(target: Target, start: int, end: int, path: str) -> int:
    """Copy range 0's tail ([start, end) of the export) into the scratch file `path`; returns
    its descriptor (the tail's lines are then placed from it, their offsets less `start`)."""
    target.out.flush()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    _copy(target.rfd, fd, end - start, target.base + start, 0)
    return fd
