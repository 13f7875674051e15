"""The parent's merge of `live --workers N`: the workers' lines in start-time order.

Each worker's lines come in its engine's order (start time, as one process writes them), and
each batch carries the worker's *watermark*: no line it sends later starts before it (its
oldest pending request, undecided connection or held exchange, and the packets it has not read
yet: those are no older than the last one it read, or than the clock when it found its socket
empty). A held line goes out once every other worker either has an older line waiting here
or has promised, by its watermark, not to send one; so the output is one start-time order.

The hold is bounded: a worker that says nothing (stuck, or its watermark held back by a
request that is never answered) does not stall the output. A line waits at most `hold_s`
seconds here, and at most `hold_bytes` of lines are held: past either bound lines go out in
merge order all the same (so the order may then differ from one process's, never a line lost).
Each worker's own order is always kept. A worker that has ended constrains nothing.
"""

from __future__ import annotations

import heapq
from collections import deque

Line = bytes | memoryview  # one line's UTF-8 bytes, without its newline
HOLD_S = 1.0  # the longest a line waits for a silent worker
HOLD_BYTES = 32 << 20  # bytes of lines held at most


class StartMerge:
    """Lines of `n` workers in, lines in start-time order out (`take`, `drain`)."""

    def __init__(self, n: int, hold_s: float = HOLD_S, hold_bytes: int = HOLD_BYTES) -> None:
        self.hold_s, self.hold_bytes = hold_s, hold_bytes
        # per worker, held lines in its order: (start time, arrived (monotonic s), line)
        self.queues: list[deque[tuple[int, float, Line]]] = [deque() for _ in range(n)]
        self.marks: list[int | None] = [None] * n  # None: nothing promised yet
        self.ended = [False] * n
        self.heads: list[tuple[int, int, int]] = []  # (start, arrival order, worker) per queue
        self.held = 0  # bytes held
        self.seq = 0
        self.forced = 0  # lines let out past a bound (not proven in order)

    def add(
        self, i: int, lines: list[Line], starts: list[int], mark: int | None, now: float
    ) -> None:
        """Worker `i`'s batch: its lines with their start times, and its watermark after it."""
        q = self.queues[i]
        if lines and not q:
            self.seq += 1
            heapq.heappush(self.heads, (starts[0], self.seq, i))
        for line, start in zip(lines, starts, strict=True):
            q.append((start, now, line))
            self.held += len(line)
        if mark is not None and (self.marks[i] is None or mark > self.marks[i]):  # type: ignore[operator]
            self.marks[i] = mark

    def end(self, i: int) -> None:
        """Worker `i` sends nothing more."""
        self.ended[i] = True

    def _limit(self) -> float:
        """The latest start time that may go out: the least promise of the workers that may
        still send and have nothing waiting here."""
        limit = float("inf")
        for q, mark, ended in zip(self.queues, self.marks, self.ended, strict=True):
            if not q and not ended:
                if mark is None:
                    return float("-inf")
                limit = min(limit, mark)
        return limit

    def _due(self, now: float) -> bool:
        """A bound is reached: a line has waited `hold_s`, or too many bytes are held."""
        if self.held > self.hold_bytes:
            return True
        cut = now - self.hold_s
        return any(q and q[0][1] <= cut for q in self.queues)

    def take(self, now: float) -> list[Line]:
        """The lines that may go out now, in order."""
        out: list[Line] = []
        heads = self.heads
        limit = self._limit()
        while heads:
            start, _seq, i = heads[0]
            if start > limit:
                if not self._due(now):
                    break
                self.forced += 1
            q = self.queues[i]
            line = q.popleft()[2]
            self.held -= len(line)
            out.append(line)
            if q:
                self.seq += 1
                heapq.heapreplace(heads, (q[0][0], self.seq, i))
            else:
                heapq.heappop(heads)
                if not self.ended[i]:
                    mark = self.marks[i]
                    limit = min(limit, float("-inf") if mark is None else mark)
        return out

    def drain(self) -> list[Line]:
        """Everything held, in merge order (every worker has ended)."""
        self.ended = [True] * len(self.ended)
        return self.take(float("inf"))

    def due_in(self, now: float) -> float | None:
        """Seconds until the oldest held line reaches the hold bound (None: nothing held)."""
        oldest = min((q[0][1] for q in self.queues if q), default=None)
        return None if oldest is None else max(0.0, oldest + self.hold_s - now)
