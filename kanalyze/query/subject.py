"""What a filter is evaluated on: one exchange, its bodies and facts decoded only when asked.

Header fields read the `Exchange` directly; `error`, `topic`, `partition`, `records` and body
paths go through the body and facts service (`kanalyze.bodies`), decoded at most once per
exchange and only when the expression reaches them (header terms are tried first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissectors.context import DecodeContext

if TYPE_CHECKING:
    from kanalyze.bodies import BodyDecoder, ExchangeFacts
    from kanalyze.correlation import Exchange


class Env:
    """Per run: the body decoder (shared topic-name registry) and the capture's start time."""

    __slots__ = ("_ctx", "_decoder", "capture_start_ns")

    def __init__(
        self, ctx: DecodeContext | None = None, decoder: BodyDecoder | None = None
    ) -> None:
        self._ctx = ctx or DecodeContext()
        self._decoder = decoder
        self.capture_start_ns: int | None = None

    @property
    def decoder(self) -> BodyDecoder:
        """Built on first use, so a header-only filter never imports the decoders."""
        if self._decoder is None:
            from kanalyze.bodies import BodyDecoder, Records

            records = Records.AS_CONTEXT if self._ctx.decode_records else Records.DATA
            self._decoder = BodyDecoder(self._ctx, records)
        return self._decoder


class Subject:
    """One exchange under evaluation; bodies and facts are cached on first use."""

    __slots__ = ("_bodies", "_facts", "env", "ex")

    def __init__(self, ex: Exchange, env: Env) -> None:
        self.ex = ex
        self.env = env
        self._bodies = None
        self._facts: ExchangeFacts | None = None

    @property
    def bodies(self):  # noqa: ANN201 - kanalyze.bodies.Bodies, imported lazily
        if self._bodies is None:
            from kanalyze.bodies import Bodies

            self._bodies = Bodies(self.ex, self.env.decoder)
        return self._bodies

    @property
    def facts(self) -> ExchangeFacts:
        if self._facts is None:
            from kanalyze.bodies import exchange_facts

            self._facts = exchange_facts(self.bodies)
        return self._facts
