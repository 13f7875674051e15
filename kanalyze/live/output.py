"""Where `kanalyze live` writes its NDJSON: stdout or a file, optionally rotated."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from typing import TextIO


class NdjsonOutput:
    """Lines to stdout or a file, flushed per line; optional rotation to OUT.1, OUT.2, ..."""

    def __init__(
        self, path: str, rotate_bytes: int | None = None, rotate_seconds: float | None = None
    ) -> None:
        if path == "-" and (rotate_bytes or rotate_seconds):
            raise ValueError("--rotate-bytes/--rotate-seconds need -o FILE")
        self.path = path
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.files: list[str] = []
        self.lines = 0
        self.broken = False
        self._f: TextIO = sys.stdout
        self._open()

    def _open(self) -> None:
        if self.path == "-":
            self._f = sys.stdout
            return
        name = self.path if not self.files else f"{self.path}.{len(self.files)}"
        self._f = open(name, "w", encoding="utf-8")  # noqa: SIM115
        self.files.append(name)
        self._size = 0
        self._opened = time.monotonic()

    def write(self, line: str) -> None:
        f = self._f
        f.write(line)
        f.write("\n")
        f.flush()
        self.lines += 1
        if self.path != "-":
            self._size += len(line) + 1
            if self.rotate_bytes is not None and self._size >= self.rotate_bytes:
                self._rotate()

    def write_many(self, lines: Sequence[bytes | memoryview]) -> None:
        """Several UTF-8 lines (without their newlines), flushed once: `live --workers` writes
        the workers' bytes as they came, not decoded and encoded again."""
        f = self._f
        raw = getattr(f, "buffer", None)
        if raw is None:  # a text stream without a binary layer (a test's stdout)
            for line in lines:
                f.write(str(line, "utf-8"))
                f.write("\n")
            self.lines += len(lines)
            f.flush()
            return
        f.flush()  # what was written as text first
        for line in lines:
            raw.write(line)
            raw.write(b"\n")
            self.lines += 1
            if self.path != "-":
                self._size += len(line) + 1
                if self.rotate_bytes is not None and self._size >= self.rotate_bytes:
                    raw.flush()
                    self._rotate()
                    raw = self._f.buffer
        raw.flush()

    def tick(self) -> None:
        if (
            self.rotate_seconds is not None
            and self.path != "-"
            and time.monotonic() - self._opened >= self.rotate_seconds
        ):
            self._rotate()

    def _rotate(self) -> None:
        self._f.close()
        self._open()

    def close(self) -> None:
        if self._f is not sys.stdout:
            self._f.close()
        elif not self.broken:
            with contextlib.suppress(BrokenPipeError):
                self._f.flush()
