"""One exchange with its bodies and facts, each computed at most once, when first asked."""

from __future__ import annotations

from kanalyze.bodies.decode import BodyDecoder
from kanalyze.bodies.facts import ExchangeFacts, error_codes, facts_of
from kanalyze.correlation import Exchange, Message

UNSET: object = object()


class Bodies:
    """An exchange's bodies as JSON objects and its `ExchangeFacts`, decoded lazily and once.

    A side is None when it was not captured, its api is unknown or not a Kafka api (raw
    SASL), or its body is not an object. `given` builds one from bodies at hand (tests, or a
    consumer that decoded them otherwise)."""

    __slots__ = ("_facts", "_req", "_rsp", "decoder", "ex")

    def __init__(self, ex: Exchange, decoder: BodyDecoder) -> None:
        self.ex = ex
        self.decoder = decoder
        self._req: object = UNSET
        self._rsp: object = UNSET
        self._facts: ExchangeFacts | None = None

    @classmethod
    def given(
        cls, ex: Exchange, decoder: BodyDecoder, request: dict | None, response: dict | None
    ) -> Bodies:
        b = cls(ex, decoder)
        b._req, b._rsp = request, response
        return b

    def _decode(self, msg: Message | None, is_request: bool) -> dict | None:
        ex = self.ex
        if msg is None or ex.api_key is None or ex.api_key < 0:
            return None
        value = self.decoder.json(ex, msg, is_request)
        return value if isinstance(value, dict) else None

    @property
    def request(self) -> dict | None:
        if self._req is UNSET:
            self._req = self._decode(self.ex.request, True)
        return self._req  # type: ignore[return-value]

    @property
    def response(self) -> dict | None:
        if self._rsp is UNSET:
            self._rsp = self._decode(self.ex.response, False)
        return self._rsp  # type: ignore[return-value]

    def side(self, is_request: bool) -> dict | None:
        return self.request if is_request else self.response

    @property
    def facts(self) -> ExchangeFacts:
        """Error codes, topics and partitions, record counts of this exchange."""
        if self._facts is None:
            self._facts = facts_of(self.request, self.response, self.decoder.names)
        return self._facts

    def error_codes(self) -> list[int]:
        """Every non-zero error code of the response (`facts.error_codes`; [] without one)."""
        rsp = self.response
        return error_codes(rsp) if rsp is not None else []


def exchange_facts(bodies: Bodies) -> ExchangeFacts:
    """The facts of one exchange (decoding its bodies if not yet; computed once)."""
    return bodies.facts
