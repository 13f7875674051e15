"""Run the engine over capture files: the shared entry point of the offline commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, Packet, read_captures
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions


@dataclass(slots=True)
class Session:
    """Inputs, options and, once iterated, the statistics of one offline run."""

    paths: Sequence[str]
    opts: EngineOptions = field(default_factory=EngineOptions)
    capture: CaptureStats = field(default_factory=CaptureStats)
    engine: Engine | None = None
    progress: bool = False  # a progress bar on stderr (kanalyze.views.progress; the caller decides)
    on_packet: Callable[[Packet], None] | None = None  # sees each packet before the engine
    hold: Callable[[Exchange], None] | None = None  # `Engine.hold`: sees each completed exchange

    def exchanges(self) -> Iterator[Exchange]:
        """Exchanges in start-time order; raises CaptureError before yielding if an input is
        not a capture."""
        out: list[Exchange] = []
        engine = Engine(out.append, self.opts, self.hold)
        self.engine = engine
        packets = read_captures(self.paths, self.capture, views=True)
        if self.progress:
            from kanalyze.views.progress import track

            packets = track(packets, self.paths)
        feed = engine.feed
        if self.on_packet is not None:
            packets = _tapped(packets, self.on_packet)
        for pkt in packets:
            feed(pkt)
            if out:
                yield from out
                out.clear()
        engine.close()
        yield from out
        out.clear()


def _tapped(packets: Iterator[Packet], tap: Callable[[Packet], None]) -> Iterator[Packet]:
    for pkt in packets:
        tap(pkt)
        yield pkt
