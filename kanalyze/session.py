"""Run the engine over capture files: the shared entry point of the offline commands."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, read_captures
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions


@dataclass(slots=True)
class Session:
    """Inputs, options and, once iterated, the statistics of one offline run."""

    paths: Sequence[str]
    opts: EngineOptions = field(default_factory=EngineOptions)
    capture: CaptureStats = field(default_factory=CaptureStats)
    engine: Engine | None = None

    def exchanges(self) -> Iterator[Exchange]:
        """Exchanges in start-time order; raises CaptureError before yielding if an input is not a capture."""
        out: list[Exchange] = []
        engine = Engine(out.append, self.opts)
        self.engine = engine
        packets = read_captures(self.paths, self.capture, views=True)
        feed = engine.feed
        for pkt in packets:
            feed(pkt)
            if out:
                yield from out
                out.clear()
        engine.close()
        yield from out
        out.clear()
