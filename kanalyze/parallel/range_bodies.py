"""`--jobs N` for `report` and `stats`: the exchanges' bodies decoded in the ranges' workers
and shipped to the calling process, which runs the unchanged analyses over them in the
one-process order (`RangeSession.decoded`).

Decoding is most of their work, and it is per exchange; the analyses are not (HW/LEO
progress, groups and producers follow state across connections in wire order), so they stay
in one process, fed what one process would have decoded. Three things make shipping pay:

* Decoded bodies pickle about as slowly as they decode: most of a Produce request or Fetch
  response is its records, of which the analyses read only how many there are. A magic 2
  data batch whose records are plain (`facts.plain_records`: scalars, text, plain headers;
  not control records, not the decoded records of Kafka's own topics) ships its records as
  an `ElidedRecords` count: `len()` and truthiness as the list's, and no iteration (an
  analysis that starts reading such records raises, and its `analyzer_error` finding makes
  the output differ from one process's in the tests, which compare every capture).
* What each consumer derives from the bodies is computed where they are decoded: the facts
  (`stats`), the response's error codes (the report's stats) and the latency kind of the
  report text's latency table (read from bodies decoded with the default context, as
  `report_text` does).
* Only the bodies a consumer reads besides those are shipped (`keep`: `stats` reads a few
  requests and JoinGroup responses); reading another one after all (`NOT_SHIPPED`) makes
  the run `diverged`, so a wrong `keep` costs a rerun, never a different output.

Topic-id names: one process decodes each side when a consumer first asks for it, with the
names its registry knows then; a range decodes each exchange when it completes, with what
its own registry knows (`RecordingNames`: each side's reads and writes are noted). In the
calling process, `ShippedBodies` hands a side out at the same first ask, checks that every
name the range's decode read is the one the run's registry holds at that moment, and then
teaches the run's registry what that decode taught. A check that fails sets the session's
`diverged`: the consumer then runs again in one process (`RangeSession.single`). Names
learned from the data (record batches returned by name and by id, the metadata log's
TopicRecords) depend on what a range saw before; a range that learned one, or saw a batch
under an id it could not name, refuses (`BodiesDigest.finish`), and the run is one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from dissectors.context import DecodeContext
from kanalyze.analysis.wire import batches, fetch_responses, produce_partitions
from kanalyze.bodies import Bodies, BodyDecoder, ExchangeFacts, Records
from kanalyze.bodies.decode import DATA_BODIES
from kanalyze.bodies.exchange import UNSET
from kanalyze.bodies.facts import PARTITION_FIELDS, PartitionFacts, error_codes, plain_records
from kanalyze.bodies.names import TopicNames
from kanalyze.correlation import Exchange
from kanalyze.parallel.stitch import Unstitchable
from kanalyze.parallel.worker import RecordingNames

# one side's topic-id names: (what its decode read, what it taught), None when neither
Checks = tuple[dict[str, str | None], dict[str, str]] | None
# which bodies (request, response) a consumer reads besides the facts; the others are not
# shipped (`NOT_SHIPPED`: reading one after all makes the run `diverged`)
Keep = Callable[[Exchange, ExchangeFacts | None], tuple[bool, bool]]
NOT_SHIPPED = ...


class ElidedRecords:
    """The records of a plain data batch shipped as their count (see the module docstring)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __iter__(self) -> None:
        raise TypeError("records elided by a --jobs range: only their count was shipped")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ElidedRecords) and other.n == self.n

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (ElidedRecords, (self.n,))

    def __repr__(self) -> str:
        return f"ElidedRecords({self.n})"


def elide_records(body: dict, api_key: int | None, is_request: bool) -> None:
    """Replace, in place, the records of `body`'s plain magic 2 data batches by their count."""
    if (api_key, is_request) not in DATA_BODIES:
        return
    if is_request:
        lists = [bs for _t, _p, bs in produce_partitions(body)]
    else:
        lists = [batches(p.get("records")) for _t, _p, p in fetch_responses(body)]
    for bs in lists:
        for b in bs:
            recs = b.get("records")
            magic = b.get("magic")
            if (type(recs) is list and recs and type(magic) is int and magic >= 2
                    and not b.get("is_control") and plain_records(recs)):
                b["records"] = ElidedRecords(len(recs))


class BodiesDigest:
    """A range's digest (`range_session.collect_range`) for `RangeSession.decoded`: per
    exchange (without its frames), both bodies decoded as the run's decoder decodes them,
    with each side's names checks, and what the consumer derives from them."""

    def __init__(self, names: RecordingNames, template: DecodeContext, records: Records,
                 learn_from_data: bool, facts: bool, codes: bool, latency: bool,
                 keep: Keep | None = None) -> None:
        self.names = names
        self.decoder = BodyDecoder(replace(template, topic_names=names), records,
                                   learn_from_data=learn_from_data)
        self.facts, self.codes, self.keep = facts, codes, keep
        # the report text's latency table decodes with the default context (report_text)
        self.latency = BodyDecoder(DecodeContext(), Records.DATA) if latency else None

    def __call__(self, ex: Exchange) -> tuple:
        names = self.names
        bodies = Bodies(ex, self.decoder)
        reads: dict[str, str | None] = {}
        writes: dict[str, str] = {}
        checks: list[Checks] = [None, None]
        # one process decodes a response that teaches names as soon as its exchange arrives
        for is_req in ((False, True) if TopicNames.teaches(ex) else (True, False)):
            names.reads, names.writes = {}, {}
            bodies.side(is_req)
            checks[not is_req] = _noted(names, reads, writes)
        req, rsp = bodies.request, bodies.response
        # elided first: the walks of facts and error codes skip plain records either way
        for body, is_req in ((req, True), (rsp, False)):
            if body is not None:
                elide_records(body, ex.api_key, is_req)
        facts: tuple | None = None
        facts_checks: Checks = None
        if self.facts:
            names.reads, names.writes = {}, {}
            facts = facts_tuple(bodies.facts)
            facts_checks = _noted(names, reads, writes)
        codes = error_codes(rsp) if self.codes and rsp is not None else None
        kind = self._latency_kind(ex) if self.latency is not None else None
        names.reads, names.writes = reads, writes  # the exchange's, for `check_names`
        ship_req: object = req
        ship_rsp: object = rsp
        if self.keep is not None:  # only the bodies the consumer reads besides the facts
            keep_req, keep_rsp = self.keep(ex, bodies.facts if self.facts else None)
            ship_req = req if keep_req or req is None else NOT_SHIPPED
            ship_rsp = rsp if keep_rsp or rsp is None else NOT_SHIPPED
        return (ex, ship_req, ship_rsp, checks[0], checks[1], facts, facts_checks, codes, kind)

    def _latency_kind(self, ex: Exchange) -> str | None:
        from kanalyze.bodies import exchange_facts
        from kanalyze.views.stats_common import Exch, latency_kind

        if ex.latency_ns is None:
            return None
        return latency_kind(Exch(ex, Bodies(ex, self.latency), exchange_facts))  # type: ignore[arg-type]

    def finish(self) -> None:
        """Raise `Unstitchable` when this range learned a name from the data, or saw a batch
        under an id it could not name (one process may have named it from batches another
        range saw)."""
        if self.decoder.names.origin:
            raise Unstitchable("a topic name learned from the data in a range")
        links = self.decoder.links
        if links is not None and any(is_id for is_id, _label in links.seen.values()):
            raise Unstitchable("record batches under a topic id a range could not name")


def facts_tuple(f: ExchangeFacts) -> tuple:
    """`f` as plain tuples: a frozen dataclass unpickles through `dataclasses.fields` per
    object, several times slower than building it (`from_tuple`)."""
    return (f.error_codes, f.error_code, f.throttle_time_ms, f.replica_id, f.topics,
            tuple(tuple(getattr(p, n) for n in PARTITION_FIELDS) for p in f.partitions),
            f.listed_topics)


def from_tuple(t: tuple) -> ExchangeFacts:
    """`facts_tuple`'s facts back."""
    return ExchangeFacts(t[0], t[1], t[2], t[3], t[4],
                         tuple(PartitionFacts(*p) for p in t[5]), t[6])


def _noted(names: RecordingNames, reads: dict[str, str | None],
           writes: dict[str, str]) -> Checks:
    """One side's reads and writes, added to the exchange's (a name the exchange read before
    counts at its first read)."""
    for k, v in names.reads.items():
        if k not in reads and k not in writes:
            reads[k] = v
    writes.update(names.writes)
    return (names.reads, names.writes) if names.reads or names.writes else None


class Guard(Protocol):
    """Where a `--jobs` run's shipped bodies say why they differ from one process's (the
    `RangeSession`)."""

    diverged: str | None


class ShippedBodies(Bodies):
    """`Bodies` decoded in a range: each side handed out at its first ask, its names checked
    against the run's registry then, and what it taught taught then (module docstring)."""

    __slots__ = ("_got", "_opened", "guard")

    def __init__(self, ex: Exchange, decoder: BodyDecoder, got: tuple, guard: Guard) -> None:
        super().__init__(ex, decoder)
        self._got = got  # BodiesDigest's tuple after the exchange
        self.guard = guard
        self._opened = 0  # bit i: side i's names checked (0 request, 1 response)

    def _open(self, i: int) -> object:
        """Side `i` as shipped, its names checked and taught the first time (one process
        decodes it then)."""
        if not self._opened & (1 << i):
            self._opened |= 1 << i
            c = self._got[2 + i]
            if c is not None:
                self._check(c)
        return self._got[i]

    def learn(self) -> None:
        """What decoding the response taught, taught now (`BodyDecoder.learn` in one
        process: the response decoded as soon as its exchange arrives)."""
        self._open(1)

    def _take(self, i: int) -> dict | None:
        value = self._open(i)
        if value is NOT_SHIPPED:  # read after all: the consumer's `keep` was wrong
            if self.guard.diverged is None:
                self.guard.diverged = "a body the range did not ship was read"
            return None
        return value  # type: ignore[return-value]

    def _check(self, c: tuple[dict[str, str | None], dict[str, str]]) -> None:
        names = self.decoder.names
        reads, writes = c
        for k, v in reads.items():
            if names.mapping.get(k) != v and self.guard.diverged is None:
                self.guard.diverged = "a topic name a range read differs from the run's"
        names.replay(writes)

    @property
    def request(self) -> dict | None:
        if self._req is UNSET:
            self._req = self._take(0)
        return self._req  # type: ignore[return-value]

    @property
    def response(self) -> dict | None:
        if self._rsp is UNSET:
            self._rsp = self._take(1)
        return self._rsp  # type: ignore[return-value]

    @property
    def facts(self) -> ExchangeFacts:
        if self._facts is None:
            self._open(0), self._open(1)  # decoded first, as facts_of does
            c = self._got[5]
            if c is not None:
                self._check(c)
            facts = self._got[4]
            if facts is None:  # not shipped: from the bodies, as one process does
                return super().facts
            self._facts = from_tuple(facts)
        return self._facts

    def error_codes(self) -> list[int]:
        rsp = self.response
        codes = self._got[6]
        if codes is None:
            return super().error_codes()
        return codes if rsp is not None else []

    @property
    def latency_kind(self) -> str | None:
        """The report text's latency kind, worked out in the range (None: not shipped)."""
        return self._got[7]


def wants(decoder: BodyDecoder) -> tuple[DecodeContext, Records, bool]:
    """What a range needs to decode as `decoder` does: its context template, records policy,
    whether it learns names from the data."""
    return decoder.template, decoder.records, decoder.links is not None


__all__ = ["NOT_SHIPPED", "BodiesDigest", "ElidedRecords", "Guard", "Keep", "ShippedBodies",
           "elide_records", "wants"]
