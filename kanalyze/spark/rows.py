"""Exchange → row of the Spark `exchanges` table: the NDJSON names and meanings, file
pointers, and the exchange's facts (error code, topics, partitions with their offsets and
record counts) from the body service. Pure Python plus pyarrow (no pyspark).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from dissectors import DecodeContext, Limits
from kanalyze.bodies import Bodies, BodyDecoder
from kanalyze.correlation import Exchange
from kanalyze.jsontext import dumps
from kanalyze.spark.schemas import PARTITION_FIELDS, pointer


def _split_endpoint(ep: str) -> tuple[str, int]:
    host, _, port = ep.rpartition(":")
    return host.strip("[]"), int(port)


def stable_conn_id(file_id: str, frame: int, client: str, broker: str) -> str:
    """The id of one connection incarnation from where it starts: the content identity of the
    file holding its first packet, that packet's frame number, and its endpoints. The same
    capture gives the same ids however its path was spelled (relative, absolute, URI, a copy),
    and a reused 4-tuple gets a new id per incarnation."""
    return hashlib.sha1(f"{file_id}|{frame}|{client}|{broker}".encode()).hexdigest()[:16]


def row_context(topic_ids: dict[str, str] | None = None) -> DecodeContext:
    """The rows' decode context: values cut to 64 bytes (rows stay small), topic ids named by
    the user's --topic-ids mapping."""
    return DecodeContext(limits=Limits(max_value_bytes=64), topic_names=dict(topic_ids or {}))


def facts_context(ctx: DecodeContext, with_bodies: bool) -> DecodeContext:
    """`ctx` for the rows' decoding: without body columns only facts are read from the bodies
    (counts, offsets, sizes: batch headers), so record batches are not decoded record by
    record (`DecodeContext.record_headers`); with them, in full (the JSON is written)."""
    return replace(ctx, record_headers=not with_bodies)


@dataclass(slots=True)
class RowBuilder:
    """Exchange → exchanges-table row (the NDJSON names and meanings, plus file pointers)."""

    files: list[str]
    capture_id: str = ""
    decode: bool = True
    ctx: DecodeContext | None = None  # default: values cut to 64 bytes (rows stay small)
    with_bodies: bool = False  # request_body/response_body as JSON text (redacted)
    bodies: BodyDecoder = field(init=False)  # with the capture group's topic-name registry
    incarnations: dict[tuple[int, int], str] = field(
        default_factory=dict
    )  # (engine id, conn id) -> conn_id

    def __post_init__(self) -> None:
        base = self.ctx or row_context()
        # each capture group its own registry, preloaded with the user's --topic-ids
        self.bodies = BodyDecoder(facts_context(
            replace(base, topic_names=dict(base.topic_names)), self.with_bodies))

    def conn_id(
        self, engine_key: int, conn_no: int, client: str, broker: str, incarnation: int
    ) -> str:
        """A connection id from the capture group's name (`export -T parquet`, one process)."""
        k = (engine_key, conn_no)
        cid = self.incarnations.get(k)
        if cid is None:
            h = hashlib.sha1(
                f"{self.capture_id}|{client}|{broker}|{incarnation}".encode()
            ).hexdigest()[:16]
            cid = self.incarnations[k] = h
        return cid

    def _where(self, no: int) -> tuple[str, int]:
        r, f = pointer(no)
        return self.files[r], f

    def _bodies(self, ex: Exchange) -> tuple[Bodies, str | None, str | None]:
        """Each side decoded once (`--with-bodies`): its JSON text (redacted) and the facts of
        the same values (`Bodies` would decode them again)."""
        values = []
        for msg, is_req in ((ex.request, True), (ex.response, False)):
            values.append(None if msg is None else self.bodies.json(ex, msg, is_req))
        req, rsp = values
        kafka = ex.api_key is not None and ex.api_key >= 0  # not raw SASL: Bodies' rule
        facts = Bodies.given(ex, self.bodies, req if kafka and isinstance(req, dict) else None,
                             rsp if kafka and isinstance(rsp, dict) else None)
        return (facts, None if req is None else dumps(req),
                None if rsp is None else dumps(rsp))

    def row(self, ex: Exchange, conn_id: str) -> dict:
        req, resp = ex.request, ex.response
        client_ip, client_port = _split_endpoint(ex.conn.client)
        broker_ip, broker_port = _split_endpoint(ex.conn.broker)
        lat = ex.latency_ns
        r: dict = {
            "capture_id": self.capture_id,
            "conn_id": conn_id,
            "client": ex.conn.client,
            "broker": ex.conn.broker,
            "client_ip": client_ip,
            "client_port": client_port,
            "broker_ip": broker_ip,
            "broker_port": broker_port,
            "api_key": ex.api_key,
            "api": ex.api,
            "api_version": ex.api_version,
            "correlation_id": ex.correlation_id,
            "client_id": ex.client_id,
            "status": ex.status,
            "inferred": ex.inferred is not None,
            "acks": ex.acks,
            "latency_ms": None if lat is None else round(lat / 1e6, 3),
        }
        diags: list[str] = []
        for side, msg in (("request", req), ("response", resp)):
            if msg is None:
                for k in (
                    "ts",
                    "first_ns",
                    "last_ns",
                    "size",
                    "file",
                    "frame",
                    "first_file",
                    "first_frame",
                ):
                    r[f"{side}_{k}"] = None
                continue
            pdu = msg.pdu
            r[f"{side}_ts"] = datetime.fromtimestamp(pdu.last_ts / 1e9, UTC)
            r[f"{side}_first_ns"] = pdu.first_ts
            r[f"{side}_last_ns"] = pdu.last_ts
            r[f"{side}_size"] = pdu.size + 4
            r[f"{side}_file"], r[f"{side}_frame"] = self._where(pdu.last_pkt)
            r[f"{side}_first_file"], r[f"{side}_first_frame"] = self._where(pdu.first_pkt)
            diags.extend(f"{side}:{d.code}:{d.message}" for d in msg.diagnostics)
        bodies = None
        if self.decode:
            bodies = self._bodies(ex) if self.with_bodies else None
            facts = (bodies[0] if bodies else Bodies(ex, self.bodies)).facts
            parts = [{f: getattr(p, f) for f in PARTITION_FIELDS} for p in facts.partitions]
            topics = sorted(
                {p["topic"] or p["topic_id"] for p in parts if p["topic"] or p["topic_id"]}
            )
            r["error_code"] = facts.error_code
            r["throttle_time_ms"] = facts.throttle_time_ms
            r["replica_id"] = facts.replica_id
            r["partition_error_count"] = facts.partition_error_count
            r["topics"] = topics or sorted(facts.listed_topics)
            r["partitions"] = parts
        else:
            for k in (
                "error_code",
                "throttle_time_ms",
                "replica_id",
                "partition_error_count",
                "topics",
                "partitions",
            ):
                r[k] = None
        r["diagnostics"] = diags
        r["request_body"] = bodies[1] if bodies else None
        r["response_body"] = bodies[2] if bodies else None
        start = req or resp
        when = datetime.fromtimestamp(start.pdu.last_ts / 1e9, UTC) if start else None
        r["dt"] = when.date() if when else None
        r["hour"] = when.hour if when else None
        return r
