"""The cluster as the capture last saw it, kcat -L style: brokers, controller, topics with
their partitions, leaders, replicas, ISR and offline replicas, each with the frame it came from.

Why "last seen": Metadata responses are snapshots; a later one replaces an earlier one's broker
list and the topics it names. A topic a later response does not name keeps its last snapshot
(clients often ask for a few topics only). Every Metadata version carries the same shape;
older versions lack some fields (rack, controller, topic ids), shown as missing. The KRaft
metadata log's records change the same view as they come (`metadata_log.py`); each broker,
topic and partition says which source and frame it was last seen in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kanalyze.correlation import Exchange
from kanalyze.views.table import Out, clock

METADATA = 3
SCHEMA = "kanalyze.metadata/1"
RESPONSE = "metadata_response"


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _ints(v: object) -> list[int]:
    return [x for x in v if isinstance(x, int)] if isinstance(v, list) else []


def _error(node: dict) -> str | None:
    code = node.get("error_code")
    if not code:
        return None
    name = node.get("error_code_name")
    return name if isinstance(name, str) else f"error {code}"


@dataclass(slots=True)
class ClusterView:
    """Folds Metadata responses (in capture order) into the last-seen cluster."""

    responses: int = 0
    log_records: int = 0  # metadata-log records applied (metadata_log.py)
    cluster_id: str | None = None
    controller: int | None = None
    brokers: dict[int | None, dict[str, object]] = field(default_factory=dict)
    brokers_frame: int | None = None  # the last Metadata response's broker list
    brokers_ts: float | None = None
    topics: dict[str, dict] = field(default_factory=dict)  # by name, else by topic id
    deleted_topics: list[dict[str, object]] = field(default_factory=list)

    def topic_by_id(self, tid: str) -> dict | None:
        for t in self.topics.values():
            if t["topic_id"] == tid:
                return t
        return None

    def new_topic(self, name: str | None, tid: str) -> dict:
        """An entry for a topic the metadata log names before any Metadata response does."""
        t = self.topics[name or tid] = {
            "name": name,
            "topic_id": tid,
            "is_internal": None,
            "error": None,
            "frame": None,
            "ts": None,
            "source": None,
            "partitions": [],
        }
        return t

    def feed(self, ex: Exchange, rsp: dict | None) -> None:
        if ex.api_key != METADATA or rsp is None or ex.response is None:
            return
        frame = ex.response.pdu.last_pkt
        ts = round(ex.response.pdu.last_ts / 1e9, 6)
        self.responses += 1
        brokers = rsp.get("brokers")
        if isinstance(brokers, list):
            self.brokers = {
                _int(b.get("node_id")): {
                    "id": _int(b.get("node_id")),
                    "host": b.get("host"),
                    "port": _int(b.get("port")),
                    "rack": b.get("rack"),
                    "frame": frame,
                    "source": RESPONSE,
                    "fenced": None,
                }
                for b in brokers
                if isinstance(b, dict)
            }
            self.brokers_frame, self.brokers_ts = frame, ts
        cid = rsp.get("cluster_id")
        if isinstance(cid, str):
            self.cluster_id = cid
        ctrl = _int(rsp.get("controller_id"))
        if ctrl is not None and ctrl >= 0:
            self.controller = ctrl
        for t in rsp.get("topics") or []:
            if isinstance(t, dict):
                self._topic(t, frame, ts)

    def _topic(self, t: dict, frame: int, ts: float) -> None:
        name = t.get("name")
        tid = t.get("topic_id")
        key = name if isinstance(name, str) and name else tid if isinstance(tid, str) else None
        if key is None:
            return
        parts = []
        for p in t.get("partitions") or []:
            if not isinstance(p, dict):
                continue
            parts.append(
                {
                    "partition": _int(p.get("partition_index")),
                    "leader": _int(p.get("leader_id")),
                    "leader_epoch": _int(p.get("leader_epoch")),
                    "replicas": _ints(p.get("replica_nodes")),
                    "isr": _ints(p.get("isr_nodes")),
                    "offline_replicas": _ints(p.get("offline_replicas")),
                    "error": _error(p),
                    "frame": frame,
                    "source": RESPONSE,
                }
            )
        parts.sort(key=lambda p: p["partition"] if p["partition"] is not None else -1)
        if isinstance(tid, str) and key != tid:
            self.topics.pop(tid, None)  # known by id from the metadata log until now
        self.topics[key] = {
            "name": name if isinstance(name, str) else None,
            "topic_id": tid if isinstance(tid, str) else None,
            "is_internal": t.get("is_internal") if isinstance(t.get("is_internal"), bool) else None,
            "error": _error(t),
            "frame": frame,
            "ts": ts,
            "source": RESPONSE,
            "partitions": parts,
        }

    def to_json(self, files: list[str]) -> dict[str, object]:
        """The document of `kanalyze metadata --json` (docs/stats.md)."""
        brokers = sorted(self.brokers.values(), key=lambda b: (b["id"] is None, b["id"] or 0))
        return {
            "schema": SCHEMA,
            "files": files,
            "metadata_responses": self.responses,
            "metadata_log_records": self.log_records,
            "cluster_id": self.cluster_id,
            "controller": self.controller,
            "brokers": brokers,
            "brokers_ts": self.brokers_ts,
            "topics": [self.topics[k] for k in sorted(self.topics)],
            "deleted_topics": self.deleted_topics,
        }


def _nodes(v: object) -> str:
    if not isinstance(v, list) or not v:
        return "-"
    return ",".join(str(x) for x in v)


def render(doc: dict, out: Out) -> None:
    """kcat -L's layout, with the frame each part was last seen in."""
    n, logged = doc["metadata_responses"], doc.get("metadata_log_records", 0)
    if not n and not logged:
        out.line("No Metadata response or metadata-log record in the capture: nothing to show.")
        return
    brokers = doc["brokers"]
    seen = []
    if n:
        seen.append(f"{n} Metadata response{'s' if n != 1 else ''}")
    if logged:
        seen.append(f"{logged} metadata-log record{'s' if logged != 1 else ''} (KRaft)")
    out.line(
        f"Metadata as last seen in {' and '.join(seen)}"
        + (f", cluster {doc['cluster_id']}" if doc["cluster_id"] else "")
    )
    shown = doc["brokers_ts"] is not None and any(b["source"] == RESPONSE for b in brokers)
    out.line(
        f" {len(brokers)} broker{'s' if len(brokers) != 1 else ''}:"
        + (f"  (frame {brokers[0]['frame']}, {clock(doc['brokers_ts'])})" if shown else "")
    )
    for b in brokers:
        where = f"{b['host']}:{b['port']}"
        rack = f", rack {b['rack']}" if b["rack"] else ""
        ctrl = "  (controller)" if b["id"] is not None and b["id"] == doc["controller"] else ""
        notes = ["fenced"] if b["fenced"] else []
        if b["source"] != RESPONSE:
            notes.append(f"metadata log, frame {b['frame']}")
        extra = f"  ({', '.join(notes)})" if notes else ""
        out.line(f"  broker {b['id']} at {where}{rack}{ctrl}{extra}")
    if doc["controller"] is not None and not any(b["id"] == doc["controller"] for b in brokers):
        out.line(f"  controller: broker {doc['controller']}")
    topics = doc["topics"]
    out.line(f" {len(topics)} topic{'s' if len(topics) != 1 else ''}:")
    for t in topics:
        parts = t["partitions"]
        label = t["name"] if t["name"] else f"(id {t['topic_id']})"
        extra = [f"id {t['topic_id']}"] if t["name"] and t["topic_id"] else []
        if t["is_internal"]:
            extra.append("internal")
        if t["source"] == "metadata_log":
            extra.append("metadata log")
        if t["frame"] is not None:
            extra.append(f"frame {t['frame']}")
        err = f": {t['error']}" if t["error"] else ""
        out.line(
            f'  topic "{label}" with {len(parts)} partition{"s" if len(parts) != 1 else ""}'
            f"{err}  ({', '.join(extra)})"
        )
        for p in parts:
            line = (
                f"    partition {p['partition']}, leader {p['leader']}, "
                f"replicas: {_nodes(p['replicas'])}, "
                f"isrs: {_nodes(p['isr'])}"
            )
            if p["offline_replicas"]:
                line += f", offline: {_nodes(p['offline_replicas'])}"
            if p["error"]:
                line += f": {p['error']}"
            if p["frame"] != t["frame"]:  # changed since (a PartitionChangeRecord)
                line += (
                    f"  ({'metadata log, ' if p['source'] != RESPONSE else ''}frame {p['frame']})"
                )
            out.line(line)
    for d in doc.get("deleted_topics") or []:
        out.line(
            f'  deleted topic "{d["name"] or d["topic_id"]}"  (metadata log, frame {d["frame"]})'
        )
