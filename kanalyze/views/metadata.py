"""The cluster as the capture last saw it, kcat -L style: brokers, controller, topics with
their partitions, leaders, replicas, ISR and offline replicas, each with the frame it came from.

Why "last seen": Metadata responses are snapshots; a later one replaces an earlier one's broker
list and the topics it names. A topic a later response does not name keeps its last snapshot
(clients often ask for a few topics only). Every Metadata version carries the same shape;
older versions lack some fields (rack, controller, topic ids), shown as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kanalyze.correlation import Exchange
from kanalyze.views.table import Out, clock

METADATA = 3
SCHEMA = "kanalyze.metadata/1"


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
    cluster_id: str | None = None
    controller: int | None = None
    brokers: list[dict[str, object]] = field(default_factory=list)
    brokers_frame: int | None = None
    brokers_ts: float | None = None
    topics: dict[str, dict[str, object]] = field(default_factory=dict)

    def feed(self, ex: Exchange, rsp: dict | None) -> None:
        if ex.api_key != METADATA or rsp is None or ex.response is None:
            return
        frame = ex.response.pdu.last_pkt
        ts = round(ex.response.pdu.last_ts / 1e9, 6)
        self.responses += 1
        brokers = rsp.get("brokers")
        if isinstance(brokers, list):
            self.brokers = sorted(
                (
                    {
                        "id": _int(b.get("node_id")),
                        "host": b.get("host"),
                        "port": _int(b.get("port")),
                        "rack": b.get("rack"),
                    }
                    for b in brokers
                    if isinstance(b, dict)
                ),
                key=lambda b: (b["id"] is None, b["id"] or 0),
            )
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
                }
            )
        parts.sort(key=lambda p: p["partition"] if p["partition"] is not None else -1)
        self.topics[key] = {
            "name": name if isinstance(name, str) else None,
            "topic_id": tid if isinstance(tid, str) else None,
            "is_internal": t.get("is_internal") if isinstance(t.get("is_internal"), bool) else None,
            "error": _error(t),
            "frame": frame,
            "ts": ts,
            "partitions": parts,
        }

    def to_json(self, files: list[str]) -> dict[str, object]:
        """The document of `kanalyze metadata --json` (docs/metadata.md)."""
        return {
            "schema": SCHEMA,
            "files": files,
            "metadata_responses": self.responses,
            "cluster_id": self.cluster_id,
            "controller": self.controller,
            "brokers": [{**b, "frame": self.brokers_frame} for b in self.brokers],
            "brokers_ts": self.brokers_ts,
            "topics": [self.topics[k] for k in sorted(self.topics)],
        }


def _nodes(v: object) -> str:
    if not isinstance(v, list) or not v:
        return "-"
    return ",".join(str(x) for x in v)


def render(doc: dict, out: Out) -> None:
    """kcat -L's layout, with the frame each part was last seen in."""
    n = doc["metadata_responses"]
    if not n:
        out.line("No Metadata response in the capture: nothing to show.")
        return
    brokers = doc["brokers"]
    out.line(
        f"Metadata as last seen in {n} Metadata response{'s' if n != 1 else ''}"
        + (f", cluster {doc['cluster_id']}" if doc["cluster_id"] else "")
    )
    out.line(
        f" {len(brokers)} broker{'s' if len(brokers) != 1 else ''}:"
        + (f"  (frame {brokers[0]['frame']}, {clock(doc['brokers_ts'])})" if brokers else "")
    )
    for b in brokers:
        where = f"{b['host']}:{b['port']}"
        rack = f", rack {b['rack']}" if b["rack"] else ""
        ctrl = "  (controller)" if b["id"] is not None and b["id"] == doc["controller"] else ""
        out.line(f"  broker {b['id']} at {where}{rack}{ctrl}")
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
            out.line(line)
