"""Error codes that are part of a protocol's normal flow, not failures.

Why: a reader of the errors table at 3 a.m. should not chase the `MEMBER_ID_REQUIRED` every
consumer gets on its first JoinGroup (KIP-394: the broker hands out the member id and the
client joins again), nor the `REBALANCE_IN_PROGRESS` a Heartbeat returns to tell a member to
rejoin. They are still counted, marked expected, with the reason.
"""

from __future__ import annotations

JOIN_GROUP, HEARTBEAT = 11, 12
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 79, 27
# KIP-394's two-step join exists from JoinGroup v4 ("Starting from version 4, the client needs
# to issue a second request to join group"): an older client cannot act on MEMBER_ID_REQUIRED
# (Sarama 1.22's v1 join gives up), so below v4 it is a real failure, by the broker
FIRST_TWO_STEP_JOIN = 4


def expected_error(
    api_key: int | None, code: int, request: dict | None, api_version: int | None = None
) -> str | None:
    """Why this error is expected here, or None when it is a real error (`api_version` None:
    not known, judged by the code alone)."""
    if api_key == JOIN_GROUP and code == MEMBER_ID_REQUIRED:
        member = (request or {}).get("member_id")
        two_step = api_version is None or api_version >= FIRST_TWO_STEP_JOIN
        if not member and two_step:  # the first join of a member (no id yet)
            return "first JoinGroup of a member: the broker assigns the member id (KIP-394)"
    if api_key == HEARTBEAT and code == REBALANCE_IN_PROGRESS:
        return "the broker tells the member to rejoin: a rebalance is under way"
    return None
