"""The topic-id hold-back queue of the replication analyzer: an event that names a topic only by
an id nobody has named yet waits (with every event after it, to keep the wire order) until a
source names the id; partitions followed under an id named late merge into the name's. Apart
from `replication` so that the queue's rules read on their own; the caps that bound it
(`HOLD_CAP`, `HOLD_BYTES`) stay with `ReplicationAnalyzer.feed`, which applies them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kanalyze.analysis.events import Event, Handlers
from kanalyze.bodies.names import TopicNames

if TYPE_CHECKING:
    from kanalyze.analysis.partition_state import PartitionState

# the lists of topics (by api body) whose items may name a topic only by id
_TOPIC_LISTS: tuple[str, ...] = ("topic_data", "responses", "topics")
_NAME_KEYS = ("topic_name", "name", "topic")


class TopicIdHoldBack:
    """Mixin of `ReplicationAnalyzer`: the held events, the ids they wait for, the merging."""

    HANDLERS: Handlers
    names: TopicNames
    parts: dict[tuple[str, int], PartitionState]
    held: list[Event]
    held_bytes: int
    waiting: set[str]
    given_up: set[str]
    known: int

    def dispatch(self, ev: Event) -> None:
        if len(self.names) != self.known:
            self.merge_named()
        self.HANDLERS.dispatch(self, ev)

    def flush(self) -> None:
        """Handle the held events (in wire order) with what the registry knows now."""
        held, self.held, self.waiting, self.held_bytes = self.held, [], set(), 0
        for ev in held:
            self.dispatch(ev)

    def unnamed_ids(self, ev: Event) -> set[str]:
        """Topic ids of this event's body that no source has named (and not given up on)."""
        body = ev.body
        out: set[str] = set()
        if not isinstance(body, dict):
            return out
        for key in _TOPIC_LISTS:
            for t in body.get(key) or []:
                if not isinstance(t, dict) or any(t.get(k) for k in _NAME_KEYS):
                    continue
                tid = t.get("topic_id")
                if isinstance(tid, str) and tid not in self.names and tid not in self.given_up:
                    out.add(tid)
        return out

    def merge_named(self) -> None:
        """Partitions followed under an id the registry has named since: into the name's."""
        self.known = len(self.names)
        for topic, partition in list(self.parts):
            name = self.names.get(topic)
            if name is None:
                continue
            st = self.parts.pop((topic, partition))
            into = self.parts.get((name, partition))
            if into is None:
                st.topic = name
                self.parts[(name, partition)] = st
            else:
                into.absorb(st)
