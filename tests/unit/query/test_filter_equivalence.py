"""`export -Y EXPR` keeps exactly the lines that a plain Python predicate over the full,
unfiltered NDJSON selects, on every capture in captures/ (the filter's reference semantics:
docs/filters.md)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from kanalyze.cli import main

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = sorted(
    p
    for d in ("captures", "captures/crafted", "captures/replication")
    for p in (ROOT / d).iterdir()
    if p.suffix in (".pcap", ".pcapng", ".gz") and not p.name.startswith("bad_")
)


def export(*argv: str) -> list[bytes]:
    out = io.BytesIO()
    old = sys.stdout
    sys.stdout = wrapper = io.TextIOWrapper(out, encoding="utf-8")
    try:
        rc = main(["export", *argv])
        wrapper.flush()
    finally:
        sys.stdout = old
        wrapper.detach()
    assert rc == 0
    return out.getvalue().splitlines()


# -- the reference: facts read straight from the NDJSON dicts ------------------------------


def walk(value):
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


def bodies(d):
    return [
        m["body"] for m in (d["request"], d["response"]) if m is not None and m["body"] is not None
    ]


def response_body(d):
    return d["response"]["body"] if d["response"] is not None else None


def error_names(d):
    return {
        v
        for x in walk(response_body(d))
        for k, v in x.items()
        if k.endswith("error_code_name") and v != "NONE"
    }


def topics(d):
    out = set()
    for b in bodies(d):
        for x in walk(b):
            for k in ("name", "topic", "topic_name"):
                if isinstance(x.get(k), str):
                    out.add(x[k])
    return out


def partitions(d):
    return {
        x[k]
        for b in bodies(d)
        for x in walk(b)
        for k in ("partition_index", "index", "partition")
        if type(x.get(k)) is int
    }


def records(d):
    side = {"Produce": d["request"], "Fetch": d["response"]}.get(d["api"])
    if side is None or side["body"] is None:
        return None
    return sum(_count(b) for x in walk(side["body"]) for b in x.get("batches") or ())


def _count(b):
    """A v2 batch's record count; a magic 0/1 message is one record, or a compressed wrapper of
    its inner messages."""
    if "batch_length" in b:
        return b["record_count"]
    inner = b.get("records")
    return len(inner) if isinstance(inner, list) else 1


def frames(d):
    return {m[k] for m in (d["request"], d["response"]) if m for k in ("frame", "first_frame")}


def body_path(d, side, *path):
    m = d[side]
    vals = [m["body"]] if m and m["body"] is not None else []
    for key in path:
        vals = [
            x[key]
            for v in vals
            for x in (v if isinstance(v, list) else [v])
            if isinstance(x, dict) and key in x
        ]
    flat = []
    for v in vals:
        flat.extend(v if isinstance(v, list) else [v])
    return flat


def start(d):
    return (d["request"] or d["response"])["ts"]


def size(d):
    return sum(m["size"] for m in (d["request"], d["response"]) if m)


def port(ep):
    return int(ep.rsplit(":", 1)[1])


CASES = [
    ('api == "Fetch"', lambda d: d["api"] == "Fetch"),
    (
        'api != "Fetch" and latency > 0.5ms',
        lambda d: d["api"] is not None and d["api"] != "Fetch" and (d["latency_ms"] or 0) > 0.5,
    ),
    (
        'status != "ok" || api_key in {18, 3}',
        lambda d: d["status"] != "ok" or d["api_key"] in (18, 3),
    ),
    ("acks == 0 or acks == -1", lambda d: d.get("acks") in (0, -1)),
    (
        'client_id contains "1" and not client_id matches "^kp"',
        lambda d: (
            d["client_id"] is not None
            and "1" in d["client_id"]
            and not re.search("^kp", d["client_id"])
        ),
    ),
    (
        "conn in {1, 3} && version >= 3",
        lambda d: d["connection"]["id"] in (1, 3) and (d["api_version"] or -1) >= 3,
    ),
    ("frame in 10..40", lambda d: any(10 <= f <= 40 for f in frames(d))),
    ("errors", lambda d: bool(error_names(d))),
    (
        'error matches "^(NOT_|UNKNOWN|COORDINATOR|REBALANCE|ILLEGAL|SASL)"',
        lambda d: any(
            re.search("^(NOT_|UNKNOWN|COORDINATOR|REBALANCE|ILLEGAL|SASL)", e)
            for e in error_names(d)
        ),
    ),
    (
        'topic contains "-" and partition == 0',
        lambda d: any("-" in t for t in topics(d)) and 0 in partitions(d),
    ),
    ("records >= 2", lambda d: (records(d) or 0) >= 2),
    ("body.request.acks == -1", lambda d: -1 in body_path(d, "request", "acks")),
    (
        "body.response.throttle_time_ms >= 0 and size > 1KB",
        lambda d: (
            any(type(v) is int and v >= 0 for v in body_path(d, "response", "throttle_time_ms"))
            and size(d) > 1000
        ),
    ),
    (
        "body.response.error_code != 0",
        lambda d: bool(vs := body_path(d, "response", "error_code")) and all(v != 0 for v in vs),
    ),
    (
        "body.response.responses.partitions.high_watermark > 0",
        lambda d: any(
            type(v) is int and v > 0
            for v in body_path(d, "response", "responses", "partitions", "high_watermark")
        ),
    ),
    (
        (
            'not (api == "Metadata" or api == "ApiVersions") and broker.port < 30000 '
            "and client.port > 1024"
        ),
        lambda d: (
            d["api"] not in ("Metadata", "ApiVersions")
            and port(d["connection"]["broker"]) < 30000
            and port(d["connection"]["client"]) > 1024
        ),
    ),
    (
        "latency in 0.1..0.3 or inferred",
        lambda d: d["latency_ms"] is not None and 0.1 <= d["latency_ms"] <= 0.3 or "inferred" in d,
    ),
]


@pytest.mark.parametrize("cap", CAPTURES, ids=lambda p: p.name)
def test_filter_selects_the_reference_lines(cap):
    lines = export(str(cap))
    dicts = [json.loads(line) for line in lines]
    mid = start(dicts[len(dicts) // 2]) if dicts else 0
    cases = [*CASES, (f"time >= {mid!r}", lambda d: start(d) >= mid)]
    hits = 0
    for expr, ref in cases:
        want = [line for line, d in zip(lines, dicts, strict=True) if ref(d)]
        got = export(str(cap), "-Y", expr)
        assert got == want, expr
        hits += bool(want)
    assert not dicts or hits >= 3  # the expressions select something on real traffic
