"""Hex and ASCII of one buffer (a frame, or a decompressed record buffer), with the bytes of
the highlighted field marked. Virtual: only visible lines are rendered."""

from __future__ import annotations

from rich.segment import Segment
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

PER_LINE = 16
_PRINTABLE = bytes(range(32, 127))


class HexView(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"hex-view--title", "hex-view--offset", "hex-view--highlight"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data = b""
        self.title = "no exchange selected"
        self.start = 0
        self.length = 0

    @property
    def highlight(self) -> tuple[int, int]:
        return self.start, self.length

    def show(self, data: bytes, title: str, start: int = 0, length: int = 0) -> None:
        self.data = bytes(data)
        self.title = title
        self.start = start
        self.length = length
        self.virtual_size = Size(
            10 + PER_LINE * 4 + 2, (len(self.data) + PER_LINE - 1) // PER_LINE + 1
        )
        line = start // PER_LINE
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_y)
        if length and not (top <= line < top + visible):
            self.scroll_to(y=max(0, line - 2), animate=False)
        self.refresh()

    def line_text(self, line: int) -> str:
        """Plain text of data line `line` (tests and tmux checks read this)."""
        chunk = self.data[line * PER_LINE : (line + 1) * PER_LINE]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if b in _PRINTABLE else "." for b in chunk)
        return f"{line * PER_LINE:06x}  {hexpart:<{PER_LINE * 3 - 1}}  {asc}"

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self.rich_style
        if y == 0:
            style = self.get_component_rich_style("hex-view--title")
            hl = f"  [bytes {self.start}..{self.start + self.length - 1}]" if self.length else ""
            text = (self.title + hl)[:width]
            return Strip([Segment(text.ljust(width), style)], width)
        line = scroll_y + y - 1
        if line * PER_LINE >= len(self.data):
            return Strip.blank(width, base)
        off_style = base + self.get_component_rich_style("hex-view--offset")
        hl_style = base + self.get_component_rich_style("hex-view--highlight")
        lo, hi = self.start, self.start + self.length
        segs = [Segment(f"{line * PER_LINE:06x}  ", off_style)]
        chunk_start = line * PER_LINE
        chunk = self.data[chunk_start : chunk_start + PER_LINE]
        for i, b in enumerate(chunk):
            pos = chunk_start + i
            inside = lo <= pos < hi
            nxt = lo <= pos + 1 < hi and i + 1 < len(chunk)
            segs.append(Segment(f"{b:02x}", hl_style if inside else base))
            segs.append(Segment(" ", hl_style if inside and nxt else base))
        segs.append(Segment("   " * (PER_LINE - len(chunk)) + " ", base))
        for i, b in enumerate(chunk):
            inside = lo <= chunk_start + i < hi
            segs.append(Segment(chr(b) if b in _PRINTABLE else ".", hl_style if inside else base))
        strip = Strip(segs).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, base)
