"""Which request an orphan response answered, inferred from its own connection's evidence.

A capture that starts mid-stream has responses whose requests were sent before it began (on a
busy broker, the first response of every connection: a consumer's Fetch long-poll, a
producer's Produce). Their bytes are there; only the api and version are unknown. The
connection's own requests say what it almost certainly was: clients repeat the same calls with
the same versions, and correlation ids are sequential, so the requests just before and after
the missing one (by correlation id) are the best witnesses.

Policy (docs/architecture.md): the candidates are the (api, version) pairs of this connection's
requests, nearest correlation ids first. Each is tried: the response header and body must
decode with no diagnostic and consume the frame exactly. Exactly one candidate must pass;
otherwise the response stays undecoded and says why. Confidence is `high` when a request with
an adjacent correlation id (±1) has the inferred api and version, else `medium`. When none of
the connection's own pairs fits, the pairs the same client id sent on other connections, then
those any client of the capture sent, are tried the same way (confidence `low`), and then no
other api's response layout kanalyze knows may fit the bytes as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dissectors.apis import API_NAMES, RESPONSE_VERSIONS
from dissectors.context import DecodeContext
from kanalyze.api_kinds import rivals
from kanalyze.headers import read_response_header

MAX_CANDIDATES = 8
# a response no request of its api was seen for is decoded by its layout alone only when it is
# at least this long (correlation id included): shorter ones fit other layouts by chance
MIN_UNSEEN = 24


@dataclass(frozen=True, slots=True)
class Inference:
    """The outcome for one orphan: `api`/`version` when inferred, else `reason`."""

    api: int | None = None
    version: int | None = None
    body_offset: int = 4
    header: dict[str, object] | None = None
    evidence: str = ""  # which requests pointed to it (the "from" in the output)
    confidence: str = ""
    reason: str = ""
    # the response layouts that fit the bytes, once tried: an orphan asked again after more
    # requests passes them back (`infer(..., fits=)`) instead of trying every layout again
    fits: tuple[tuple[int, int], ...] | None = None
    # one api fits and only its version is unknown: a request on another connection may still
    # tell it (a client's connections open over seconds), so it is worth waiting longer
    version_only: bool = False

    def to_json(self) -> dict[str, object]:
        return {"from": self.evidence, "confidence": self.confidence}


def _clean(data: bytes, api: int, version: int) -> tuple[int, dict[str, object]] | None:
    """(body offset, header) when the frame decodes as this api/version's response with no
    diagnostic and nothing left over; else None."""
    h = read_response_header(data, api, version)
    if h.diagnostics:
        return None
    header, body_at = h.fields, h.body_offset
    ctx = DecodeContext(decode_records=False, judging=True)  # judged, then dropped
    from dissectors import decode_body  # orphans only: not imported with the engine

    node = decode_body(api, version, False, data, body_at, len(data), ctx)
    if any(n.diagnostics for n in node.walk()):
        return None
    if node.offset + node.length != len(data):
        return None
    return body_at, header


# evidence from elsewhere: (the (api, version) pairs sent there, what "there" is), best first
Pools = tuple[tuple[Iterable[tuple[int, int]] | None, str], ...]


def infer(
    data: bytes,
    corr: int,
    requests: list[tuple[int, int, int]],
    pools: Pools = (),
    fits: tuple[tuple[int, int], ...] | None = None,
    budget: LayoutBudget | None = None,
) -> Inference:
    """Infer the api and version of the response `data` (correlation id `corr`) from the
    connection's requests, given as (correlation id, api, version); failing that, from the
    layouts that fit it, the version told by the first of `pools` ((api, version) pairs sent
    elsewhere, with what they are: the same client id, the same host, any client) that sent
    exactly one of the fitting versions. `fits`: the layouts found by an earlier try; `budget`:
    the run's layout searches (none: unbounded)."""
    passed, tried = _local(data, corr, requests)
    if len(passed) > 1:
        names = ", ".join(f"{API_NAMES.get(a, a)} v{v}" for a, v, _g in passed)
        return Inference(reason=f"ambiguous: it decodes as {names}")
    if fits is None:
        found = response_fits(data, budget)
        if found is not None:
            fits = tuple(found)
    # what this client sent (its connection, its client id; else what its pools sent): the
    # apis it may have sent before the capture began are those and their kinds
    sent = {(a, v) for _c, a, v in requests}
    for pool, _said in pools[:1] if sent or (pools and pools[0][0]) else pools:
        sent.update(pool or ())
    if passed:
        return _confirm_local(corr, requests, passed[0], fits, sent)
    if not requests:
        why = "no request seen on this connection to infer it from"
    else:
        why = f"no api seen on this connection decodes it (tried {tried})"
    if fits is None:
        return Inference(reason=f"{why}; layout search skipped: the run's budget is spent")
    return _by_layout(data, why, pools, fits, sent)


def _confirm_local(
    corr: int,
    requests: list[tuple[int, int, int]],
    winner: tuple[int, int, tuple[int, dict[str, object]]],
    fits: tuple[tuple[int, int], ...] | None,
    sent: set[tuple[int, int]],
) -> Inference:
    """The one request of the connection whose response layout fits: accepted unless another
    api the client may have sent (`api_kinds.rivals`: one it sent elsewhere, or of a kind it
    showed) fits the bytes as well. Short responses (an error code and a throttle time) fit a
    dozen apis' layouts: a connection that sent LeaveGroup after the cut may well have sent
    the missing Heartbeat before it."""
    api, ver, (body_at, header) = winner
    name = API_NAMES.get(api, api)
    witnesses = sorted(c for c, a, v in requests if (a, v) == (api, ver))
    nearest = min(witnesses, key=lambda c: (abs(c - corr), c))
    adjacent = any(abs(c - corr) == 1 for c in witnesses)
    if fits is None:
        why = f"it decodes as {name} v{ver}, but the layout search is skipped (budget spent)"
        return Inference(reason=f"ambiguous: {why}")
    others = rivals({(a, v) for a, v in fits if a != api}, sent | {(api, ver)})
    if others:
        listed = ", ".join(str(API_NAMES.get(a, a)) for a in sorted(others)[:6])
        why = (
            f"ambiguous: it decodes as {name} v{ver} (request {nearest}), but as {listed} too,"
            " which this client may send"
        )
        return Inference(reason=why, fits=fits)
    where = "before" if nearest < corr else "after"
    evidence = f"request {nearest} ({name} v{ver}) {where} it on this connection"
    return Inference(api, ver, body_at, header, evidence, "high" if adjacent else "medium")


class LayoutBudget:
    """How many more layout searches (`response_fits`: every response layout tried, a few ms
    each) this run may make. Orphans and SYN-less connections ask for them; a capture of 100k
    such connections would otherwise take hours. A new `Engine` resets it; once spent, orphans
    stay undecoded and roles wait for other evidence, and the engine reports the searches
    refused as the `layout_search` limit (docs/limits.md). Identical frames are looked up, not
    searched again, and cost nothing. Each `Engine` run has its own (`Evidence.budget`)."""

    LIMIT = 500
    MEMO_FRAMES = 4096  # frames remembered (each at most MEMO_BYTES long)
    MEMO_BYTES = 4096

    def __init__(self) -> None:
        self.left = self.LIMIT
        self.refused = 0
        self.memo: dict[bytes, tuple[tuple[int, int], ...]] = {}


def response_fits(data: bytes, budget: LayoutBudget | None = None) -> list[tuple[int, int]] | None:
    """Every (api, version) whose response layout decodes `data` (a frame without its size)
    exactly, with no diagnostic; None when the run's layout `budget` is spent (no budget: the
    search is not bounded)."""
    if budget is None:
        return [(a, v) for a, v in _universe() if _clean(data, a, v) is not None]
    b = budget
    # the correlation id plays no part in which layouts fit: frames differing only in it (a
    # connection's Heartbeat responses) share one search
    key = bytes(data[4:]) if len(data) <= b.MEMO_BYTES else None
    if key is not None:
        known = b.memo.get(key)
        if known is not None:
            return list(known)
    if b.left <= 0:
        b.refused += 1
        return None
    b.left -= 1
    fits = [(a, v) for a, v in _universe() if _clean(data, a, v) is not None]
    if key is not None:
        if len(b.memo) >= b.MEMO_FRAMES:
            b.memo.clear()
        b.memo[key] = tuple(fits)
    return fits


def _by_layout(
    data: bytes,
    why: str,
    pools: Pools,
    fits: tuple[tuple[int, int], ...],
    sent: set[tuple[int, int]],
) -> Inference:
    """Weaker evidence, stricter test: the response layouts of every api kanalyze knows are
    tried, and exactly one api may fit the bytes exactly -- or, when several do, exactly one
    the client may send (`api_kinds.rivals`), and a pool must have sent it. Its versions often
    share a layout: the version is the one requests elsewhere used (the first pool that sent
    this api in one of the fitting versions, and in one only), or the only fitting one when
    the frame is long enough to tell layouts apart. Confidence `low`."""
    apis = sorted({a for a, _v in fits})
    if not apis:
        return Inference(reason=f"{why}; no response layout kanalyze knows fits it", fits=fits)
    if len(apis) > 1:
        names = ", ".join(str(API_NAMES.get(a, a)) for a in apis[:6])
        mine = sorted(rivals(set(fits), sent))
        if len(mine) != 1:
            why = f"{why}; ambiguous: the response layouts of {names} fit it"
            return Inference(reason=why, fits=fits)
        api, alone = mine[0], False
    else:
        api, alone = apis[0], True
    name = API_NAMES.get(api, api)
    versions = [v for a, v in fits if a == api]
    for pool, said in pools:
        told = sorted({v for a, v in pool or () if a == api and v in versions})
        if len(told) == 1:
            if not alone:
                said = f"{said}; the other layouts that fit are of apis it does not send"
            return _layout(data, api, told[0], f"{name} v{told[0]}: {said}")
        if told:
            listed = ", ".join(f"v{v}" for v in told)
            why = f"{why}; only {name} fits, sent as {listed}: ambiguous"
            return Inference(reason=why, fits=fits)
    if alone and len(versions) == 1 and len(data) >= MIN_UNSEEN:
        return _layout(data, api, versions[0], f"{name} v{versions[0]}: the only layout that fits")
    listed = ", ".join(f"v{v}" for v in versions)
    if not alone:  # the client's own api of those that fit, if only a request told the version
        names = ", ".join(str(API_NAMES.get(a, a)) for a in apis[:6])
        why = f"{why}; ambiguous: the response layouts of {names} fit it"
        return Inference(reason=why, fits=fits, version_only=True)
    why = f"{why}; only {name} fits, as {listed}, and no request tells which"
    return Inference(reason=why, fits=fits, version_only=True)


def _layout(data: bytes, api: int, version: int, evidence: str) -> Inference:
    got = _clean(data, api, version)
    assert got is not None
    body_at, header = got
    return Inference(api, version, body_at, header, evidence, "low")


def _local(
    data: bytes, corr: int, requests: list[tuple[int, int, int]]
) -> tuple[list[tuple[int, int, tuple[int, dict[str, object]]]], str]:
    """The connection's (api, version) pairs whose response layout decodes `data` exactly,
    nearest correlation id first (up to MAX_CANDIDATES tried), and the list of those tried."""
    by_distance = sorted(requests, key=lambda r: (abs(r[0] - corr), r[0]))
    candidates: list[tuple[int, int]] = []
    for _c, api, ver in by_distance:
        if (api, ver) not in candidates:
            candidates.append((api, ver))
    candidates = candidates[:MAX_CANDIDATES]
    passed = []
    for api, ver in candidates:
        got = _clean(data, api, ver)
        if got is not None:
            passed.append((api, ver, got))
    return passed, ", ".join(f"{API_NAMES.get(a, a)} v{v}" for a, v in candidates)


_UNIVERSE: list[tuple[int, int]] = []


def _universe() -> list[tuple[int, int]]:
    """Every (api, version) whose response kanalyze can decode."""
    if not _UNIVERSE:
        _UNIVERSE.extend(
            (a, v) for a, (lo, hi) in sorted(RESPONSE_VERSIONS.items()) for v in range(lo, hi + 1)
        )
    return _UNIVERSE
