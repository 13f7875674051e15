"""Transactional offset commits (TxnOffsetCommit) count in a group's committed offsets and lag
once their transaction commits; an aborted transaction's offsets never do."""

from __future__ import annotations

from test_analyzers import exchange, feed

from kanalyze.analysis.findings import Findings
from kanalyze.analysis.groups import GroupAnalyzer


def txn_commit(tid: str, off: int, frame: int) -> tuple:
    topics = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": off}]}]
    return exchange(
        28,
        {"transactional_id": tid, "group_id": "g", "topics": topics},
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
        frame,
    )


def end_txn(tid: str, committed: bool, frame: int, err: int = 0) -> tuple:
    return exchange(
        26, {"transactional_id": tid, "committed": committed}, {"error_code": err}, frame
    )


def test_committed_transaction_moves_the_group_offset() -> None:
    ga = GroupAnalyzer(Findings(), hw_of=lambda t, p: 50)
    feed(ga, txn_commit("tx", 20, 1))
    assert ga.to_json() == [] or ga.to_json()[0]["committed"] == {}  # not before EndTxn
    feed(ga, end_txn("tx", True, 3))
    (g,) = ga.to_json()
    assert g["committed"] == {"t-0": 20} and g["lag"]["t-0"]["lag"] == 30


def test_aborted_or_failed_transaction_commits_nothing() -> None:
    ga = GroupAnalyzer(Findings(), hw_of=lambda t, p: 50)
    feed(
        ga,
        txn_commit("tx", 20, 1),
        end_txn("tx", False, 3),
        txn_commit("ty", 30, 5),
        end_txn("ty", True, 7, err=47),
    )
    assert all(g["committed"] == {} for g in ga.to_json())
    feed(ga, txn_commit("tx", 40, 9), end_txn("tx", True, 11))
    (g,) = ga.to_json()
    assert g["committed"] == {"t-0": 40}
