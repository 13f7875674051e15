"""What every `kanalyze stats` table shares: the exchange wrapper that decodes bodies and facts
on first use (`Exch`), the bounds on rows, and the latency summary. Apart from `stats` so that
the io table (`stats_io`) and the other collectors both build on it without importing each
other."""

from __future__ import annotations

from collections.abc import Callable

from kanalyze.analysis.summary import percentile
from kanalyze.bodies import Bodies, ExchangeFacts
from kanalyze.correlation import Exchange
from kanalyze.views.conv import software_of

PRODUCE, FETCH, API_VERSIONS, JOIN_GROUP, SYNC_GROUP = 0, 1, 18, 11, 14
LONG_POLL_SHARE = 0.8  # a Fetch answered after >= 80% of its max_wait_ms waited on purpose
MAX_KEYS = 100_000  # rows per table; further keys are counted in `dropped` and noted
MAX_IO_BUCKETS = 100_000
MAX_IO_SAMPLES = 10_000  # latency samples per io interval (the first ones)


class Exch:
    """An exchange with its bodies and facts, each computed at most once, when first asked."""

    __slots__ = ("_facts", "bodies", "ex", "facts_of")

    def __init__(
        self, ex: Exchange, bodies: Bodies, facts_of: Callable[[Bodies], ExchangeFacts]
    ) -> None:
        self.ex = ex
        self.bodies = bodies
        self.facts_of = facts_of
        self._facts: ExchangeFacts | None = None

    @property
    def facts(self) -> ExchangeFacts:
        if self._facts is None:
            self._facts = self.facts_of(self.bodies)
        return self._facts

    @property
    def software(self) -> str | None:
        if self.ex.api_key != API_VERSIONS:
            return None
        return software_of(self.bodies.request)


def bodies_read(ex: Exchange, facts: ExchangeFacts | None) -> tuple[bool, bool]:
    """Which of an exchange's bodies (request, response) the tables read besides its facts:
    the request of ApiVersions (`software`), Fetch (`latency_kind`: max wait) and of any
    exchange with errors (`expected_error`), the response of JoinGroup (`latency_kind`). A
    `--jobs` run ships only these from its ranges (`RangeSession.decoded`)."""
    key = ex.api_key
    return key in (API_VERSIONS, FETCH) or bool(facts and facts.error_codes), key == JOIN_GROUP


def frame_of(ex: Exchange) -> int:
    m = ex.response or ex.request
    return m.pdu.last_pkt if m else 0


def round3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def lat_ms(values: list[float]) -> dict[str, float | None]:
    v = sorted(values)
    return {
        "p50_ms": round3(percentile(v, 50)),
        "p90_ms": round3(percentile(v, 90)),
        "p99_ms": round3(percentile(v, 99)),
        "max_ms": round3(v[-1] if v else None),
    }


def latency_kind(x: Exch) -> str:
    """'long-poll', 'rebalance wait' or 'response' (see LatencyCollector)."""
    ex = x.ex
    if ex.api_key == FETCH:
        lat = ex.latency_ns
        wait = (x.bodies.request or {}).get("max_wait_ms")
        if lat is not None and isinstance(wait, int) and 0 < wait <= lat / 1e6 / LONG_POLL_SHARE:
            return "long-poll"
    elif ex.api_key == SYNC_GROUP or ex.api_key == JOIN_GROUP and not _is_first_join(x):
        return "rebalance wait"
    return "response"


def waits(x: Exch) -> bool:
    return x.ex.api_key in (FETCH, JOIN_GROUP, SYNC_GROUP) and latency_kind(x) != "response"


def _is_first_join(x: Exch) -> bool:
    """A JoinGroup answered at once with MEMBER_ID_REQUIRED: no wait happened."""
    rsp = x.bodies.response or {}
    return rsp.get("error_code") == 79
