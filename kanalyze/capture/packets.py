"""What every capture reader produces: packets, the readers' statistics, the one error type."""

from __future__ import annotations

from dataclasses import dataclass, field

from dissectors import Code, Diagnostic

BLOCK = 4 * 1024 * 1024  # bytes read at a time
MAX_RECORD = 256 * 1024 * 1024  # no sane packet record is larger


class CaptureError(Exception):
    """The input is not a readable capture (raised before any packet is produced)."""


@dataclass(slots=True)
class Packet:
    """One captured packet. `no` is 1-based in the merged input order (tshark's frame number).

    Mutable on purpose: merging several files renumbers `no`, as does a Spark task."""

    no: int
    ts_ns: int
    linktype: int
    data: bytes | memoryview  # a view into the read block when read with views=True
    file_index: int = 0
    file_no: int = 0  # 1-based number within its own file (pointer back for Spark/Arkime-style use)


@dataclass(slots=True)
class CaptureStats:
    """What the readers saw, for the summary."""

    files: list[str] = field(default_factory=list)
    packets: int = 0
    bytes: int = 0
    diagnostics: list[tuple[str, Diagnostic]] = field(default_factory=list)

    def damage(self, name: str, offset: int, message: str) -> None:
        """Record damage found in file `name` at byte `offset` (the file's reading ends there)."""
        self.diagnostics.append((name, Diagnostic(Code.BAD_CAPTURE, offset, message)))
