"""Run the engine over capture files: the shared entry point of the offline commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kanalyze.capture import CaptureStats, Packet, read_captures
from kanalyze.correlation import Exchange
from kanalyze.engine import Engine, EngineOptions
from kanalyze.held import HeldFrames


@dataclass(slots=True)
class Session:
    """Inputs, options and, once iterated, the statistics of one offline run."""

    paths: Sequence[str]
    opts: EngineOptions = field(default_factory=EngineOptions)
    capture: CaptureStats = field(default_factory=CaptureStats)
    engine: Engine | None = None
    progress: bool = False  # a progress bar on stderr (kanalyze.views.progress; the caller decides)
    on_packet: Callable[[Packet], None] | None = None  # sees each packet before the engine
    # `Engine.hold`: sees each exchange the orderer holds back; None: their frames wait in a
    # temporary file (kanalyze.held), put back before they are yielded
    hold: Callable[[Exchange], None] | None = None
    park_held: bool = True  # False: held exchanges keep their frames in memory
    # False: the consumer reads no frame bytes of the exchanges (the header-only NDJSON):
    # frames that would be parked are dropped (kanalyze.held)
    frames_wanted: bool = True

    def exchanges(self) -> Iterator[Exchange]:
        """Exchanges in start-time order; raises CaptureError before yielding if an input is
        not a capture."""
        if self.hold is None and self.park_held:
            held = HeldFrames(wanted=self.frames_wanted)
            try:
                yield from self._run(held.park, held)
            finally:
                held.close()
        else:
            yield from self._run(self.hold, None)

    def _run(
        self, hold: Callable[[Exchange], None] | None, held: HeldFrames | None
    ) -> Iterator[Exchange]:
        out: list[Exchange] = []
        engine = Engine(out.append, self.opts, hold)
        self.engine = engine
        if held is not None:
            held.stats = engine.stats
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
                if held is None:
                    yield from out
                else:
                    yield from _handed_on(out, held, engine)
                out.clear()
        engine.close()
        if held is None:
            yield from out
        else:
            yield from _handed_on(out, held, engine)
        out.clear()


def _handed_on(out: list[Exchange], held: HeldFrames, engine: Engine) -> Iterator[Exchange]:
    """The exchanges one packet released, each with its frames put back as it is yielded
    (`HeldFrames.hand_on`) and dropped from `out` after: a request answered after a minute
    releases a minute of exchanges at once, which must not all come back into memory
    together."""
    hand_on, waits_before = held.hand_on, engine.waits_before
    for i, ex in enumerate(out):
        out[i] = None  # type: ignore[call-overload]  # the caller holds it while it works
        yield hand_on(ex, waits_before)


def _tapped(packets: Iterator[Packet], tap: Callable[[Packet], None]) -> Iterator[Packet]:
    for pkt in packets:
        tap(pkt)
        yield pkt
