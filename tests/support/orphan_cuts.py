"""Orphan inference measured on mid-stream cuts: right, wrong or undecoded, and why.

A capture cut at packet k (live sniffing started there) has orphan responses: their request
was sent before the cut. The uncut capture says what each answered, so every orphan is scored:
`right` (inferred with the uncut capture's api and version), `wrong` (inferred otherwise: the
one outcome the orphan policy must never produce) or `undecoded` (with the `not_inferred`
reason kanalyze gave). Used by tests/functional/test_damage.py and by hand::

    python -m tests.support.orphan_cuts [captures/lib_acks.pcap ...] [--every 3] [-v]

With no capture named, every real-client capture in captures/*.pcap is cut at every
`--every`-th payload packet; `--public` adds the third-party captures next to the repo.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kanalyze.correlation import Exchange
from kanalyze.inference import response_fits
from kanalyze.session import Session
from tests.support import damage as D

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent.parent / "shared" / "captures-public"


@dataclass(frozen=True, slots=True)
class Orphan:
    """One orphan response of a cut: what the uncut capture says it answered and what the cut
    run made of it."""

    capture: str
    cut: int
    correlation_id: int | None
    truth: tuple[int | None, int | None]
    got: tuple[int | None, int | None]
    reason: str  # the not_inferred reason, or the inferred evidence
    # where the cut capture shows a request of the truth's api and version: "connection",
    # "client id" (another connection of its client id), "host" (another connection of its
    # client's address), "capture" (any client), or "" (nowhere: no request tells the version)
    evidence: str = ""
    # the bytes and the cut capture tell it: the truth is the only (api, version) whose
    # response layout fits the frame, or the only fitting one that the orphan's own client id
    # (the uncut capture says which) sent in the cut capture
    decidable: bool = False

    @property
    def outcome(self) -> str:
        if self.got[0] is None:
            return "undecoded"
        return "right" if self.got == self.truth else "wrong"


@dataclass(slots=True)
class Tally:
    orphans: list[Orphan] = field(default_factory=list)
    cuts: int = 0
    compared: int = 0  # exchanges with both sides inside a cut, identical to the uncut run's

    def count(self, outcome: str) -> int:
        return sum(o.outcome == outcome for o in self.orphans)

    def line(self) -> str:
        decidable = [o for o in self.orphans if o.decidable]
        right = sum(o.outcome == "right" for o in decidable)
        return (
            f"{self.cuts} cuts, {len(self.orphans)} orphans: right {self.count('right')}, "
            f"wrong {self.count('wrong')}, undecoded {self.count('undecoded')}; "
            f"decidable {len(decidable)}, of which right {right}"
        )


def run(path: Path) -> list[Exchange]:
    return list(Session([str(path)]).exchanges())


def _reason(e: Exchange) -> str:
    if e.inferred is not None:
        return str(e.inferred.get("from"))
    for d in e.response.diagnostics if e.response is not None else ():
        if d.code.value == "not_inferred":
            return d.message.removeprefix("request not captured; api not inferred: ")
    return "?"


def score_cut(name: str, clean: list[Exchange], k: int, cut: list[Exchange], tally: Tally) -> None:
    """Score the orphans of the cut at k (packets 1..k gone) against the uncut run."""
    tally.cuts += 1
    by_resp = {(e.conn.client, e.response.pdu.last_ts): e for e in cut if e.response is not None}
    sent: dict[str | None, set[tuple[int | None, int | None]]] = {}
    for x in cut:
        if x.request is not None:
            sent.setdefault(x.client_id, set()).add((x.api_key, x.api_version))
    for e in clean:
        if e.request is None or e.response is None:
            continue
        if not (e.request.pdu.first_pkt <= k < e.response.pdu.first_pkt):
            continue
        mine = by_resp.get((e.conn.client, e.response.pdu.last_ts))
        if mine is None or mine.status != "request_missing":
            got: tuple[int | None, int | None] = (None, None)
            why = "not reported as an orphan"
        else:
            got, why = (mine.api_key, mine.api_version), _reason(mine)
        truth = (e.api_key, e.api_version)
        where = _evidence(e, truth, cut)
        fits = set(response_fits(bytes(e.response.pdu.data)) or ())
        decidable = fits == {truth} or fits & sent.get(e.client_id, set()) == {truth}
        tally.orphans.append(Orphan(name, k, e.correlation_id, truth, got, why, where, decidable))


def _evidence(e: Exchange, truth: tuple, cut: list[Exchange]) -> str:
    """The nearest place the cut capture shows a request of `truth` (see Orphan.evidence)."""
    host = e.conn.client.rsplit(":", 1)[0]
    best = ""
    order = ("", "capture", "host", "client id", "connection")
    for x in cut:
        if x.request is None or (x.api_key, x.api_version) != truth:
            continue
        if x.conn.client == e.conn.client:
            where = "connection"
        elif x.client_id == e.client_id:
            where = "client id"
        elif x.conn.client.rsplit(":", 1)[0] == host:
            where = "host"
        else:
            where = "capture"
        if order.index(where) > order.index(best):
            best = where
    return best


def measure(captures: Iterable[Path], every: int, tally: Tally, workdir: Path) -> Tally:
    for src in captures:
        clean = run(src)
        pcap = D.read_pcap(src)
        for k in D.payload_indexes(pcap)[::every]:
            path = D.write_pcap(workdir / "cut.pcap", pcap, D.cut(pcap.records, k))
            score_cut(src.name, clean, k, run(path), tally)
    return tally


def _classify(reason: str) -> str:
    """The reasons, grouped (numbers and names left out)."""
    for key in (
        "no request seen",
        "layout search skipped",
        "ambiguous",
        "no response layout",
        "and no request tells which",
        "gap",
        "not reported",
    ):
        if key in reason:
            return key
    return reason[:60]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("captures", nargs="*", type=Path)
    p.add_argument("--every", type=int, default=1, help="cut at every Nth payload packet")
    p.add_argument("--public", action="store_true", help="add ../shared/captures-public")
    p.add_argument("-v", "--verbose", action="store_true", help="list every undecoded orphan")
    args = p.parse_args(argv)
    caps = args.captures or sorted((ROOT / "captures").glob("*.pcap"))
    if args.public:
        caps += sorted(PUBLIC.glob("*.pcap"))
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        for src in caps:
            one = measure([src], args.every, Tally(), Path(tmp))
            print(f"{src.name}: {one.line()}")
            tally.orphans += one.orphans
            tally.cuts += one.cuts
    print(f"all: {tally.line()}")
    reasons = Counter(
        (_classify(o.reason), o.evidence or "nowhere", o.decidable)
        for o in tally.orphans
        if o.outcome == "undecoded"
    )
    for (why, where, decidable), n in reasons.most_common():
        tell = "decidable" if decidable else "undecidable"
        print(f"  undecoded {n:5}: {why} (its api/version sent: {where}; {tell})")
    for o in tally.orphans:
        if o.outcome == "wrong" or (args.verbose and o.outcome == "undecoded" and o.decidable):
            print(
                f"  {o.outcome} {o.capture} cut {o.cut} corr {o.correlation_id}: truth "
                f"{o.truth} got {o.got} (sent: {o.evidence or 'nowhere'}): {o.reason}"
            )
    return 1 if tally.count("wrong") else 0


if __name__ == "__main__":
    sys.exit(main())
