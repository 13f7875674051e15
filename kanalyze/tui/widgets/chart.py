"""A small multi-series step chart (offsets over timeline entries), drawn with text cells so it
needs no plotting dependency and reads the same in a snapshot, a terminal and tmux."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

# series name -> (glyph, style); later series are drawn on top
SERIES_STYLE = {
    "leader LEO": ("█", "blue"),
    "HW": ("█", "green"),
}
FOLLOWER_STYLES = ("magenta", "yellow", "cyan", "red")


class StepChart(Widget):
    """`series`: name -> list of values (None = unknown) over the same x positions."""

    DEFAULT_CSS = "StepChart { height: 14; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: dict[str, list[int | None]] = {}
        self.x_labels: tuple[str, str] = ("", "")

    def set_series(self, series: dict[str, list[int | None]], x_labels: tuple[str, str] = ("", "")) -> None:
        self.series = series
        self.x_labels = x_labels
        self.refresh()

    def _style(self, name: str, i: int) -> tuple[str, str]:
        if name in SERIES_STYLE:
            return SERIES_STYLE[name]
        followers = [k for k in self.series if k not in SERIES_STYLE]
        i = followers.index(name) if name in followers else i
        return "▒", FOLLOWER_STYLES[i % len(FOLLOWER_STYLES)]

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        values = [v for s in self.series.values() for v in s if v is not None]
        if not values or width < 20 or height < 4:
            return Text("no replication data", "dim")
        lo, hi = min(values), max(values)
        if lo == hi:
            lo = max(0, hi - 1)
            hi = lo + 1
        n = max(len(s) for s in self.series.values())
        label_w = max(len(str(lo)), len(str(hi))) + 1
        plot_w, plot_h = width - label_w - 1, height - 2
        grid: list[list[tuple[str, str]]] = [[(" ", "")] * plot_w for _ in range(plot_h)]
        span = max(1, hi - lo)
        # draw followers first, then leader LEO, then HW on top
        order = [k for k in self.series if k not in SERIES_STYLE] + [k for k in SERIES_STYLE if k in self.series]
        # distinct rows per series when equal: a thin offset is not possible in cells, so each series
        # takes its own row band of the cell: LEO upper half, HW lower half, followers full
        for si, name in enumerate(order):
            glyph, style = self._style(name, si)
            data = self.series[name]
            for col in range(plot_w):
                i = min(n - 1, col * n // plot_w) if n else 0
                v = data[i] if i < len(data) else None
                if v is None:
                    continue
                row = plot_h - 1 - round((v - lo) * (plot_h - 1) / span)
                g = glyph
                if name == "leader LEO":
                    g = "▀"
                elif name == "HW":
                    g = "▄"
                cur = grid[row][col]
                if {cur[0], g} == {"▀", "▄"}:
                    grid[row][col] = ("█", "green on blue" if g == "▄" else "blue on green")
                else:
                    grid[row][col] = (g, style)
        out = Text()
        for r, line in enumerate(grid):
            if r == 0:
                lab = str(hi)
            elif r == plot_h - 1:
                lab = str(lo)
            else:
                lab = ""
            out.append(lab.rjust(label_w - 1) + " │", "dim")
            for g, style in line:
                out.append(g, style)
            out.append("\n")
        out.append(" " * label_w + "└" + "─" * plot_w + "\n", "dim")
        left, right = self.x_labels
        out.append(" " * (label_w + 1) + left + right.rjust(max(0, plot_w - len(left))), "dim")
        return out

    def legend(self) -> Text:
        t = Text()
        order = [k for k in SERIES_STYLE if k in self.series] + [k for k in self.series if k not in SERIES_STYLE]
        for si, name in enumerate(order):
            glyph, style = self._style(name, si)
            if name == "leader LEO":
                glyph = "▀"
            elif name == "HW":
                glyph = "▄"
            t.append(glyph * 2, style)
            t.append(f" {name}   ")
        return t
