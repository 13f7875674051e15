"""What the whole run knows that tells an orphan response's api: shared by its connections.

An orphan's own connection is the best witness (kanalyze/inference.py), but often it says
nothing: a client's bootstrap connection sends ApiVersions and Metadata and closes, and its
later connections send the same ApiVersions version. So every request adds its (api, version)
to the pools of its client id, its client's address and the whole capture; an orphan whose
api is known but not its version outlives its connection here (`late`) until a request
elsewhere tells the version, `SETTLE_LATE` more requests went by, or the run ends. One
`Evidence` per `Engine` run, with the run's layout-search budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissectors import DecodeError, read_uvarint
from kanalyze.inference import LayoutBudget

ANY_CLIENT = "\x00any"  # pool of what every client sent (no real client id)
HOST = "\x00host "  # pool key prefix: what one client address sent
MAX_POOLS = 1024  # pools kept (client ids and addresses)
MAX_PAIRS = 256  # (api, version) pairs kept per pool
MAX_SENDERS = 64  # client ids remembered per pair of a shared pool
CONSISTENT = 2  # apis two client ids must both send, in the same versions, to count as alike
SETTLE_LATE = 64  # requests (anywhere) a late orphan waits for before it is given up on

# settles a late orphan: (entry, final) -> whether it was emitted (Correlator._settle_orphan)
Settle = Callable[[list[Any], bool], bool]
Pairs = dict[tuple[int, int], tuple[str | None, ...]]  # (api, version) -> who sent it


class Evidence:
    """The (api, version) pairs sent per pool, the orphans of closed connections still waiting
    for evidence, and the run's layout-search budget."""

    __slots__ = ("pools", "software", "requests", "late", "changed", "budget", "hosts")

    def __init__(self, budget: LayoutBudget | None = None) -> None:
        # per client id, per client address and for the whole capture: who sent what
        self.pools: dict[str | None, Pairs] = {}
        # the software each client id announced (ApiVersions v3+ `client_software_name/version`)
        self.software: dict[str | None, str] = {}
        self.requests = 0  # requests seen in the run (the late orphans' clock)
        # [settle, orphan entry, requests count at which it is given up]
        self.late: list[tuple[Settle, list[Any], int]] = []
        self.changed = False  # a pool learnt a pair since the late orphans were last tried
        self.budget = budget if budget is not None else LayoutBudget()
        # hosts' pools are kept once the run met an orphan (a capture that starts with its
        # handshakes has none, and a pool per client address would be pure cost there)
        self.hosts = False

    def sent(self, cid: str | None, shared: tuple[str, ...], pair: tuple[int, int]) -> None:
        """A request of `pair` was sent by client id `cid`: noted in its own pool and the
        `shared` ones (its host's, the capture's). Tries the late orphans when that is news or
        when one of them has waited long enough."""
        self.requests += 1
        pools = self.pools
        for who in (cid, *shared):
            seen = pools.get(who)
            if seen is None:
                if len(pools) >= MAX_POOLS:
                    continue
                seen = pools[who] = {}
            senders = seen.get(pair)
            if senders is None:
                if len(seen) >= MAX_PAIRS:
                    continue
                seen[pair] = (cid,)  # a tuple: nearly always one or a few senders
                self.changed = True
            elif cid not in senders and len(senders) < MAX_SENDERS:
                seen[pair] = (*senders, cid)
        if self.late and (self.changed or self.requests >= self.late[0][2]):
            self.settle_late()

    def announced(self, cid: str | None, data: bytes, body_at: int) -> None:
        """An ApiVersions v3+ request of `cid`: remember the software it names."""
        if len(self.software) < MAX_POOLS * MAX_SENDERS:
            sw = client_software(data, body_at)
            if sw is not None:
                self.software[cid] = sw

    def told(self, key: str | None, cid: str | None) -> list[tuple[int, int]]:
        """The pairs of pool `key` that can tell an orphan of client id `cid` a version: those
        sent by `cid` itself or by a client id alike (`alike`); when `cid` is None (its
        connection sent nothing), all of them if every client id of the pool is alike. A
        client library picks one version of an api on all its connections; two programs on
        one host need not, so what another program sent tells nothing."""
        pool = self.pools.get(key)
        if not pool:
            return []
        if cid is None:  # any of the pool's programs: only one program may be in it
            ids = sorted({c for senders in pool.values() for c in senders}, key=str)
            if all(self.alike(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]):
                return list(pool)
            return []
        verdicts: dict[str | None, bool] = {}
        out = []
        for pair, senders in pool.items():
            for c in senders:
                ok = verdicts.get(c)
                if ok is None:
                    ok = verdicts[c] = self.alike(cid, c)
                if ok:
                    out.append(pair)
                    break
        return out

    def alike(self, cid: str | None, other: str | None) -> bool:
        """Whether client ids `cid` and `other` are the same program as far as the capture
        shows: the same id, the same software announced, or at least CONSISTENT apis both
        sent, each in the same versions, and no api both sent in different versions."""
        if cid == other:
            return True
        if cid is None:
            return False
        sw = self.software.get(cid)
        if sw is not None and sw == self.software.get(other):
            return True
        mine, theirs = _versions(self.pools.get(cid)), _versions(self.pools.get(other))
        common = mine.keys() & theirs.keys()
        return len(common) >= CONSISTENT and all(mine[a] == theirs[a] for a in common)

    def wait(self, settle: Settle, entry: list[Any]) -> None:
        """Keep an orphan of a closed connection until more evidence (or none) comes."""
        self.late.append((settle, entry, self.requests + SETTLE_LATE))

    def settle_late(self, final: bool = False, before_ts: int | None = None) -> None:
        """Try the late orphans again: emitted when inferred now, or given up on (undecoded)
        when `final`, older than `before_ts` or past their wait."""
        keep = []
        for item in self.late:
            settle, entry, deadline = item
            old = before_ts is not None and entry[0].pdu.last_ts < before_ts
            if not settle(entry, final or old or self.requests >= deadline):
                keep.append(item)
        self.late = keep
        self.changed = False


def client_software(data: bytes, body_at: int) -> str | None:
    """`name/version` from an ApiVersions v3+ request body (two compact strings), or None."""
    try:
        out = []
        pos, end = body_at, len(data)
        for _ in range(2):
            n, pos = read_uvarint(data, pos, end)
            if n < 1 or pos + n - 1 > end:
                return None
            out.append(bytes(data[pos : pos + n - 1]).decode("utf-8", "replace"))
            pos += n - 1
        return "/".join(out)
    except DecodeError:
        return None


def _versions(pool: Pairs | None) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for a, v in pool or ():
        out.setdefault(a, set()).add(v)
    return out
