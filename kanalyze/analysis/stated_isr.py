"""What the cluster states about a partition, next to what the wire shows: the KRaft metadata
log (`__cluster_metadata` records fetched by brokers: partition state, broker registration and
fencing, topics created and deleted) and AlterPartition responses (the ISR the controller
committed); at the end of the run, an ISR the cluster states against the one the wire shows.
Apart from `replication`, whose analyzer mixes it in, so that the wire's rules and the
cluster's word read separately."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kanalyze.analysis.events import Event
from kanalyze.analysis.findings import Findings
from kanalyze.analysis.wire import batches, topic_of, tp
from kanalyze.bodies.names import TopicNames

if TYPE_CHECKING:
    from kanalyze.analysis.partition_state import PartitionState

# metadata-log records about brokers -> what happened to the broker
BROKER_RECORDS = {
    "RegisterBrokerRecord": "registered",
    "FenceBrokerRecord": "fenced",
    "UnfenceBrokerRecord": "unfenced",
    "UnregisterBrokerRecord": "unregistered",
}


class StatedIsr:
    """Mixin of `ReplicationAnalyzer`: the cluster's word on partitions and brokers."""

    findings: Findings
    names: TopicNames
    parts: dict[tuple[str, int], PartitionState]
    metadata_applied: int

    def part(self, topic: str, partition: int) -> PartitionState:
        raise NotImplementedError  # `ReplicationAnalyzer.part`

    def _state(self, ev: Event, topic: str, partition: int, source: str, **change: object) -> None:
        """The cluster's word on a partition (replicas, ISR, leader, epochs) changed."""
        st = self.part(topic, partition)
        stated = dict(st.stated or {})
        leader = change.get("leader")
        new_leader = isinstance(leader, int) and leader != -2 and leader != stated.get("leader")
        if new_leader and change.get("leader_epoch") is None:
            epoch = stated.get("leader_epoch")  # a new leader, a new epoch
            change["leader_epoch"] = epoch + 1 if isinstance(epoch, int) else None
        stated.update({k: v for k, v in change.items() if v is not None and v != -2})
        stated.update(source=source, frame=ev.frame)
        st.stated = stated
        st.sources.add(source)
        epoch = stated.get("leader_epoch")
        if isinstance(epoch, int) and (st.leader_epoch is None or epoch > st.leader_epoch):
            st.leader_epoch = epoch
        st.entry(ev, "isr_stated")

    def metadata_log(self, ev: Event, p: dict) -> None:
        """Records of `__cluster_metadata` (decoded by `kanalyze.bodies.internal`), each once
        however many brokers fetch it: partition state, broker registration and fencing."""
        for b in batches(p.get("records")):
            for r in b.get("records") or []:
                off, rec = r.get("offset"), r.get("metadata_record")
                if not isinstance(off, int) or off <= self.metadata_applied:
                    continue
                self.metadata_applied = off
                fields = rec.get("fields") if isinstance(rec, dict) else None
                if isinstance(rec, dict) and isinstance(fields, dict):
                    self._metadata_record(ev, str(rec.get("type")), fields)

    def _metadata_record(self, ev: Event, kind: str, f: dict) -> None:
        if kind in ("PartitionRecord", "PartitionChangeRecord"):
            tid, index = f.get("topic_id"), f.get("partition_id")
            if not isinstance(tid, str) or not isinstance(index, int):
                return
            self._state(
                ev,
                tid,
                index,
                "metadata_log",
                isr=f.get("isr"),
                replicas=f.get("replicas"),
                leader=f.get("leader"),
                leader_epoch=f.get("leader_epoch"),
                partition_epoch=f.get("partition_epoch"),
            )
        elif kind in BROKER_RECORDS:
            broker, what = f.get("broker_id", f.get("id")), BROKER_RECORDS[kind]
            self.findings.add(
                "info",
                f"broker_{what}",
                f"broker {broker} {what} (metadata log)",
                [ev.frame],
                ev.ts_s,
                broker=broker,
                broker_epoch=f.get("broker_epoch", f.get("epoch")),
            )
        elif kind in ("TopicRecord", "RemoveTopicRecord"):
            tid = f.get("topic_id")
            name = f.get("name") or self.names.get(tid if isinstance(tid, str) else None) or tid
            what = "created" if kind == "TopicRecord" else "deleted"
            self.findings.add(
                "info",
                f"topic_{what}",
                f"topic {name} {what} (metadata log)",
                [ev.frame],
                ev.ts_s,
                topic=name,
                topic_id=tid,
            )

    def alter_partition_response(self, ev: Event) -> None:
        """The controller's answer to a leader's AlterPartition: the ISR it committed."""
        for t in (ev.body or {}).get("topics") or []:
            topic = topic_of(t)
            for p in t.get("partitions") or []:
                index = p.get("partition_index")
                if p.get("error_code", 0) or not isinstance(index, int):
                    continue
                self._state(
                    ev,
                    topic,
                    index,
                    "alter_partition",
                    isr=p.get("isr"),
                    leader=p.get("leader_id"),
                    leader_epoch=p.get("leader_epoch"),
                    partition_epoch=p.get("partition_epoch"),
                )

    def check_stated(self) -> None:
        """End of the run: a follower the wire shows in sync, or not, against the cluster's word."""
        for st in self.parts.values():
            isr = st.stated.get("isr") if st.stated else None
            if not isinstance(isr, list) or not st.followers:
                continue
            differ = sorted(f for f in st.followers if (f in isr) != (f in st.isr))
            if not differ:
                continue
            stated: dict = st.stated  # type: ignore[assignment]
            frame = stated.get("frame")
            self.findings.add(
                "warning",
                "isr_disagreement",
                f"{tp(st.topic, st.partition)}: the cluster states ISR {sorted(isr)} "
                f"({stated.get('source')}), the wire shows followers {sorted(st.isr)} in sync",
                [frame] if isinstance(frame, int) else [],
                None,
                topic=st.topic,
                partition=st.partition,
                stated_isr=sorted(isr),
                inferred_isr=sorted(st.isr),
                replicas=differ,
            )
