"""Which Kafka apis a client sends together: the kinds of work a client does.

Orphan inference (kanalyze/inference.py) asks it when a response's bytes fit the layouts of
several apis: an api the client was seen sending, or one of the same kind, is a rival that
keeps the response undecoded; an api of a kind the client never showed is not. A consumer
that sent LeaveGroup after a capture began may well have sent a Heartbeat before it (both
answer with an error code and a throttle time); it does not send AlterReplicaLogDirs.
"""

from __future__ import annotations

GROUP, TXN, IDEMPOTENT, FETCH, ADMIN, BROKER, SHARE, AUTH = range(8)
# apis that belong to more kinds than sending them shows: FindCoordinator is sent by every
# client with a coordinator, InitProducerId by idempotent producers as well as transactional
_SHOWS: dict[int, tuple[int, ...]] = {10: (), 22: (IDEMPOTENT,)}

_KINDS: dict[int, tuple[int, ...]] = {
    0: (IDEMPOTENT,),  # Produce: an idempotent producer asks for a producer id first
    1: (FETCH,),
    2: (FETCH,),
    8: (GROUP,),  # OffsetCommit
    9: (GROUP,),
    10: (GROUP, TXN, SHARE),  # FindCoordinator
    11: (GROUP,),
    12: (GROUP,),
    13: (GROUP,),
    14: (GROUP,),
    17: (AUTH,),
    22: (IDEMPOTENT, TXN),
    23: (FETCH,),
    24: (TXN,),
    25: (TXN,),
    26: (TXN,),
    28: (TXN,),
    36: (AUTH,),
    68: (GROUP,),
    69: (GROUP, ADMIN),
    76: (SHARE,),
    77: (SHARE, ADMIN),
    78: (SHARE,),
    79: (SHARE,),
}
for _api in (15, 16, 19, 20, 21, 29, 30, 31, 32, 33, 34, 35, 37, 38, 39, 40, 41, 42, 43, 44):
    _KINDS[_api] = (ADMIN,)
for _api in (45, 46, 47, 48, 49, 50, 51, 57, 60, 61, 65, 66, 74, 75, 80, 81):
    _KINDS[_api] = (ADMIN,)
for _api in (4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 58, 59, 62, 63, 64, 67, 70, 73, 82, 83, 84):
    _KINDS[_api] = (BROKER,)
for _api in (85, 86, 87):
    _KINDS[_api] = (BROKER,)


def kinds(api: int) -> tuple[int, ...]:
    """The kinds of work `api` belongs to (none for the ones every client sends: ApiVersions,
    Metadata, telemetry)."""
    return _KINDS.get(api, ())


def rivals(candidates: set[tuple[int, int]], sent: set[tuple[int, int]]) -> set[int]:
    """The apis of the (api, version) `candidates` a client that sent the pairs `sent` may
    have sent: those it sent in that version (a client uses one version of an api; one it
    sent in other versions is not a rival), and those of a kind it showed."""
    apis = {a for a, _v in sent}
    shown = {k for a in apis for k in _SHOWS.get(a, kinds(a))}
    return {
        a
        for a, v in candidates
        if (a, v) in sent or (a not in apis and shown.intersection(kinds(a)))
    }
