"""A small multi-series step chart (offsets over capture time), drawn with text cells so it
needs no plotting dependency and reads the same in a snapshot, a terminal and tmux.

x is time when `xs` (one timestamp per position) is given: a column shows the last value at or
before its time, so bursts and idle stretches look like what they were. Leader LEO is the upper
half of a cell, HW the lower half; a follower's LEO is a marker drawn over them in its own
color (on their color), so a follower equal to HW stays visible."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

# series name -> (glyph, style); later series are drawn on top
SERIES_STYLE = {
    "leader LEO": ("█", "blue"),
    "HW": ("█", "green"),
}
FOLLOWER_STYLES = ("magenta", "yellow", "cyan", "red")
FOLLOWER_GLYPHS = ("●", "◆", "▲", "■")


class StepChart(Widget):
    """`series`: name -> list of values (None = unknown) over the same x positions."""

    DEFAULT_CSS = "StepChart { height: 14; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: dict[str, list[int | None]] = {}
        self.x_labels: tuple[str, str] = ("", "")
        self.xs: list[float] | None = None

    def set_series(
        self,
        series: dict[str, list[int | None]],
        x_labels: tuple[str, str] = ("", ""),
        xs: list[float] | None = None,
    ) -> None:
        self.series = series
        self.x_labels = x_labels
        self.xs = (
            xs if xs and len(xs) == max((len(v) for v in series.values()), default=0) else None
        )
        self.refresh()

    def positions(self, plot_w: int, n: int) -> list[int]:
        """The series position each column shows: by time when `xs` is known (the last entry
        at or before the column's time), else spread evenly."""
        xs = self.xs
        if not xs or n == 0:
            return [min(n - 1, col * n // plot_w) if n else 0 for col in range(plot_w)]
        t0, t1 = xs[0], xs[-1]
        span = (t1 - t0) or 1.0
        out = []
        i = 0
        for col in range(plot_w):
            t = t0 + span * col / max(1, plot_w - 1)
            while i + 1 < n and xs[i + 1] <= t:
                i += 1
            out.append(i)
        return out

    def _style(self, name: str, i: int) -> tuple[str, str]:
        if name in SERIES_STYLE:
            return SERIES_STYLE[name]
        followers = [k for k in self.series if k not in SERIES_STYLE]
        i = followers.index(name) if name in followers else i
        return FOLLOWER_GLYPHS[i % len(FOLLOWER_GLYPHS)], FOLLOWER_STYLES[i % len(FOLLOWER_STYLES)]

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
        cols = self.positions(plot_w, n)
        # leader LEO and HW first (half cells), then the followers' markers over them
        order = [k for k in SERIES_STYLE if k in self.series] + [
            k for k in self.series if k not in SERIES_STYLE
        ]
        # distinct rows per series when equal: a thin offset is not possible in cells, so each series
        # takes its own row band of the cell: LEO upper half, HW lower half, followers full
        for si, name in enumerate(order):
            glyph, style = self._style(name, si)
            data = self.series[name]
            for col in range(plot_w):
                i = cols[col]
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
                elif name not in SERIES_STYLE and cur[0] != " ":
                    under = cur[1].split(" on ")[0] if cur[0] in "▀▄█" else cur[1].split(" on ")[-1]
                    grid[row][col] = (g, f"bold {style} on {under}")
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
        order = [k for k in SERIES_STYLE if k in self.series] + [
            k for k in self.series if k not in SERIES_STYLE
        ]
        for si, name in enumerate(order):
            glyph, style = self._style(name, si)
            if name == "leader LEO":
                glyph = "▀"
            elif name == "HW":
                glyph = "▄"
            t.append(glyph * 2 if name in SERIES_STYLE else f" {glyph}", style)
            t.append(f" {name}   ")
        return t
