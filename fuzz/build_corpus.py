"""Build the seed corpora under fuzz/corpus/<harness>/ from captures/ and the test encoders.

    python fuzz/build_corpus.py

Deterministic (fixed seeds, content-addressed file names), so a rebuild of an
unchanged tree changes nothing. Seeds are kept small (each capped, a few
hundred KB in all): the fuzzer mutates them, it does not need whole captures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import shutil
import sys
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dissectors.context import DecodeContext  # noqa: E402
from dissectors.decoder import decode_body  # noqa: E402
from dissectors.node import RECORDS  # noqa: E402
from fuzz import targets as T  # noqa: E402
from kanalyze.capture import CaptureStats, read_capture  # noqa: E402
from kanalyze.flows import FlowStats, decode_segment  # noqa: E402
from kanalyze.session import Session  # noqa: E402
from tests.support import packets as P  # noqa: E402
from tests.support import spec_encoder as se  # noqa: E402

CORPUS = ROOT / "fuzz" / "corpus"
CAPTURES = ROOT / "captures"
REAL = sorted(CAPTURES.glob("*.pcap")) + sorted((CAPTURES / "replication").glob("*.pcap"))
CRAFTED = sorted(
    p
    for p in (CAPTURES / "crafted").iterdir()
    if p.suffix in (".pcap", ".pcapng", ".gz", ".bin", ".txt")
)

MAX_SEED = {
    "capture": 3072,
    "stream": 4096,
    "schema": 2048,
    "records": 4096,
    "consumer": 1024,
    "sasl": 512,
}


def _put(seeds: dict[str, bytes], data: bytes, limit: int) -> None:
    if len(data) <= limit:
        seeds[hashlib.sha1(data).hexdigest()[:16]] = data


# ---------------------------------------------------------------- capture
def capture_seeds() -> dict[str, bytes]:
    lim = MAX_SEED["capture"]
    seeds: dict[str, bytes] = {}
    for p in CRAFTED:
        raw = p.read_bytes()
        _put(seeds, b"\x00" + raw[: lim - 1], lim)
    for p in REAL:  # the head of each real capture (global header + first packets)
        raw = p.read_bytes()[: lim - 1]
        _put(seeds, b"\x00" + raw, lim)
    base = (CAPTURES / "crafted" / "baseline.pcap").read_bytes()
    _put(seeds, b"\x01" + base, lim)  # gzip of a good pcap
    _put(seeds, b"\x02\x80" + base, lim)  # gzip cut in half
    ng = (CAPTURES / "crafted" / "pcapng_multi.pcapng").read_bytes()
    _put(seeds, b"\x03" + base[:2000] + ng[:2000], lim)  # two files merged
    return seeds


# ---------------------------------------------------------------- stream
def _connections(path: Path) -> dict[tuple, list]:
    flows = FlowStats()
    conns: dict[tuple, list] = defaultdict(list)
    for pkt in read_capture(str(path), CaptureStats()):
        seg = decode_segment(pkt.linktype, pkt.data, flows)
        if seg is None:
            continue
        a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
        conns[tuple(sorted((a, b)))].append(seg)
    return conns


def _encode_conn(segs: list, sel: int, limit: int) -> bytes:
    """Re-express one connection's segments in the stream harness's layout."""
    first = segs[0]
    if first.flags & 0x12 == 0x02:  # SYN from the client
        client = (first.src, first.sport)
    else:
        client = (
            (first.src, first.sport) if first.dport in (9092, 9093) else (first.dst, first.dport)
        )
    nxt = [1000, 500000]
    out: list[tuple[int, int, bytes]] = []
    size = 1
    for seg in segs:
        side = 0 if (seg.src, seg.sport) == client else 1
        flags = side
        flags |= 2 if seg.flags & 0x02 else 0
        flags |= 4 if seg.flags & 0x01 else 0
        flags |= 8 if seg.flags & 0x04 else 0
        flags |= 16 if not seg.flags & 0x10 else 0
        delta = (seg.seq - nxt[side]) & 0xFFFFFFFF
        if delta >= 0x80000000:
            delta -= 0x100000000
        payload = seg.payload
        size += 7 + len(payload)
        if size > limit:
            break
        out.append((flags, delta, payload))
        end = seg.seq + len(payload) + (1 if seg.flags & 0x03 else 0)
        if delta == 0 or (end - nxt[side]) & 0xFFFFFFFF < 0x80000000:
            nxt[side] = end & 0xFFFFFFFF
    return T.encode_stream(sel, out)


def stream_seeds() -> dict[str, bytes]:
    lim = MAX_SEED["stream"]
    seeds: dict[str, bytes] = {}
    for i, p in enumerate(
        REAL + [c for c in CRAFTED if c.suffix == ".pcap" and not c.name.startswith("bad_")]
    ):
        conns = _connections(p)
        for j, segs in enumerate(sorted(conns.values(), key=len, reverse=True)[:2]):
            _put(seeds, _encode_conn(segs, (i + j) % 16, lim), lim)
    # a hand-made conversation: request, out-of-order response halves, retransmission, gap
    req = P.request_frame(18, 0, 7, "fuzz", b"")
    resp = P.response_frame(7, b"\x00\x00\x00\x00\x00\x00")
    segs = [
        (18, 0, b""),
        (3, 0, b""),
        (0, 0, req),
        (1, 5, resp[5:]),
        (1, -len(resp), resp[:5]),
        (0, -len(req), req),
        (0, 10, req),
        (4, 0, b""),
        (5, 0, b""),
    ]
    _put(seeds, T.encode_stream(1, segs), lim)
    return seeds


# ---------------------------------------------------------------- schema, records, consumer
# (from captures)
def _capture_bodies():
    """(api, version, is_request, body bytes) of every message in the real captures."""
    for p in REAL:
        for ex in Session([str(p)]).exchanges():
            if ex.api_key is None or ex.api_version is None:
                continue
            for msg, is_req in ex.messages():
                if not msg.pdu.missing:
                    yield ex.api_key, ex.api_version, is_req, bytes(msg.pdu.data[msg.body_offset :])


def schema_seeds(bodies: list) -> dict[str, bytes]:
    lim = MAX_SEED["schema"]
    seeds: dict[str, bytes] = {}
    per: dict[tuple, int] = defaultdict(int)
    for api, v, is_req, body in bodies:
        key = (api, v, is_req)
        if key in T.SCHEMA_INDEX and per[key] < 2 and len(body) + 3 <= lim:
            per[key] += 1
            _put(seeds, T.schema_prefix(api, v, is_req) + body, lim)
    rng = random.Random(9)
    for (
        api,
        v,
        is_req,
    ) in T.SCHEMA_TARGETS:  # one encoder-made instance of every (api, version, direction)
        layout = se.api_layout(api, v, is_req)
        for attempt in range(4):
            body = se.encode(layout, se.random_value(layout, rng, tame=attempt > 0))
            if len(body) + 3 <= lim:
                _put(seeds, T.schema_prefix(api, v, is_req) + body, lim)
                break
    return seeds


def _records_fields(bodies: list) -> list[bytes]:
    out = []
    for api, v, is_req, body in bodies:
        if api not in (0, 1):
            continue
        ctx = DecodeContext(decode_records=False)
        node = decode_body(api, v, is_req, body, 0, len(body), ctx)
        out.extend(
            bytes(body[n.offset : n.offset + n.length])
            for n in node.walk()
            if n.kind == RECORDS and n.source == 0 and n.length > 0
        )
    return out


def _make_inputs():
    spec = importlib.util.spec_from_file_location(
        "make_inputs", ROOT / "tests" / "data" / "records" / "make_inputs.py"
    )
    mod = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(mod)
    return mod


def records_seeds(bodies: list) -> dict[str, bytes]:
    lim = MAX_SEED["records"]
    seeds: dict[str, bytes] = {}
    for p in sorted((ROOT / "tests" / "data" / "records").glob("*.bin")):
        _put(seeds, b"\x00" + p.read_bytes()[: lim - 1], lim)
    mi = _make_inputs()
    for codec in range(5):  # none, gzip, snappy, lz4, zstd
        _put(seeds, b"\x00" + mi.builder_batch(3, codec), lim)
    for magic in (0, 1):
        for codec in range(4 if magic else 3):  # legacy: none, gzip, snappy (+ lz4 for v1)
            _put(seeds, b"\x00" + mi.legacy_set(magic, 2, codec), lim)
    by_attr: dict[int, int] = defaultdict(int)
    for f in _records_fields(bodies):
        attr = f[21:23] if len(f) > 23 else b""
        key = hash((f[16:17], attr))
        if by_attr[key] < 3:
            by_attr[key] += 1
            _put(seeds, b"\x00" + f[: lim - 1], lim)
    return seeds


def consumer_seeds(bodies: list) -> dict[str, bytes]:
    lim = MAX_SEED["consumer"]
    seeds: dict[str, bytes] = {}
    rng = random.Random(11)
    for sel, name in ((0, "ConsumerProtocolSubscription"), (1, "ConsumerProtocolAssignment")):
        defs = se.message_defs(name)
        top = defs[-1]["valid"][1]
        for v in range(top + 1):
            layout = se.layout_of(defs, v)
            for _ in range(2):
                _put(
                    seeds,
                    bytes([sel])
                    + se.encode_message(name, v, se.random_value(layout, rng, tame=True)),
                    lim,
                )
    # real group metadata/assignments: JoinGroup request protocols, SyncGroup assignments
    ctx = DecodeContext()
    for api, v, is_req, body in bodies:
        if api not in (11, 14):
            continue
        node = decode_body(api, v, is_req, body, 0, len(body), ctx)
        for n in node.walk():
            if (
                n.name in ("Metadata", "Assignment")
                and n.children
                and n.children[0].name == "Version"
            ):
                data = bytes(body[n.children[0].offset : n.offset + n.length])
                _put(seeds, bytes([0 if n.name == "Metadata" else 1]) + data, lim)
    return seeds


def sasl_seeds() -> dict[str, bytes]:
    lim = MAX_SEED["sasl"]
    seeds: dict[str, bytes] = {}
    tokens = [
        b"\x00alice\x00secret",
        b"admin\x00alice\x00secret",
        b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL",
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
        b"e=invalid-proof",
        b"n,a=alice,\x01auth=Bearer eyJhbGciOiJub25lIn0.e30.\x01host=broker\x01\x01",
        b"y,,\x01\x01",
        b"p=tls-server-end-point,,n=bob,r=abc",
        b"\xff\xfe\x00\x00",
    ]
    for t in tokens:
        for sel in (0, 1):
            _put(seeds, bytes([sel]) + t, lim)
    return seeds


def build() -> dict[str, int]:
    bodies = list(_capture_bodies())
    corpora = {
        "capture": capture_seeds(),
        "stream": stream_seeds(),
        "schema": schema_seeds(bodies),
        "records": records_seeds(bodies),
        "consumer": consumer_seeds(bodies),
        "sasl": sasl_seeds(),
    }
    sizes = {}
    for name, seeds in corpora.items():
        d = CORPUS / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for key, data in sorted(seeds.items()):
            (d / key).write_bytes(data)
        sizes[name] = sum(len(v) for v in seeds.values())
        print(f"{name:9s} {len(seeds):5d} seeds {sizes[name]:8d} bytes")  # noqa: T201
    return sizes


if __name__ == "__main__":
    build()
