"""TCP conversations as Wireshark's Statistics > Conversations counts them, joined with what
the Kafka exchanges on each connection say (client ids, software, requests).

Why a tracker of its own: the engine forgets a connection's packets once they are framed, and
tshark's numbers (frames and bytes each way, start, duration) count every packet, handshake
and ACKs included. The tracker sees each packet through `Session.on_packet`, before the engine,
and keeps one small record per conversation; a new SYN (another ISN) on a known 4-tuple starts
a new conversation, as the engine and tshark split reused ports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kanalyze.capture import Packet
from kanalyze.correlation import Exchange
from kanalyze.flows import ACK, FIN, RST, SYN, FlowStats, decode_segment, format_endpoint

MAX_CONVERSATIONS = 100_000  # past it, further conversations are counted, not listed


@dataclass(slots=True)
class Conversation:
    """One TCP conversation. `a` is the side that sent the first SYN (else the first packet);
    once a Kafka exchange names the client, `client_is_a` says which side it is."""

    a: tuple[bytes, int]
    b: tuple[bytes, int]
    first_ns: int
    last_ns: int
    syn: bool
    isn: int | None
    frames: list[int] = field(default_factory=lambda: [0, 0])  # a->b, b->a
    bytes: list[int] = field(default_factory=lambda: [0, 0])  # frame bytes, as captured
    payload: list[int] = field(default_factory=lambda: [0, 0])  # TCP payload bytes
    fin: list[bool] = field(default_factory=lambda: [False, False])
    rst: bool = False
    client_is_a: bool | None = None
    conn_id: int | None = None  # the engine's connection id (export's connection.id)
    client_ids: set[str] = field(default_factory=set)
    software: set[str] = field(default_factory=set)
    requests: int = 0

    def end(self, cut: bool) -> str:
        """How the conversation ended: RST, FIN (both sides), half-closed, open at the end of
        the capture, or cut (open when a damaged capture file stopped)."""
        if self.rst:
            return "RST"
        if all(self.fin):
            return "FIN"
        if any(self.fin):
            return "half-closed"
        return "cut" if cut else "open"


class ConversationTracker:
    """Counts every TCP packet into its conversation (`packet`), then learns from exchanges
    which side is the Kafka client and who it is (`exchange`)."""

    def __init__(self, cap: int = MAX_CONVERSATIONS) -> None:
        self.cap = cap
        self.flows = FlowStats()
        self.current: dict[tuple, Conversation] = {}  # canonical 4-tuple -> latest conversation
        self.all: list[Conversation] = []
        self.dropped = 0
        self._by_pair: dict[tuple[str, str], list[Conversation]] = {}
        self._by_conn: dict[int, Conversation] = {}
        self.first_ns: int | None = None

    def packet(self, pkt: Packet) -> None:
        if self.first_ns is None:
            self.first_ns = pkt.ts_ns
        seg = decode_segment(pkt.linktype, pkt.data, self.flows)
        if seg is None:
            return
        src, dst = (seg.src, seg.sport), (seg.dst, seg.dport)
        key = (src, dst) if src <= dst else (dst, src)
        conv = self.current.get(key)
        flags = seg.flags
        syn_only = flags & SYN and not flags & ACK
        if conv is not None and syn_only and conv.isn is not None and conv.isn != seg.seq:
            conv = None  # port reuse: a new connection on the same 4-tuple
        elif (
            conv is not None
            and syn_only
            and conv.isn is None
            and (conv.payload[0] or conv.payload[1])
        ):
            conv = None  # a SYN after data of a connection whose start was not captured
        if conv is None:
            if len(self.all) >= self.cap:
                self.dropped += 1
                return
            conv = Conversation(
                src, dst, pkt.ts_ns, pkt.ts_ns, bool(syn_only), seg.seq if syn_only else None
            )
            self.current[key] = conv
            self.all.append(conv)
            pair = (format_endpoint(*src), format_endpoint(*dst))
            for k in (pair, pair[::-1]):
                self._by_pair.setdefault(k, []).append(conv)
        elif syn_only and conv.isn is None and not conv.frames[1]:
            conv.syn, conv.isn = True, seg.seq
        i = 0 if src == conv.a else 1
        conv.frames[i] += 1
        conv.bytes[i] += len(pkt.data)
        conv.payload[i] += len(seg.payload)
        conv.last_ns = pkt.ts_ns
        if flags & FIN:
            conv.fin[i] = True
        if flags & RST:
            conv.rst = True

    def exchange(self, ex: Exchange, software: str | None = None) -> None:
        """Attach one exchange to its conversation (the one of its connection that was open
        when the exchange started)."""
        conv = self._by_conn.get(ex.conn.id)
        if conv is None:
            cands = self._by_pair.get((ex.conn.client, ex.conn.broker))
            if not cands:
                return
            t = ex.start_ts
            conv = next((c for c in reversed(cands) if c.first_ns <= t), cands[0])
            if conv.conn_id is not None:  # already another connection's: keep the first join
                return
            conv.conn_id = ex.conn.id
            conv.client_is_a = format_endpoint(*conv.a) == ex.conn.client
            self._by_conn[ex.conn.id] = conv
        conv.requests += 1
        if ex.client_id:
            conv.client_ids.add(ex.client_id)
        if software:
            conv.software.add(software)

    def rows(self, cut: bool = False) -> list[dict[str, object]]:
        """One JSON object per conversation (docs/stats.md, table `conv`), by start time."""
        base = self.first_ns or 0
        out: list[dict[str, object]] = []
        for c in sorted(self.all, key=lambda c: c.first_ns):
            client_first = c.client_is_a if c.client_is_a is not None else True
            ci, si = (0, 1) if client_first else (1, 0)
            client, broker = (c.a, c.b) if client_first else (c.b, c.a)
            out.append(
                {
                    "connection": c.conn_id,
                    "kafka": c.conn_id is not None,
                    "client": format_endpoint(*client),
                    "broker": format_endpoint(*broker),
                    "client_ids": sorted(c.client_ids),
                    "software": sorted(c.software),
                    "start": round(c.first_ns / 1e9, 6),
                    "relative_start_s": round((c.first_ns - base) / 1e9, 6),
                    "end": round(c.last_ns / 1e9, 6),
                    "duration_s": round((c.last_ns - c.first_ns) / 1e9, 6),
                    "requests": c.requests,
                    "frames_to_broker": c.frames[ci],
                    "bytes_to_broker": c.bytes[ci],
                    "payload_to_broker": c.payload[ci],
                    "frames_to_client": c.frames[si],
                    "bytes_to_client": c.bytes[si],
                    "payload_to_client": c.payload[si],
                    "syn": c.syn,
                    "ended": c.end(cut),
                }
            )
        return out


def software_of(body: dict | None) -> str | None:
    """'name version' from an ApiVersions v3+ request body, None without a name."""
    if not body:
        return None
    name = body.get("client_software_name")
    version = body.get("client_software_version")
    if not isinstance(name, str) or not name:
        return None
    return f"{name} {version}" if isinstance(version, str) and version else name


def totals(rows: Iterable[dict[str, object]]) -> dict[str, int]:
    keys = ("frames_to_broker", "bytes_to_broker", "frames_to_client", "bytes_to_client")
    return {k: sum(int(r[k]) for r in rows) for k in keys}  # type: ignore[call-overload]
