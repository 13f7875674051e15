"""Pair requests with responses on one connection by correlation id.

Kafka answers requests on a connection in order, each response echoing the
request's correlation id; the response header's version follows the
request's api and version (dissectors.quirks). Produce with acks=0 gets no
response. After a SaslHandshake v0, raw length-prefixed SASL tokens (no Kafka
header) flow until the client sends a real request again.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from dissectors import API_NAMES, ApiKey, Code, DecodeError, Diagnostic, read_uvarint
from kanalyze.evidence import ANY_CLIENT, HOST, Evidence
from kanalyze.framing import Pdu
from kanalyze.headers import (
    INT16,
    INT32,
    RequestHeader,
    read_request_header,
    read_response_header,
)
from kanalyze.inference import infer
from kanalyze.unmade import EMPTY

SASL_RAW_API = -1  # api_key reported for raw (un-headered) SASL token exchanges
SASL_RAW_NAME = "SaslRaw"

OK, NO_RESPONSE, REQUEST_MISSING = "ok", "no_response", "request_missing"
SETTLE_AFTER = 4  # requests seen after an orphan response before its api is inferred
SETTLE_MAX = 16  # ... and before one that cannot be inferred yet is given up on
SETTLE_LONG = 64  # ... or whose api is known but not its version (other connections may tell)
MAX_ORPHANS = 64  # orphans held per connection; over it the oldest is settled at once
HISTORY = 64  # recent requests kept per connection as evidence for orphans
ANY_ONLY = (ANY_CLIENT,)  # the shared pools a request is noted in before any orphan

# module constants: no enum attribute lookup per frame
PRODUCE, SASL_HANDSHAKE, API_VERSIONS = ApiKey.PRODUCE, ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS
_new = tuple.__new__  # builds an Exchange at C speed (see kanalyze.headers)


@dataclass(frozen=True, slots=True)
class ConnInfo:
    """Who talks on a connection: `id` is the order of first appearance (1-based)."""

    id: int
    client: str
    broker: str

    def __reduce__(self) -> tuple:
        # explicit: a compiled dataclass is pickled only this way (dissectors/native.py)
        return ConnInfo, (self.id, self.client, self.broker)


@dataclass(slots=True)
class Message:
    """One side of an exchange: the frame, its parsed header and where the body starts.

    Mutable on purpose: `done` is the orderer's mark (set when the request is answered or
    given up on), and the correlator adds diagnostics it learns later (pending limit)."""

    pdu: Pdu
    header: dict[str, object]
    body_offset: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    done: bool = False  # answered, or given up on (lets the output orderer drop it lazily)
    # the engine's estimate of what this message costs while it waits (kanalyze.engine,
    # --max-buffered); 0 once it left the wait
    cost: int = 0

    def __reduce__(self) -> tuple:
        # explicit: a compiled dataclass is pickled only this way (dissectors/native.py)
        fields = (self.pdu, self.header, self.body_offset, self.diagnostics, self.done, self.cost)
        return Message, fields


class Exchange(NamedTuple):
    """A request and its response (either may be missing), as the engine emits it.

    Immutable; a NamedTuple because one is built per exchange (built at C speed)."""

    conn: ConnInfo
    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    status: str
    request: Message | None
    response: Message | None
    acks: int | None = None  # Produce only
    # request_missing responses whose api was inferred: {"from": ..., "confidence": ...}
    inferred: dict[str, object] | None = None

    @property
    def start_ts(self) -> int:
        m = self.request or self.response
        return m.pdu.last_ts if m else 0

    @property
    def api(self) -> str | None:
        if self.api_key == SASL_RAW_API:
            return SASL_RAW_NAME
        return API_NAMES.get(self.api_key) if self.api_key is not None else None

    @property
    def latency_ns(self) -> int | None:
        if self.request and self.response:
            took = self.response.pdu.last_ts - self.request.pdu.last_ts
            # timestamps out of order (merged interfaces, a clock step): no latency to report
            return took if took >= 0 else None
        return None

    def messages(self) -> Iterator[tuple[Message, bool]]:
        """(message, is_request) for each side that was captured, request first."""
        if self.request is not None:
            yield self.request, True
        if self.response is not None:
            yield self.response, False


def produce_acks(ver: int, data: bytes, pos: int) -> int | None:
    """The acks field of a Produce request body (after transactional_id in v3+), or None."""
    try:
        if ver >= 9:
            n, pos = read_uvarint(data, pos, len(data))
            pos += max(n - 1, 0)
        elif ver >= 3:
            n = INT16.unpack_from(data, pos)[0]
            pos += 2 + max(n, 0)
        if pos + 2 > len(data):
            return None
        acks: int = INT16.unpack_from(data, pos)[0]
        return acks
    except (DecodeError, struct.error):  # the body ends before acks
        return None


_Pending = tuple[Message, RequestHeader, "int | None"]  # a request waiting: message, header, acks


_EMPTY: deque = EMPTY  # a queue not made yet (unmade.py)


class Correlator:
    """Pending requests of one connection; emits an `Exchange` per pair, orphan or timeout."""

    __slots__ = (
        "conn",
        "emit",
        "pending",
        "count",
        "max_pending",
        "sasl_raw",
        "raw_pending",
        "on_pending",
        "unanswered",
        "arrivals",
        "history",
        "orphans",
        "evidence",
        "client_id",
        "host",
        "noted",
        "noted_hosts",
    )

    def __init__(
        self,
        conn: ConnInfo,
        emit: Callable[[Exchange], None],
        on_pending: Callable[[Message], None],
        max_pending: int = 10_000,
        evidence: Evidence | None = None,
    ) -> None:
        self.conn = conn
        # engine-wide: the (api, version) pairs each client id, client address and the whole
        # capture sent, for orphans whose own connection has no fitting request
        self.evidence = evidence if evidence is not None else Evidence()
        self.client_id: str | None = None
        # the client's address: what its other connections sent is evidence too (a client uses
        # one version of an api on all its connections)
        self.host = HOST + conn.client.rsplit(":", 1)[0]
        self.noted: tuple[int, int] | None = None  # the pair of the last request noted as sent
        self.noted_hosts = False  # whether host pools were kept when it was
        self.emit = emit
        self.on_pending = on_pending
        # a list per correlation id (nearly always one request; a deque would cost 760 bytes)
        self.pending: dict[int, list[_Pending]] = {}
        self.count = 0
        self.max_pending = max_pending
        self.sasl_raw = False  # SaslHandshake v0 succeeded: raw SASL tokens may follow
        # The queues below are made on first use (`_EMPTY` until then): an empty deque costs
        # 760 bytes, and five of them were most of an idle connection's 6.6 KB (issue 20: a
        # SYN flood is bounded by --max-connections x the cost of a connection).
        self.raw_pending: deque[Message] = _EMPTY
        self.unanswered: deque[_Pending] = _EMPTY  # acks=0 Produce requests
        # pending requests in arrival order (lists: a one-item list costs 88 bytes)
        self.arrivals: list[tuple[int, Message]] = []
        self.history: list[tuple[int, int, int]] = []  # (corr, api, version), last HISTORY-2x
        # responses without a request, held until later requests tell what they answered:
        # [message, correlation id, requests seen since, the response layouts that fit it,
        #  requests to wait for before giving up]
        self.orphans: deque[list] = _EMPTY

    def __reduce__(self) -> tuple:
        # a blank correlator, then its state (dissectors/native.py): its callbacks lead back
        # to the engine that holds it, so they cannot be constructor arguments
        return _blank_correlator, (), self.__getstate__()

    def expects(self, corr: int) -> bool:
        return corr in self.pending

    def request(self, pdu: Pdu) -> bool:
        """Take a client frame. False when it does not parse as a Kafka request (and is not
        raw SASL)."""
        hdr = read_request_header(pdu.data)
        if hdr is None:
            if self.sasl_raw:
                msg = Message(pdu, {}, 0)
                if self.raw_pending is _EMPTY:
                    self.raw_pending = deque()
                self.raw_pending.append(msg)
                self.on_pending(msg)
                return True
            return False
        self.sasl_raw = False
        api, ver, corr, _cid, fields, body_at, hdiags = hdr
        diags = list(hdiags) if hdiags else []
        msg = Message(pdu, fields, body_at, diags)
        api_ver = (api, ver)
        history = self.history
        history.append((corr, api, ver))
        if len(history) > 2 * HISTORY:
            del history[:-HISTORY]
        evidence = self.evidence
        if api_ver == self.noted and _cid == self.client_id and evidence.hosts == self.noted_hosts:
            # the same as this connection's last request (a consumer's Fetch after Fetch): the
            # pools know it already
            evidence.requests += 1
            if evidence.late and evidence.requests >= evidence.late[0][2]:
                evidence.settle_late()
        else:
            self.client_id = _cid
            if api == API_VERSIONS and ver >= 3:
                evidence.announced(_cid, pdu.data, body_at)
            hosts = self.noted_hosts = evidence.hosts
            evidence.sent(_cid, (self.host, ANY_CLIENT) if hosts else ANY_ONLY, api_ver)
            self.noted = api_ver
        if pdu.missing:
            diags.append(
                Diagnostic(
                    Code.TRUNCATED,
                    len(pdu.data),
                    f"{pdu.missing} bytes of this frame were lost in a capture gap",
                )
            )
        acks = produce_acks(ver, pdu.data, body_at) if api == PRODUCE else None
        if self.orphans:
            answered = self._answered_early(corr, msg, hdr, acks)
            for entry in self.orphans:
                entry[2] += 1
            self._settle_orphans_seen()
            if answered:
                return True
        if acks == 0:
            # no response is due; held until a later response proves none is coming (some
            # brokers answer anyway: then the answer is attached)
            if self.unanswered is _EMPTY:
                self.unanswered = deque()
            self.unanswered.append((msg, hdr, acks))
            self.on_pending(msg)
            if len(self.unanswered) > self.max_pending:
                self.settle_unanswered(None)
            return True
        queue = self.pending.get(corr)
        if queue is None:
            self.pending[corr] = [(msg, hdr, acks)]
        else:
            diags.append(
                Diagnostic(
                    Code.DUPLICATE_CORRELATION_ID,
                    4,
                    f"correlation id {corr} is already awaiting a response",
                )
            )
            queue.append((msg, hdr, acks))
        self.count += 1
        self._track(corr, msg)
        self.on_pending(msg)
        if self.count > self.max_pending:
            self._evict_oldest()
        return True

    def response(self, pdu: Pdu) -> None:
        if self.raw_pending:
            req = self.raw_pending.popleft()
            req.done = True
            resp = Message(pdu, {}, 0)
            self.emit(Exchange(self.conn, SASL_RAW_API, 0, None, None, OK, req, resp))
            return
        if len(pdu.data) < 4:
            orphan = read_response_header(pdu.data, None, None)
            resp = Message(pdu, orphan.fields, orphan.body_offset, list(orphan.diagnostics))
            self.emit(Exchange(self.conn, None, None, None, None, REQUEST_MISSING, None, resp))
            return
        corr = INT32.unpack_from(pdu.data, 0)[0]
        queue = self.pending.get(corr)
        if not queue and self.unanswered:
            for i, item in enumerate(self.unanswered):
                if item[1].correlation_id == corr:
                    queue = [item]
                    del self.unanswered[i]
                    self.pending[corr] = queue
                    self.count += 1
                    break
        if not queue:
            orphan = read_response_header(pdu.data, None, None)
            resp = Message(pdu, orphan.fields, orphan.body_offset)
            if self.orphans is _EMPTY:
                self.orphans = deque()
            self.evidence.hosts = True
            self.orphans.append([resp, corr, 0, None, SETTLE_MAX])
            self.on_pending(resp)  # the output waits for it like for a pending request
            if len(self.orphans) > MAX_ORPHANS:
                self._settle_orphan(self.orphans.popleft())
            return
        req, hdr, acks = queue.pop(0)
        if not queue:
            del self.pending[corr]
        self.count -= 1
        self._answer(req, hdr, acks, pdu)

    def _answer(
        self, req: Message, hdr: RequestHeader, acks: int | None, pdu: Pdu, cost: int = 0
    ) -> None:
        """Emit `req` answered by the response frame `pdu` (`cost`: what the response was
        charged while it waited as an orphan)."""
        req.done = True
        if self.unanswered:
            self.settle_unanswered(req.pdu.last_ts)
        api, ver = hdr.api_key, hdr.api_version
        _c, fields, body_at, rdiags = read_response_header(pdu.data, api, ver)
        diags = list(rdiags) if rdiags else []
        if pdu.missing:
            diags.append(
                Diagnostic(
                    Code.TRUNCATED,
                    len(pdu.data),
                    f"{pdu.missing} bytes of this frame were lost in a capture gap",
                )
            )
        if pdu.last_ts < req.pdu.last_ts:
            diags.append(
                Diagnostic(
                    Code.TIMESTAMP_ORDER,
                    0,
                    "captured with an earlier timestamp than its request: latency unknown",
                )
            )
        resp = Message(pdu, fields, body_at, diags, cost=cost)
        if api == SASL_HANDSHAKE and ver == 0 and len(pdu.data) >= body_at + 2:
            self.sasl_raw = INT16.unpack_from(pdu.data, body_at)[0] == 0
        self.emit(self._exchange(req, hdr, resp, OK, acks))

    def _answered_early(
        self, corr: int, req: Message, hdr: RequestHeader, acks: int | None
    ) -> bool:
        """A request whose response came first (a capture listing the request's packet after
        the answer, or a hole the request filled late): the held orphan with its correlation
        id is its response. True when one was."""
        for i, entry in enumerate(self.orphans):
            if entry[1] == corr:
                del self.orphans[i]
                orphan = entry[0]
                orphan.done = True
                self._answer(req, hdr, acks, orphan.pdu, orphan.cost)
                return True
        return False

    def _settle_orphans_seen(self) -> None:
        """Settle the orphans enough requests went by for: inferred ones at SETTLE_AFTER, the
        others get until SETTLE_MAX requests (their api may simply not have come round yet)."""
        keep: deque[list] = deque()
        for entry in self.orphans:
            if entry[2] < SETTLE_AFTER or not self._settle_orphan(entry, entry[2] >= entry[4]):
                keep.append(entry)
        self.orphans = keep

    def _settle_orphan(self, entry: list, final: bool = True, infer_api: bool = True) -> bool:
        """Emit a held orphan response: decoded as the api the connection's requests point to
        when exactly one fits (kanalyze/inference.py), else (when `final`) undecoded with the
        reason. False when it was kept back. `infer_api` False: undecoded at once (see
        `settle_orphans`)."""
        resp, corr = entry[0], entry[1]
        pdu = resp.pdu
        found = None
        if infer_api and not pdu.missing:
            ev, cid = self.evidence, self.client_id
            by_cid = f"client id {cid!r} sent it on another connection"
            pools = (
                (ev.pools.get(cid) if cid is not None else None, by_cid),
                (ev.told(self.host, cid), "its host sent it on another connection"),
                (ev.told(ANY_CLIENT, cid), "another client in this capture sent it"),
            )
            recent = self.history[-HISTORY:]
            found = infer(pdu.data, corr, recent, pools, entry[3], self.evidence.budget)
            if found.api is None and not final:
                entry[3] = found.fits  # the layouts that fit, kept for the next try
                entry[4] = SETTLE_LONG if found.version_only else SETTLE_MAX
                return False
        resp.done = True
        if found is None or found.api is None:
            if found is not None:
                why = found.reason
            elif infer_api:
                why = "a capture gap cut it: not inferred"
            else:
                why = "it answers a request sent before this byte range: not inferred"
            diag = Diagnostic(
                Code.NOT_INFERRED, 0, f"request not captured; api not inferred: {why}"
            )
            out = Message(
                pdu, resp.header, resp.body_offset, [*resp.diagnostics, diag], cost=resp.cost
            )
            self.emit(
                _new(
                    Exchange,
                    (self.conn, None, None, corr, None, REQUEST_MISSING, None, out, None, None),
                )
            )
            return True
        header = found.header or resp.header
        out = Message(pdu, header, found.body_offset, list(resp.diagnostics), cost=resp.cost)
        inferred = found.to_json()
        self.emit(
            _new(
                Exchange,
                (
                    self.conn,
                    found.api,
                    found.version,
                    corr,
                    None,
                    REQUEST_MISSING,
                    None,
                    out,
                    None,
                    inferred,
                ),
            )
        )
        return True

    def settle_orphans(self) -> None:
        """Emit every held orphan response now, undecoded (`kanalyze.parallel`: at the start
        of a byte range they answer requests of the previous range, whose run pairs them;
        the stitch drops these, so the search for their api would be wasted work, on large
        responses most of a range head's, and would spend the run's layout budget)."""
        while self.orphans:
            self._settle_orphan(self.orphans.popleft(), infer_api=False)

    def _outlive_orphans(self) -> None:
        """The connection ends: its held orphans are settled, but one whose api is known and
        not its version waits in the run's evidence (`Evidence.wait`) for a request of
        another connection to tell it."""
        while self.orphans:
            entry = self.orphans.popleft()
            if not self._settle_orphan(entry, False):
                if entry[4] == SETTLE_LONG:
                    self.evidence.wait(self._settle_orphan, entry)
                else:
                    self._settle_orphan(entry)

    def _settle_orphans(self, before_ts: int | None = None) -> None:
        while self.orphans and (before_ts is None or self.orphans[0][0].pdu.last_ts < before_ts):
            self._settle_orphan(self.orphans.popleft())

    def _exchange(
        self, req: Message, h: RequestHeader, resp: Message | None, status: str, acks: int | None
    ) -> Exchange:
        return _new(
            Exchange,
            (
                self.conn,
                h.api_key,
                h.api_version,
                h.correlation_id,
                h.client_id,
                status,
                req,
                resp,
                acks,
                None,
            ),
        )

    def settle_unanswered(self, before_ts: int | None) -> None:
        """acks=0 Produce requests sent at or before `before_ts` are done (status ok, no
        response); with None, the oldest are released until the backlog is within `max_pending`."""
        q = self.unanswered
        while q and (before_ts is None or q[0][0].pdu.last_ts <= before_ts):
            req, hdr, acks = q.popleft()
            req.done = True
            self.emit(self._exchange(req, hdr, None, OK, acks))
            if before_ts is None and len(q) <= self.max_pending:
                break

    def _track(self, corr: int, msg: Message) -> None:
        """Remember arrival order so the oldest pending request is found in O(1) amortized."""
        arrivals = self.arrivals
        arrivals.append((corr, msg))
        _drop_done(arrivals)
        if len(arrivals) > 2 * self.max_pending + 64:  # answered out of order behind an old one
            self.arrivals = [a for a in arrivals if not a[1].done]

    def _evict_oldest(self, why: str = "") -> None:
        arrivals = self.arrivals
        _drop_done(arrivals)
        oldest = arrivals.pop(0)[0]
        req, hdr, acks = self.pending[oldest].pop(0)
        if not self.pending[oldest]:
            del self.pending[oldest]
        self.count -= 1
        req.done = True
        req.diagnostics.append(
            Diagnostic(
                Code.PENDING_LIMIT,
                0,
                why or f"more than {self.max_pending} requests pending; oldest given up",
            )
        )
        self.emit(self._exchange(req, hdr, None, NO_RESPONSE, acks))

    def shed(self) -> None:
        """Give up everything this connection waits on (--max-buffered, kanalyze.engine): held
        orphan responses are settled, acks=0 Produce requests settled as `ok`, pending requests
        become `no_response` with a `pending_limit` diagnostic."""
        self._settle_orphans()
        while self.unanswered:
            req, hdr, acks = self.unanswered.popleft()
            req.done = True
            self.emit(self._exchange(req, hdr, None, OK, acks))
        while self.count:
            self._evict_oldest("the engine held more than --max-buffered; given up")
        while self.raw_pending:
            req = self.raw_pending.popleft()
            req.done = True
            self.emit(Exchange(self.conn, SASL_RAW_API, 0, None, None, NO_RESPONSE, req, None))

    def expire(self, older_than_ns: int) -> None:
        """Give up on requests that began before `older_than_ns` (live mode / long captures);
        acks=0 Produce requests that old are settled as `ok` (no response is due)."""
        self._settle_orphans(older_than_ns)
        if self.unanswered:
            self.settle_unanswered(older_than_ns)
        for corr in list(self.pending):
            q = self.pending[corr]
            while q and q[0][0].pdu.last_ts < older_than_ns:
                req, hdr, acks = q.pop(0)
                self.count -= 1
                req.done = True
                self.emit(self._exchange(req, hdr, None, NO_RESPONSE, acks))
            if not q:
                del self.pending[corr]

    def close(self, broker_gaps: tuple[int, ...] = ()) -> None:
        """Connection over: every request still waiting is `no_response` (acks=0 ones are `ok`).
        `broker_gaps`: packets where the broker's stream had a capture gap; a request sent
        before one of them says its response may be in it."""
        self._outlive_orphans()
        while self.unanswered:
            req, hdr, acks = self.unanswered.popleft()
            req.done = True
            self.emit(self._exchange(req, hdr, None, OK, acks))
        waiting = [item for q in self.pending.values() for item in q]
        waiting.sort(key=lambda item: item[0].pdu.last_ts)
        self.pending.clear()
        self.count = 0
        for req, hdr, acks in waiting:
            req.done = True
            after = [p for p in broker_gaps if p > req.pdu.last_pkt]
            if after:
                req.diagnostics.append(
                    Diagnostic(
                        Code.GAP,
                        0,
                        "no response seen: the broker's stream lost bytes in a capture gap "
                        f"after it (packet {after[0]})",
                    )
                )
            self.emit(self._exchange(req, hdr, None, NO_RESPONSE, acks))
        while self.raw_pending:
            req = self.raw_pending.popleft()
            req.done = True
            self.emit(Exchange(self.conn, SASL_RAW_API, 0, None, None, NO_RESPONSE, req, None))


def _drop_done(arrivals: list[tuple[int, Message]]) -> None:
    """Drop the answered requests at the front of an arrival list (usually all but the last)."""
    i = 0
    n = len(arrivals)
    while i < n and arrivals[i][1].done:
        i += 1
    if i:
        del arrivals[:i]


def _ignore(_item: object) -> None:
    """A blank correlator's callbacks (replaced by the unpickled state)."""


def _blank_correlator() -> Correlator:
    return Correlator(ConnInfo(0, "", ""), _ignore, _ignore)
