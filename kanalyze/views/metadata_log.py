"""The KRaft metadata log's word on the cluster, for `kanalyze metadata`: the records of
`__cluster_metadata` that brokers fetch (decoded by `kanalyze.bodies.internal`: TopicRecord,
PartitionRecord, PartitionChangeRecord, RegisterBrokerRecord, ...) folded into the same view as
the Metadata responses, each fact with the frame of the exchange that carried it.

The log is applied once, in offset order as the capture shows it: several brokers fetch the
same records, so a record at or below the last offset applied is skipped (as the replication
analysis does). What each record changes follows Kafka's controller:

* TopicRecord names a topic id; RemoveTopicRecord deletes the topic;
* PartitionRecord states a partition whole; PartitionChangeRecord changes the fields it carries
  (an absent ISR or replica list, or leader -2, is "unchanged"; a new leader is a new leader
  epoch);
* RegisterBrokerRecord registers a broker (its first endpoint is the address shown);
  UnregisterBrokerRecord removes it; Fence/UnfenceBrokerRecord and BrokerRegistrationChangeRecord
  (fenced 1 / -1) change whether it is fenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from kanalyze.bodies.names import METADATA_TOPIC, METADATA_TOPIC_ID

if TYPE_CHECKING:
    from kanalyze.views.metadata import ClusterView

SOURCE = "metadata_log"
_ID_BYTES = bytes(15) + b"\x01"  # METADATA_TOPIC_ID on the wire
_NAME_BYTES = METADATA_TOPIC.encode()
UNCHANGED_LEADER = -2


def may_carry_log(data: bytes) -> bool:
    """Whether a Fetch request or Produce request may name `__cluster_metadata` (by name or by
    its fixed id): a cheap test on the frame, so only those exchanges are decoded."""
    return _NAME_BYTES in data or _ID_BYTES in data


def log_records(body: dict | None, is_fetch: bool) -> Iterator[tuple[int, str, dict]]:
    """(offset, record type, fields) of each decoded metadata-log record in a Fetch response
    or Produce request body (JSON form), in order."""
    if not isinstance(body, dict):
        return
    topics = body.get("responses" if is_fetch else "topic_data")
    for t in topics if isinstance(topics, list) else ():
        if not isinstance(t, dict):
            continue
        name = t.get("topic") or t.get("name") or t.get("topic_name")
        if name != METADATA_TOPIC and t.get("topic_id") != METADATA_TOPIC_ID:
            continue
        for p in t.get("partitions" if is_fetch else "partition_data") or []:
            records = p.get("records") if isinstance(p, dict) else None
            batches = records.get("batches") if isinstance(records, dict) else None
            for b in batches if isinstance(batches, list) else ():
                if not isinstance(b, dict) or b.get("is_control"):
                    continue
                for r in b.get("records") or []:
                    rec = r.get("metadata_record") if isinstance(r, dict) else None
                    if not isinstance(rec, dict):
                        continue
                    off, kind, fields = r.get("offset"), rec.get("type"), rec.get("fields")
                    if isinstance(off, int) and isinstance(kind, str) and isinstance(fields, dict):
                        yield off, kind, fields


def _ints(v: object) -> list[int] | None:
    return [x for x in v if isinstance(x, int)] if isinstance(v, list) else None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class LogFolder:
    """Applies metadata-log records to a `ClusterView`."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.applied = -1  # the last log offset applied

    def feed(self, body: dict | None, is_fetch: bool, frame: int, ts: float) -> None:
        for off, kind, fields in log_records(body, is_fetch):
            if off <= self.applied:
                continue
            self.applied = off
            self.view.log_records += 1
            apply = _APPLY.get(kind)
            if apply is not None:
                apply(self.view, fields, frame, ts)


def _topic(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    tid, name = f.get("topic_id"), f.get("name")
    if not isinstance(tid, str) or not isinstance(name, str):
        return
    t = view.topic_by_id(tid) or view.topics.get(name)
    if t is None:
        t = view.new_topic(name, tid)
    elif t["name"] != name:  # known by id until now: key it by name
        view.topics.pop(t["topic_id"] or "", None)
        view.topics[name] = t
    t.update(name=name, topic_id=tid, frame=frame, ts=ts, source=SOURCE)


def _remove_topic(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    tid = f.get("topic_id")
    t = view.topic_by_id(tid) if isinstance(tid, str) else None
    if t is None:
        return
    view.topics.pop(t["name"] or t["topic_id"], None)
    view.deleted_topics.append({"name": t["name"], "topic_id": tid, "frame": frame, "ts": ts})


def _partition_of(view: ClusterView, f: dict) -> dict | None:
    tid, index = f.get("topic_id"), _int(f.get("partition_id"))
    if not isinstance(tid, str) or index is None:
        return None
    t = view.topic_by_id(tid) or view.new_topic(None, tid)
    for p in t["partitions"]:
        if p["partition"] == index:
            return p
    p = {
        "partition": index,
        "leader": None,
        "leader_epoch": None,
        "replicas": [],
        "isr": [],
        "offline_replicas": [],
        "error": None,
    }
    t["partitions"].append(p)
    t["partitions"].sort(key=lambda q: q["partition"])
    return p


def _partition(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    p = _partition_of(view, f)
    if p is None:
        return
    p.update(
        leader=_int(f.get("leader")),
        leader_epoch=_int(f.get("leader_epoch")),
        replicas=_ints(f.get("replicas")) or [],
        isr=_ints(f.get("isr")) or [],
        frame=frame,
        source=SOURCE,
    )


def _partition_change(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    p = _partition_of(view, f)
    if p is None:
        return
    for key in ("isr", "replicas"):
        value = _ints(f.get(key))
        if value is not None:
            p[key] = value
    leader = _int(f.get("leader"))
    if leader is not None and leader != UNCHANGED_LEADER and leader != p["leader"]:
        p["leader"] = leader
        epoch = p["leader_epoch"]
        p["leader_epoch"] = epoch + 1 if isinstance(epoch, int) else None
    p.update(frame=frame, source=SOURCE)


def _register_broker(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    bid = _int(f.get("broker_id"))
    if bid is None:
        return
    ends = [e for e in f.get("end_points") or [] if isinstance(e, dict)]
    first = ends[0] if ends else {}
    fenced = f.get("fenced")
    view.brokers[bid] = {
        "id": bid,
        "host": first.get("host"),
        "port": _int(first.get("port")),
        "rack": f.get("rack"),
        "frame": frame,
        "source": SOURCE,
        "fenced": fenced if isinstance(fenced, bool) else None,
    }


def _unregister_broker(view: ClusterView, f: dict, frame: int, ts: float) -> None:
    bid = _int(f.get("broker_id"))
    if bid is not None:
        view.brokers.pop(bid, None)


def _fencing(fenced: bool | None):  # noqa: ANN202 - a record applier
    def apply(view: ClusterView, f: dict, frame: int, ts: float) -> None:
        bid = _int(f.get("broker_id", f.get("id")))
        b = view.brokers.get(bid) if bid is not None else None
        state = fenced
        if state is None:  # BrokerRegistrationChangeRecord: 1 fence, -1 unfence, 0 / absent none
            change = f.get("fenced")
            state = True if change == 1 else False if change == -1 else None
        if b is not None and state is not None:
            b.update(fenced=state, frame=frame, source=SOURCE)

    return apply


_APPLY = {
    "TopicRecord": _topic,
    "RemoveTopicRecord": _remove_topic,
    "PartitionRecord": _partition,
    "PartitionChangeRecord": _partition_change,
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fencing(True),
    "UnfenceBrokerRecord": _fencing(False),
    "BrokerRegistrationChangeRecord": _fencing(None),
}
