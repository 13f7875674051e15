"""Fuzz targets: one function per harness, taking the raw fuzz input (bytes).

Plain Python, no atheris: the atheris harnesses (`fuzz/fuzz_*.py`) call these
under instrumentation, and `tests/fuzz/` replays the committed corpora
through the very same functions. A target returns normally for every input;
anything it raises is a finding (an uncaught exception in the code under
test, or a broken invariant asserted here).

Input layouts (documented so a minimized input can be read by hand):

capture   byte 0 % 4 picks the container: 0 the rest is the file, 1 the rest
          gzip-compressed, 2 the rest gzip-compressed and cut at byte 1's
          fraction of its length, 3 the rest split in two files merged by
          timestamp; byte 0 bit 2: tight engine bounds (max_buffered 4 KiB,
          max_connections 2). The packets then go through the whole engine,
          and the byte accounting and the bounds are checked.
stream    byte 0 picks engine limits (see `_stream_options`); then records of
          [flags:1][seq delta:int32][payload length:uint16][payload]. flags
          bit 0: from the broker; bit 1: SYN; bit 2: FIN; bit 3: RST;
          bit 4: no ACK; bit 5: ack one byte short of everything the peer sent;
          bit 6: new ISN (port reuse); bit 7 unused. seq delta is relative to
          the next expected byte of that side (0 = in order).
schema    bytes 0-1 (big endian) % len(SCHEMA_TARGETS) pick (api, version,
          is_request); byte 2 bit 0: decode_records off; the rest is the body.
records   byte 0 picks small or default limits; the rest is a records field.
consumer  byte 0 bit 0: Subscription or Assignment; bit 1: require_clean;
          the rest is the embedded bytes (int16 version first).
sasl      byte 0 bit 0: raw token or SaslAuthenticate AuthBytes path; rest is
          the token.
"""

from __future__ import annotations

import gzip
import os
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dissectors import apis
from dissectors.context import DecodeContext, Limits
from dissectors.decoder import decode_body
from dissectors.embedded import ASSIGN, SUB, decode_raw_sasl, embed_versioned
from dissectors.fastjson import FALLBACK, decode_body_json
from dissectors.jsonify import JsonWalk, node_to_json, node_to_json_collect
from dissectors.node import PRIM, Node
from dissectors.records import decode_records
from dissectors.records_json import NotClean, records_json
from kanalyze.capture import CaptureError, CaptureStats, Packet, read_captures
from kanalyze.engine import Engine, EngineOptions
from kanalyze.reassembly import ReassemblyLimits
from tests.support.spec_encoder import uvarint

HARNESSES = ("capture", "stream", "schema", "records", "consumer", "sasl")

# every (api, version, direction) the specs know, in a fixed order
SCHEMA_TARGETS: tuple[tuple[int, int, bool], ...] = tuple(
    (api, v, is_req)
    for api in sorted(apis.API_NAMES)
    for is_req, table in ((True, apis.REQUEST_VERSIONS), (False, apis.RESPONSE_VERSIONS))
    if api in table
    for v in range(table[api][0], table[api][1] + 1)
)
SCHEMA_INDEX = {t: i for i, t in enumerate(SCHEMA_TARGETS)}

_TMP = os.environ.get("KANALYZE_FUZZ_TMP") or (
    "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
)


# ---------------------------------------------------------------- shared checks
def check_accounting(engine: Engine) -> None:
    """Issue 9 item 4: per direction, stream bytes = frame bytes + skipped + gap bytes; and the
    engine-wide bounds held (checked after `close()`: nothing is left buffered)."""
    st = engine.stats
    assert st.buffered == 0, f"{st.buffered} bytes still counted as buffered after close"
    assert st.buffered_peak <= engine.opts.max_buffered, (
        st.buffered_peak,
        engine.opts.max_buffered,
    )
    assert st.held_peak <= engine.opts.max_buffered, (st.held_peak, engine.opts.max_buffered)
    assert st.open_peak <= engine.opts.max_connections, (st.open_peak, engine.opts.max_connections)
    for side in ("client", "broker"):
        t = getattr(engine.stats, side)
        assert t.stream == t.frames + t.skipped + t.gaps, (
            f"{side}: stream {t.stream} != frames {t.frames} + skipped {t.skipped} + gaps {t.gaps}"
        )
        assert min(t.stream, t.frames, t.skipped, t.gaps) >= 0, (side, t)


def decode_exchanges(exchanges: list, ctx: DecodeContext) -> None:
    """Decode every body the engine produced (what the NDJSON output would do)."""
    for ex in exchanges:
        if ex.api_key is None or ex.api_version is None:
            continue
        for msg, is_req in ex.messages():
            data = msg.pdu.data
            node = decode_body(
                ex.api_key, ex.api_version, is_req, data, msg.body_offset, len(data), ctx
            )
            node_to_json(node, ctx)


def _strict_ctx(limits: Limits | None = None) -> DecodeContext:
    return DecodeContext(limits=limits or Limits(), strict=True)


# ---------------------------------------------------------------- capture
def _write(name: str, data: bytes) -> str:
    path = os.path.join(_TMP, f"kanalyze-fuzz-{os.getpid()}-{name}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def capture_files(data: bytes) -> list[bytes]:
    """The capture file(s) one fuzz input stands for."""
    if not data:
        return [b""]
    mode, rest = data[0] % 4, data[1:]
    if mode == 0:
        return [rest]
    if mode == 1:
        return [gzip.compress(rest, mtime=0)]
    if mode == 2:
        z = gzip.compress(rest[1:], mtime=0)
        cut = len(z) * (rest[0] if rest else 0) // 256
        return [z[:cut] if cut >= 2 else z]
    half = len(rest) // 2
    return [rest[:half], rest[half:]]


def run_capture(data: bytes, decode: bool = True) -> None:
    paths = [_write(str(i), f) for i, f in enumerate(capture_files(data))]
    out: list = []
    opts = EngineOptions(max_frame=1 << 20)
    if data and data[0] & 4:
        opts.max_buffered, opts.max_connections = 4096, 2
    engine = Engine(out.append, opts)
    stats = CaptureStats()
    try:
        for pkt in read_captures(paths, stats):
            engine.feed(pkt)
    except CaptureError:
        pass
    finally:
        for p in paths:
            os.unlink(p)
    engine.close()
    check_accounting(engine)
    if decode:
        decode_exchanges(out, _strict_ctx(Limits(max_decompressed_bytes=1 << 20)))


# ---------------------------------------------------------------- stream (reassembly + framing)
CLIENT = b"\x0a\x00\x00\x01"
BROKER = b"\x0a\x00\x00\x02"
CPORT, BPORT = 40000, 9092
_REC = struct.Struct(">BiH")
F_BROKER, F_SYN, F_FIN, F_RST, F_NOACK, F_SHORTACK, F_NEWISN = 1, 2, 4, 8, 16, 32, 64


def _stream_options(sel: int) -> EngineOptions:
    """Byte 0 of a stream input: bit 0 tight reassembly limits, bit 1 small max_frame,
    bit 2 tiny max_pending, bit 3 broker port forced (--port), bit 4 small max_buffered."""
    opts = EngineOptions()
    if sel & 1:
        opts.reassembly = ReassemblyLimits(
            max_ooo_bytes=4096, max_ooo_segments=8, hole_patience_packets=2
        )
    if sel & 2:
        opts.max_frame = 512
    if sel & 4:
        opts.max_pending = 2
    if sel & 8:
        opts.ports = frozenset({BPORT})
    if sel & 16:
        opts.max_buffered = 1024
    return opts


def _ipv4_tcp(
    src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes
) -> bytes:
    tcp = struct.pack(
        ">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags, 65535, 0, 0
    )
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total & 0xFFFF, 1, 0x4000, 64, 6, 0, src, dst)
    return ip + tcp + payload


def stream_packets(data: bytes) -> tuple[EngineOptions, list[Packet]]:
    """Decode a stream input into engine options and raw-IPv4 packets (linktype 228)."""
    if not data:
        return EngineOptions(), []
    opts = _stream_options(data[0])
    pos, n = 1, len(data)
    isn = [1000, 500000]  # client, broker
    nxt = [1000, 500000]  # next sequence number each side would send in order
    hi = [1000, 500000]  # highest sequence number each side sent so far
    pkts: list[Packet] = []
    no = 0
    while pos + _REC.size <= n:
        flags, delta, length = _REC.unpack_from(data, pos)
        pos += _REC.size
        payload = data[pos : pos + length]
        pos += len(payload)
        side = flags & F_BROKER
        peer = 1 - side
        if flags & F_NEWISN:
            isn[side] = (isn[side] + 0x10000000 + delta) & 0xFFFFFFFF
            nxt[side] = hi[side] = isn[side]
        seq = (nxt[side] + delta) & 0xFFFFFFFF
        tflags = 0
        if flags & F_SYN:
            tflags |= 0x02
        if flags & F_FIN:
            tflags |= 0x01
        if flags & F_RST:
            tflags |= 0x04
        if not flags & F_NOACK:
            tflags |= 0x10
        if payload:
            tflags |= 0x08
        ack = hi[peer] - (1 if flags & F_SHORTACK else 0)
        if side:
            raw = _ipv4_tcp(BROKER, CLIENT, BPORT, CPORT, seq, ack, tflags, payload)
        else:
            raw = _ipv4_tcp(CLIENT, BROKER, CPORT, BPORT, seq, ack, tflags, payload)
        end = seq + len(payload) + (1 if tflags & 0x03 else 0)
        if delta == 0 or (end - nxt[side]) & 0xFFFFFFFF < 0x80000000:
            nxt[side] = end & 0xFFFFFFFF
        if (end - hi[side]) & 0xFFFFFFFF < 0x80000000:
            hi[side] = end & 0xFFFFFFFF
        no += 1
        pkts.append(Packet(no, 1_700_000_000_000_000_000 + no * 1_000_000, 228, raw))
    return opts, pkts


def encode_stream(sel: int, segments: list[tuple[int, int, bytes]]) -> bytes:
    """Inverse of `stream_packets` for seeds: segments are (flags, seq delta, payload)."""
    out = bytearray([sel])
    for flags, delta, payload in segments:
        for i in range(0, max(len(payload), 1), 0xFFFF):
            piece = payload[i : i + 0xFFFF]
            out += _REC.pack(flags, delta if i == 0 else 0, len(piece)) + piece
    return bytes(out)


def run_stream(data: bytes, decode: bool = False) -> Engine:
    opts, pkts = stream_packets(data)
    out: list = []
    engine = Engine(out.append, opts)
    for p in pkts:
        engine.feed(p)
    engine.close()
    check_accounting(engine)
    if decode:
        decode_exchanges(out, _strict_ctx())
    return engine


# ---------------------------------------------------------------- schema decoder
def schema_prefix(api: int, version: int, is_request: bool, flags: int = 0) -> bytes:
    return SCHEMA_INDEX[(api, version, is_request)].to_bytes(2, "big") + bytes([flags])


def run_schema(data: bytes) -> None:
    if len(data) < 3:
        return
    api, version, is_req = SCHEMA_TARGETS[int.from_bytes(data[:2], "big") % len(SCHEMA_TARGETS)]

    def ctx() -> DecodeContext:
        return DecodeContext(
            limits=Limits(max_decompressed_bytes=1 << 20),
            strict=True,
            decode_records=not data[2] & 1,
        )

    buf = data[3:]
    rctx, walk = ctx(), JsonWalk()
    node = decode_body(api, version, is_req, buf, 0, len(buf), rctx)
    ref = node_to_json_collect(node, rctx, walk), walk.diagnostics, walk.odd_float
    check_node(node, rctx)
    # the export's fast path (dissectors/fastjson.py) answers only for clean bodies, and then
    # exactly as the reference path
    fwalk = JsonWalk()
    value = decode_body_json(api, version, is_req, buf, 0, len(buf), ctx(), fwalk)
    if value is not FALLBACK:
        assert (value, fwalk.diagnostics, fwalk.odd_float) == ref, (
            (api, version, is_req),
            value,
            ref,
        )


def check_node(root: Node, ctx: DecodeContext) -> None:
    """Every node lies inside its source buffer."""
    for node in root.walk():
        size = len(ctx.buffers[node.source - 1]) if node.source else None
        assert node.length >= 0 and node.offset >= 0, (node.name, node.offset, node.length)
        if size is not None:
            assert node.offset + node.length <= size, (node.name, node.offset, node.length, size)


# ---------------------------------------------------------------- records
def run_records(data: bytes) -> None:
    if not data:
        return
    if data[0] & 1:
        limits = Limits(
            max_decompressed_bytes=64 * 1024, max_decompression_ratio=50, max_array_count=1000
        )
    else:
        limits = Limits(max_decompressed_bytes=1 << 20)
    ctx = DecodeContext(limits=limits, strict=True, show_secrets=bool(data[0] & 2))
    buf = data[1:]
    node = decode_records(buf, 0, len(buf), ctx)
    node_to_json(node, ctx)
    # the export's fast path (dissectors/records_json.py): declines, or agrees with a clean
    # reference
    try:
        got = records_json(
            buf,
            memoryview(buf),
            0,
            len(buf),
            DecodeContext(limits=limits, show_secrets=bool(data[0] & 2)),
        )
    except NotClean:
        return
    diags = [d for n in node.walk() for d in n.diagnostics]
    assert not diags, ("records_json answered where the reference has diagnostics", diags)
    assert got == node.value, (got, node.value)


# ---------------------------------------------------------------- consumer protocol
def run_consumer(data: bytes) -> None:
    if not data:
        return
    message = ASSIGN if data[0] & 1 else SUB
    buf = b"\x00\x00\x00\x00" + data[1:]  # as if behind a 4-byte length prefix in a frame
    ctx = _strict_ctx()
    node = Node("Metadata", PRIM, 0, len(buf), bytes(buf[4:]))
    embed_versioned(node, message, buf, ctx, require_clean=bool(data[0] & 2))
    node_to_json(node, ctx)
    check_node(node, ctx)


# ---------------------------------------------------------------- SASL
def run_sasl(data: bytes) -> None:
    if not data:
        return
    ctx = DecodeContext(strict=True, show_secrets=bool(data[0] & 2))
    if data[0] & 1:  # SaslAuthenticate v2 (flexible): compact bytes AuthBytes, empty tags
        token = data[1:]
        body = uvarint(len(token) + 1) + token + b"\x00"
        node = decode_body(36, 2, True, body, 0, len(body), ctx)
    else:
        node = decode_raw_sasl(data, 1, len(data), ctx)
    node_to_json(node, ctx)


TARGETS = {
    "capture": run_capture,
    "stream": run_stream,
    "schema": run_schema,
    "records": run_records,
    "consumer": run_consumer,
    "sasl": run_sasl,
}


# ---------------------------------------------------------------- known-bug masks
# Open bugs found by fuzzing (key -> file, function, what happens); their regression tests are
# strict xfails in tests/fuzz/test_fuzz_corpus.py. Fixed so far (regressions now pass):
# framing resync loop on an oversized plausible request, quadratic framing search,
# zlib.error escaping read_capture on a corrupt gzip stream (commit 37e7d40), O(max_pending)
# eviction of pending requests (a2a68bb), unbounded records per batch (records are capped by
# the declared count + slack and Limits.max_records_per_batch / max_array_count), IndexError on a
# pcapng if_tsresol option running past its interface block (campaign of 2026-11-22, second run).
KNOWN_BUGS: dict[str, str] = {}


def mask_known_bugs() -> Callable[[], None]:
    """Work around the known, reported bugs so a long campaign can look for new ones;
    returns a function that undoes the masks.

    Used only when asked (`fuzz/run.py --mask-known`, env KANALYZE_FUZZ_MASK=1, or the
    `known_bugs_masked()` context in property tests); CI's harness run is unmasked so that
    a known bug keeps failing until it is fixed. Each mask changes the code under test
    as the proposed fix would, from outside: nothing in kanalyze/ is edited. Once a bug
    is fixed, delete its mask and its KNOWN_BUGS entry.
    """
    undo: list[Callable[[], None]] = []  # one entry per mask applied
    # (no masks at present: the bugs that needed one are fixed)

    def undo_all() -> None:
        for u in reversed(undo):
            u()

    return undo_all


@contextmanager
def known_bugs_masked() -> Iterator[None]:
    undo = mask_known_bugs()
    try:
        yield
    finally:
        undo()


if os.environ.get("KANALYZE_FUZZ_MASK") == "1":
    mask_known_bugs()
