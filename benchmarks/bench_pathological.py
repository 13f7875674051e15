#!/usr/bin/env python3
"""Throughput on pathological inputs next to normal traffic (issue 9, time bounds).

Not a test: it prints a table. Every input is built in memory first; only the
processing is timed, in CPU seconds of this process (robust on a busy machine).

Engine scenarios feed raw-IPv4 packets to `kanalyze.engine.Engine` (flows,
reassembly, framing, correlation; bodies not decoded) and are compared with
the `normal` engine run: real request/response frames from captures/ in
1448-byte segments. Decoder scenarios call `decode_body` / `decode_records`
and are compared with `normal decode`: every body of the real captures.

ratio = scenario MB/s / normal MB/s of the same kind (1.0 = as fast as normal;
0.1 = ten times slower per input byte). A scenario that does not finish within
--limit seconds is reported as such (the loop is interrupted) -- that is a
hang, not a slow input.

    python benchmarks/bench_pathological.py            # ~8 MB per scenario
    python benchmarks/bench_pathological.py --scale 0.25 --limit 20
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dissectors.context import DecodeContext  # noqa: E402
from dissectors.decoder import decode_body  # noqa: E402
from dissectors.records import decode_records  # noqa: E402
from kanalyze.capture import Packet  # noqa: E402
from kanalyze.engine import Engine, EngineOptions  # noqa: E402
from kanalyze.session import Session  # noqa: E402
from tests.support import packets as P  # noqa: E402
from tests.support.spec_encoder import uvarint  # noqa: E402

MSS = 1448
LINKTYPE_RAW = 101


class TimeLimit(Exception):
    pass


@dataclass
class Result:
    name: str
    kind: str  # "engine" or "decode"
    nbytes: int
    cpu: float
    units: int  # frames (engine) or nodes/records (decode)
    unit: str
    finished: bool
    peak_mb: float | None = None
    note: str = ""

    @property
    def mbps(self) -> float:
        return self.nbytes / self.cpu / 1e6 if self.cpu > 0 else float("inf")


def timed(
    fn: Callable[[], int], limit: float, trace_memory: bool = False
) -> tuple[float, int, bool, float | None]:
    """(CPU seconds, units, finished, peak MB). The limit is in CPU seconds of this process
    (ITIMER_PROF), so a busy machine does not turn a slow scenario into a false hang. With
    `trace_memory`, a second run under tracemalloc measures the peak of Python allocations."""

    def _alarm(_sig, _frame):  # noqa: ANN001
        raise TimeLimit

    old = signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, limit)
    t0 = time.process_time()
    units, finished = 0, True
    try:
        units = fn()
    except TimeLimit:
        finished = False
    finally:
        cpu = time.process_time() - t0
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    peak = None
    if trace_memory and finished and cpu * 4 < limit:
        tracemalloc.start()
        try:
            fn()
            peak = tracemalloc.get_traced_memory()[1] / 1e6
        finally:
            tracemalloc.stop()
    return cpu, units, finished, peak


# ---------------------------------------------------------------- inputs: engine
def real_frames() -> list[tuple[bool, bytes]]:
    """(from_client, frame with its size prefix) of every complete message in the real captures."""
    out = []
    for p in sorted((ROOT / "captures").glob("*.pcap")):
        for ex in Session([str(p)]).exchanges():
            for msg, from_client in ex.messages():
                if not msg.pdu.missing:
                    out.append((from_client, msg.pdu.size.to_bytes(4, "big") + msg.pdu.data))
    return out


class Builder:
    """A TCP conversation as raw-IPv4 packets (correct sequence and acknowledgment numbers)."""

    def __init__(self) -> None:
        self.conv = P.Conversation()
        self.raw: list[bytes] = list(self.conv.handshake())

    def send(self, from_client: bool, payload: bytes, mss: int = MSS) -> None:
        for i in range(0, len(payload), mss):
            self.raw.append(self.conv.send(from_client, payload[i : i + mss]))

    def stream(self, from_client: bool, chunks: list[bytes]) -> None:
        """Many small messages packed into full segments."""
        buf = bytearray()
        for c in chunks:
            buf += c
            if len(buf) >= MSS:
                self.send(from_client, bytes(buf[:MSS]))
                del buf[:MSS]
        if buf:
            self.send(from_client, bytes(buf))

    def packets(self) -> list[Packet]:
        self.raw += self.conv.close()
        base = 1_700_000_000_000_000_000
        return [Packet(i + 1, base + i * 1000, LINKTYPE_RAW, r) for i, r in enumerate(self.raw)]


def payload_bytes(pkts: list[Packet]) -> int:
    return sum(len(p.data) - 40 for p in pkts)  # IPv4 + TCP headers without options


def normal_traffic(frames: list[tuple[bool, bytes]], target: int) -> Builder:
    b = Builder()
    total = 0
    while total < target:
        for from_client, f in frames:
            b.send(from_client, f)
            total += len(f)
    return b


def tiny_frames(pairs: int) -> Builder:
    b = Builder()
    step = 100
    for k in range(0, pairs, step):
        ids = range(k, min(k + step, pairs))
        b.stream(
            True, [struct.pack(">ihhih", 10, 18, 0, i, -1) for i in ids]
        )  # ApiVersions v0, null client id
        b.stream(False, [struct.pack(">ii", 4, i) for i in ids])  # bare responses
    return b


def prefix_then_normal(frames, target: int, prefix: bytes, from_client: bool) -> Builder:
    b = Builder()
    b.send(True, frames[0][1] if frames[0][0] else P.request_frame(18, 0, 1, "c"))
    b.send(from_client, prefix)
    rest = normal_traffic(frames, target)
    b.raw += rest.raw[3:]  # reuse its payloads; _renumber rebuilds the sequence numbers
    return _renumber(b)


def _renumber(b: Builder) -> Builder:
    """Rebuild a conversation from the payloads of b's data segments (after a prefix splice)."""
    out = Builder()
    for r in b.raw[3:]:
        sport = struct.unpack_from(">H", r, 20)[0]
        payload = r[40:]
        if payload:
            out.raw.append(out.conv.send(sport == out.conv.cport, payload))
    return out


def overlapping(frames, target: int, conflict: bool) -> Builder:
    """Every segment is followed by a retransmission covering it and the one before."""
    b = Builder()
    total = 0
    conv = b.conv
    while total < target:
        for from_client, f in frames:
            for i in range(0, len(f), MSS):
                piece = f[i : i + MSS]
                start = conv.cseq if from_client else conv.bseq
                b.raw.append(conv.send(from_client, piece))
                back = min(i, MSS // 2)
                again = f[i - back : i + len(piece)]
                if conflict:
                    again = bytes(x ^ 0xFF for x in again[:back]) + again[back:]
                ack = conv.bseq if from_client else conv.cseq
                b.raw.append(conv.segment_at(from_client, start - back, again, ack))
            total += len(f)
    return b


def reordered(frames, target: int, window: int) -> Builder:
    """Each message's segments arrive in reverse order within windows of `window` segments."""
    b = Builder()
    conv = b.conv
    total = 0
    while total < target:
        for from_client, f in frames:
            segs = []
            for i in range(0, len(f), MSS):
                start = conv.cseq if from_client else conv.bseq
                ack = conv.bseq if from_client else conv.cseq
                piece = f[i : i + MSS]
                segs.append(conv.segment_at(from_client, start, piece, ack))
                if from_client:
                    conv.cseq += len(piece)
                else:
                    conv.bseq += len(piece)
            for w in range(0, len(segs), window):
                b.raw.extend(reversed(segs[w : w + window]))
            total += len(f)
    return b


def unframeable(from_client: bool, nbytes: int) -> Builder:
    b = Builder()
    b.send(True, P.request_frame(18, 0, 1, "c"))
    b.send(from_client, bytes(nbytes))
    return b


def many_connections(n: int, head: int) -> list[Packet]:
    """n connections, each opened and sending the first `head` bytes of a 1 MiB Produce request
    that never completes: every connection holds a partial frame (bytes buffered in total)."""
    raw: list[bytes] = []
    frame = P.request_frame(0, 3, 1, "c", b"\xff\xff\x00\x01" + bytes(1 << 20))
    for i in range(n):
        conv = P.Conversation(
            client=f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}", cport=40000 + i % 20000
        )
        raw += conv.handshake()
        raw.append(conv.send(True, frame[:head]))
    base = 1_700_000_000_000_000_000
    return [Packet(i + 1, base + i * 1000, LINKTYPE_RAW, r) for i, r in enumerate(raw)]


def syn_flood(n: int) -> list[Packet]:
    """n SYNs from distinct 4-tuples (open connections)."""
    base = 1_700_000_000_000_000_000
    pkts = []
    for i in range(n):
        conv = P.Conversation(
            client=f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}", cport=40000 + i % 20000
        )
        pkts.append(Packet(i + 1, base + i * 1000, LINKTYPE_RAW, conv.handshake()[0]))
    return pkts


def run_engine(
    name: str,
    b: Builder | list[Packet],
    limit: float,
    opts: EngineOptions | None = None,
    note: str = "",
    whole_packets: bool = False,
) -> Result:
    """`whole_packets`: count whole packets as the input bytes (inputs with little or no
    payload)."""
    pkts = b.packets() if isinstance(b, Builder) else b
    nbytes = sum(len(p.data) for p in pkts) if whole_packets else payload_bytes(pkts)
    engine = Engine(lambda ex: None, opts or EngineOptions())

    def go() -> int:
        feed = engine.feed
        for p in pkts:
            feed(p)
        engine.close()
        return engine.stats.client.pdus + engine.stats.broker.pdus

    cpu, units, finished, _ = timed(go, limit)
    st = engine.stats
    hits = ", ".join(f"{k} hit {v}x" for k, v in sorted(st.limit_hits.items()))
    if hits:
        note = f"{note}; {hits}, peak {st.buffered_peak >> 10} KiB buffered / {st.open_peak} open"
    return Result(name, "engine", nbytes, cpu, units, "frames", finished, note=note)


# ---------------------------------------------------------------- inputs: decoder


def real_bodies() -> list[tuple[int, int, bool, bytes]]:
    out = []
    for p in sorted((ROOT / "captures").glob("*.pcap")):
        for ex in Session([str(p)]).exchanges():
            if ex.api_key is None or ex.api_version is None:
                continue
            for msg, is_req in ex.messages():
                if not msg.pdu.missing:
                    out.append(
                        (ex.api_key, ex.api_version, is_req, bytes(msg.pdu.data[msg.body_offset :]))
                    )
    return out


def run_decode(
    name: str, items: list[tuple[int, int, bool, bytes]], limit: float, note: str = ""
) -> Result:
    nbytes = sum(len(b) for *_, b in items)

    def go() -> int:
        n = 0
        for api, v, is_req, body in items:
            node = decode_body(api, v, is_req, body, 0, len(body), DecodeContext())
            n += sum(1 for _ in node.walk())
        return n

    cpu, units, finished, peak = timed(go, limit, trace_memory=True)
    return Result(name, "decode", nbytes, cpu, units, "nodes", finished, peak, note)


def run_records(name: str, fields: list[bytes], limit: float, note: str = "") -> Result:
    nbytes = sum(len(f) for f in fields)

    def go() -> int:
        n = 0
        for f in fields:
            node = decode_records(f, 0, len(f), DecodeContext())
            n += sum(len(b.children or ()) for b in node.children)
        return n

    cpu, units, finished, peak = timed(go, limit, trace_memory=True)
    return Result(name, "decode", nbytes, cpu, units, "records", finished, peak, note)


def zstd_batch(records: bytes, count: int) -> bytes:
    import crc32c
    import zstandard

    ts = 1_700_000_000_000
    body = struct.pack(">hiqqqhii", 4, count - 1, ts, ts, -1, -1, -1, count)
    body += zstandard.ZstdCompressor(level=19).compress(records)
    return struct.pack(">qiibI", 0, 9 + len(body), 0, 2, crc32c.crc32c(body)) + body


def real_record_fields(bodies) -> list[bytes]:
    from dissectors.node import RECORDS

    out = []
    for api, v, is_req, body in bodies:
        if api not in (0, 1):
            continue
        node = decode_body(api, v, is_req, body, 0, len(body), DecodeContext(decode_records=False))
        out.extend(
            body[n.offset : n.offset + n.length]
            for n in node.walk()
            if n.kind == RECORDS and n.length > 0
        )
    return out


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="input size factor (1.0: ~8 MB per engine scenario)",
    )
    ap.add_argument(
        "--limit", type=float, default=60.0, help="CPU seconds before a scenario counts as a hang"
    )
    args = ap.parse_args(argv)
    mb = int(8_000_000 * args.scale)
    lim = args.limit

    frames = real_frames()
    bodies = real_bodies()
    results: list[Result] = []

    def add(r: Result) -> None:
        results.append(r)
        print(line(r, None), flush=True)

    print(
        f"inputs: {len(frames)} real frames, {len(bodies)} real bodies; "
        f"scale {args.scale}; limit {lim:.0f} s\n"
    )
    print(header())
    # engine
    run_engine(
        "warm-up", normal_traffic(frames, mb // 4), lim
    )  # first-run effects (allocator, caches)
    add(
        run_engine(
            "normal", normal_traffic(frames, mb), lim, note="real frames, 1448-byte segments"
        )
    )
    add(
        run_engine(
            "tiny frames",
            tiny_frames(int(500_000 * args.scale)),
            lim,
            note="ApiVersions v0 requests (14 B) + bare responses (8 B), packed",
        )
    )
    add(
        run_engine(
            "2 GB length prefix, client",
            prefix_then_normal(frames, mb, b"\x7f\xff\xff\xf0", True),
            lim,
            note="size 0x7ffffff0, then normal traffic",
        )
    )
    add(
        run_engine(
            "2 GB length prefix, broker",
            prefix_then_normal(frames, mb, b"\x7f\xff\xff\xf0", False),
            lim,
            note="size 0x7ffffff0, then normal traffic",
        )
    )
    add(
        run_engine(
            "prefix just under max_frame",
            prefix_then_normal(frames, mb, b"\x0f\xff\xff\xf0", True),
            lim,
            note="client frame of 256 MiB - 16 that never completes: buffered",
        )
    )
    add(
        run_engine(
            "prefix just over max_frame",
            prefix_then_normal(
                frames, mb, b"\x10\x00\x00\x01\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff", True
            ),
            min(lim, 10.0),
            note="0x10000001 + ApiVersions header (was an endless loop before 37e7d40)",
        )
    )
    for kb in (64, 128):
        for side, fc in (("client", True), ("broker", False)):
            add(
                run_engine(
                    f"{kb} KiB unframeable, {side}",
                    unframeable(fc, kb * 1024),
                    lim,
                    note="zero bytes after sync, searched (was quadratic before 37e7d40)",
                )
            )
    add(
        run_engine(
            "overlapping retransmissions",
            overlapping(frames, mb // 2, False),
            lim,
            note="each segment re-sent with half of the previous one",
        )
    )
    add(
        run_engine(
            "conflicting retransmissions",
            overlapping(frames, mb // 2, True),
            lim,
            note="as above, overlapping bytes differ",
        )
    )
    add(
        run_engine(
            "reordered segments", reordered(frames, mb, 16), lim, note="reversed in windows of 16"
        )
    )
    nconn = max(1, int(5000 * args.scale))
    add(
        run_engine(
            "connections buffering",
            many_connections(nconn, MSS),
            lim,
            note=f"{nconn} connections, each a partial 1 MiB frame",
        )
    )
    add(
        run_engine(
            "connections buffering, bound hit",
            many_connections(nconn, MSS),
            lim,
            EngineOptions(max_buffered=1 << 20),
            note="as above, --max-buffered 1 MiB",
        )
    )
    nsyn = max(1, int(200_000 * args.scale))
    add(
        run_engine(
            "SYN flood",
            syn_flood(nsyn),
            lim,
            note=f"{nsyn} new 4-tuples; bytes = whole packets",
            whole_packets=True,
        )
    )
    add(
        run_engine(
            "SYN flood, bound hit",
            syn_flood(nsyn),
            lim,
            EngineOptions(max_connections=nsyn // 10),
            note=f"as above, --max-connections {nsyn // 10}",
            whole_packets=True,
        )
    )
    # decoder
    reps = max(1, int(4_000_000 * args.scale) // max(1, sum(len(b) for *_, b in bodies)))
    add(run_decode("normal decode", bodies * reps, lim, note=f"every real body x{reps}"))
    n = int(1_000_000 * args.scale)
    add(
        run_decode(
            "huge array",
            [(3, 0, True, struct.pack(">i", n) + b"\x00\x00" * n)],
            lim,
            note=f"Metadata v0 request, {n} empty topic names",
        )
    )
    add(
        run_decode(
            "array count bomb",
            [(3, 0, True, struct.pack(">i", 0x7FFFFFFF) + b"\x00\x00" * 8)] * 10000,
            lim,
            note="count 2^31-1 over 16 bytes, x10000",
        )
    )
    topics, parts = int(2000 * args.scale) or 1, 500
    part = struct.pack(">ii", 0, -1)
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", parts) + part * parts
    produce = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", topics) + topic * topics
    add(
        run_decode(
            "nested arrays",
            [(0, 3, True, produce)],
            lim,
            note=f"Produce v3, {topics} topics x {parts} partitions",
        )
    )
    k = int(500_000 * args.scale)
    storm = b"\x01\x01" + uvarint(k) + b"".join(uvarint(i) + b"\x00" for i in range(k))
    add(
        run_decode(
            "tagged-field storm",
            [(18, 3, True, storm)],
            lim,
            note=f"ApiVersions v3 request, {k} unknown tags",
        )
    )
    fields = real_record_fields(bodies)
    rrep = max(1, int(2_000_000 * args.scale) // max(1, sum(len(f) for f in fields)))
    add(run_records("normal records", fields * rrep, lim, note=f"real records fields x{rrep}"))
    tiny = bytes([12, 0, 0, 0, 1, 1, 0])
    for name, batch, what in (
        ("tiny records (zstd)", zstd_batch(tiny * ((4 << 20) // 7), 1), "7-byte valid records"),
        (
            "bad-record storm (zstd)",
            zstd_batch(b"\x04\x04\x04" * ((4 << 20) // 3), 3),
            "3-byte bad records",
        ),
    ):
        add(
            run_records(
                name,
                [batch],
                lim,
                note=f"{what}; {len(batch)} B in, inflated to the 250x ratio cap "
                "(records-unbounded-count)",
            )
        )

    print("\nratios against the normal run of the same kind")
    print(header())
    base = {"engine": results[0], "decode": next(r for r in results if r.name == "normal decode")}
    for r in results:
        print(line(r, base[r.kind]))
    return 0


def header() -> str:
    return (
        f"{'scenario':32s} {'MB in':>8s} {'CPU s':>8s} {'MB/s':>9s} {'units/s':>12s} "
        f"{'peak MB':>8s} {'ratio':>7s}  note"
    )


def line(r: Result, base: Result | None) -> str:
    ratio = (
        f"{r.mbps / base.mbps:7.3f}"
        if base is not None and r.finished
        else ("   HANG" if not r.finished else "      -")
    )
    peak = f"{r.peak_mb:8.1f}" if r.peak_mb is not None else "       -"
    rate = (
        f"{r.units / r.cpu:10.0f} {r.unit[:1]}"
        if r.cpu > 0 and r.finished
        else f"{'>' + str(round(r.cpu)) + ' s':>12s}"
    )
    done = "" if r.finished else " [did not finish: interrupted]"
    return (
        f"{r.name:32s} {r.nbytes / 1e6:8.2f} {r.cpu:8.2f} {r.mbps:9.2f} {rate:>12s} {peak} "
        f"{ratio}  {r.note}{done}"
    )


if __name__ == "__main__":
    sys.exit(main())
