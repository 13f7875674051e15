"""One TCP connection as the engine follows it (`Connection`: two half streams, two framers, one
correlator; the client side confirms Kafka before anything is correlated) and one seen without
its SYN whose roles are not known yet (`Undecided`: its packets held until its bytes tell which
side is the client); `looks_like_tls` spots TLS where Kafka frames were expected. Apart from
`kanalyze.engine`, which creates, feeds and closes them, so that the per-connection state reads
on its own."""

from __future__ import annotations

from typing import Protocol

from dissectors import Code
from kanalyze.correlation import ConnInfo, Correlator, Exchange, Message
from kanalyze.engine_types import EngineOptions
from kanalyze.evidence import Evidence
from kanalyze.flows import Segment
from kanalyze.framing import Framer, Pdu, StreamEvent
from kanalyze.headers import plausible_request
from kanalyze.inference import LayoutBudget
from kanalyze.reassembly import HalfStream
from kanalyze.roles import judge, judge_later

FlowKey = tuple[bytes, int, bytes, int]  # (source address, port, destination address, port)

# a connection seen without its SYN waits (packets held, copied) until its bytes tell which side
# is the client: both sides spoke, or this much was held, or it ended
ROLE_PACKETS = 32
ROLE_BYTES = 64 * 1024
# ... and when the bytes could not tell by then, it stays held (`Undecided.stalled`), asked the
# cheap `judge_later` on every packet, up to this much (engine-wide: STALL_BUDGET) before the
# port decides: a first frame longer than the first hold (a large Fetch response) is followed
# by the frames that tell
STALL_PACKETS = 1024
STALL_BYTES = 4 * 1024 * 1024
STALL_BUDGET = 64 * 1024 * 1024
EARLY_RESPONSES = 64  # broker frames kept while the client side has not yet confirmed Kafka
# a held packet's Python objects besides its payload (its Segment, ints, tuple), charged to
# --max-buffered (kanalyze.engine)
HELD_PACKET_COST = 512
UNDECIDED_COST = 640  # the Undecided itself, its lists and the engine's two keys (measured ~620)


class EngineHooks(Protocol):
    """What a `Connection` takes from its engine (`kanalyze.engine.Engine`): the options, the
    run's evidence for orphans (kanalyze/evidence.py), and the orderer's two entry points."""

    opts: EngineOptions
    evidence: Evidence

    def _complete(self, ex: Exchange) -> None: ...

    def _pending(self, msg: Message) -> None: ...


def looks_like_tls(payload: bytes | memoryview) -> bool:
    """A TLS record header: content type 20-23, version 3.0-3.4, length <= 2^14 + 2048. Never a
    plausible Kafka frame at the default --max-frame (the size would be over 335 MB)."""
    return (
        len(payload) >= 5
        and 20 <= payload[0] <= 23
        and payload[1] == 3
        and payload[2] <= 4
        and int.from_bytes(payload[3:5], "big") <= 18432
    )


class Connection:
    """One TCP connection: two half streams, two framers, one correlator."""

    __slots__ = (
        "info",
        "client_key",
        "c2s",
        "s2c",
        "cf",
        "sf",
        "corr",
        "kafka",
        "forced",
        "ignored",
        "clock",
        "closed",
        "last_seen",
        "held",
        "cost",
        "tls",
        "early",
    )

    def __init__(
        self, engine: EngineHooks, info: ConnInfo, client_key: FlowKey, forced: bool, syn_seen: bool
    ) -> None:
        self.info = info
        self.client_key = client_key
        self.forced = forced
        self.kafka = False  # confirmed by a plausible request
        self.ignored = False
        self.clock = 0
        self.closed = False
        self.last_seen = 0  # ns timestamp of the connection's latest packet
        self.held = 0  # bytes buffered (both framers, both reassembly heaps), as last counted
        # `held` with its chunks' Python objects and the early broker frames (engine._buffers_cost)
        self.cost = 0
        self.tls = False  # TLS records where Kafka frames were expected
        # broker frames before the client's first request confirmed Kafka (a mid-stream start:
        # answers to requests sent before the capture); handed on once it is confirmed
        self.early: list[Pdu] = []
        self.corr = Correlator(
            info, engine._complete, engine._pending, engine.opts.max_pending, engine.evidence
        )
        mf = engine.opts.max_frame
        self.cf = Framer(True, self._client_pdu, _never, mf, syn_seen, None, info.id)
        self.sf = Framer(
            False, self._server_pdu, self.corr.expects, mf, syn_seen, self.corr.pending, info.id
        )
        self.c2s = HalfStream(self.cf, engine.opts.reassembly)
        self.s2c = HalfStream(self.sf, engine.opts.reassembly)

    def __reduce__(self) -> tuple:
        # a blank connection, then its state (dissectors/native.py): its framers' callbacks
        # lead back to it and its engine, so they cannot be constructor arguments
        return _blank_connection, (), self.__getstate__()

    def _client_pdu(self, pdu: Pdu) -> None:
        if self.ignored:
            return
        if not self.kafka:
            head = pdu.size.to_bytes(4, "big") + pdu.data[:1024]
            verdict = plausible_request(head, 0, self.cf.max_frame)
            if pdu.missing and verdict == -1:
                verdict = (
                    1  # cut short (snaplen, a gap) before the client id ended: plausible so far
                )
            if verdict != 1 and not self.forced:
                self.ignored = True
                self.early.clear()
                return
            self.kafka = True
            early, self.early = self.early, []
            for p in early:
                self.corr.response(p)
        if not self.corr.request(pdu):
            self.cf.events.append(
                StreamEvent(
                    self.info.id,
                    "client",
                    Code.BAD_HEADER,
                    pdu.offset,
                    pdu.last_pkt,
                    "frame does not parse as a Kafka request header",
                )
            )

    def _server_pdu(self, pdu: Pdu) -> None:
        if self.kafka and not self.ignored:
            self.corr.response(pdu)
        elif not self.ignored and len(self.early) < EARLY_RESPONSES:
            self.early.append(pdu)


def _never(_corr: int) -> bool:
    return False


class _NoEngine:
    """The hooks of a blank connection, replaced by its pickled state at once."""

    def __init__(self) -> None:
        self.opts = EngineOptions()
        self.evidence = Evidence()

    def _complete(self, ex: Exchange) -> None:
        pass

    def _pending(self, msg: Message) -> None:
        pass


def _blank_connection() -> Connection:
    return Connection(_NoEngine(), ConnInfo(0, "", ""), (b"", 0, b"", 0), False, False)


def _blank_undecided() -> Undecided:
    return Undecided(0, (), 0)


class Undecided:
    """A connection seen without its SYN, before its bytes decided who is the client: its
    packets are held (payload copied) and replayed once the roles are known."""

    __slots__ = ("id", "key", "held", "data", "first_ts", "nbytes", "cost", "stalled")

    def __init__(self, conn_id: int, key: tuple, ts_ns: int) -> None:
        self.id = conn_id
        self.key = key  # the 4-tuple of the first packet seen
        self.held: list[tuple[Segment, int, int]] = []  # (segment, packet no, ts)
        self.data: dict[tuple, bytearray] = {}  # the first bytes each direction sent
        self.first_ts = ts_ns
        self.nbytes = 0
        self.cost = 0  # what the held packets cost (charged to --max-buffered by the engine)
        self.stalled = False  # past the first hold, the bytes could not tell: held on

    def __reduce__(self) -> tuple:
        return _blank_undecided, (), self.__getstate__()  # as Connection's

    def add(self, seg: Segment, key: FlowKey, pkt_no: int, ts_ns: int) -> int:
        """Hold one packet; returns what it costs (its payload twice, and its objects)."""
        payload = bytes(seg.payload)  # a copy: the payload may be a view into a capture block
        cost = HELD_PACKET_COST if self.held else HELD_PACKET_COST + UNDECIDED_COST
        self.held.append((seg._replace(payload=payload), pkt_no, ts_ns))
        if payload:
            self.nbytes += len(payload)
            self.data.setdefault(key, bytearray()).extend(payload)
            cost += 2 * len(payload)
        self.cost += cost
        return cost

    def verdict(self, max_frame: int, budget: LayoutBudget, final: bool = False) -> bool | None:
        """Whether the first packet's sender is the client, judged from both directions' bytes
        (`final`: the roles must be settled now, so the frames' bodies are asked too, within
        the run's layout-search `budget`)."""
        k = self.key
        mine, theirs = self.data.get(k, b""), self.data.get((k[2], k[3], k[0], k[1]), b"")
        return judge(bytes(mine), bytes(theirs), max_frame, final, budget)

    def later_verdict(self, max_frame: int) -> bool | None:
        """`verdict` for a stalled connection: the cheap test, on its held bytes as they are."""
        k = self.key
        mine, theirs = self.data.get(k, b""), self.data.get((k[2], k[3], k[0], k[1]), b"")
        return judge_later(mine, theirs, max_frame)

    def long_first_frame(self, max_frame: int) -> bool:
        """Whether a direction starts with a plausible frame size whose frame is longer than
        what it held: the one case holding on can help (the frames after it will tell). Other
        traffic -- TLS, text protocols, a start mid-frame -- is not held longer."""
        for data in self.data.values():
            size = int.from_bytes(data[:4], "big") if len(data) >= 4 else 0
            if 8 <= size <= max_frame and len(data) < 4 + size:
                return True
        return False

    def out_of_patience(self) -> bool:
        return len(self.held) >= ROLE_PACKETS or self.nbytes >= ROLE_BYTES

    def exhausted(self) -> bool:
        return len(self.held) >= STALL_PACKETS or self.nbytes >= STALL_BYTES
