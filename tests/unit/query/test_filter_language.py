"""The filter language: every field and operator against a reference computed from the
exchange's NDJSON, error messages with the caret's column, the API the TUI uses, and lazy
body decoding (header terms never decode; body terms only where header terms let them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kanalyze.bodies import BodyDecoder
from kanalyze.export import ExchangeEncoder
from kanalyze.query import Env, Filter, FilterError, compile_filter, try_compile
from kanalyze.query.fields import FIELDS
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[3]
CAPS = ("lib_group_rebalance.pcap", "kp_legacy.pcap", "lib_acks.pcap", "crafted/baseline.pcap")


@pytest.fixture(scope="module")
def data():
    """(exchanges, NDJSON dicts) of a few captures, names learned as export learns them."""
    out = []
    for name in CAPS:
        exs = list(Session([str(ROOT / "captures" / name)]).exchanges())
        enc = ExchangeEncoder()
        out.append((exs, [json.loads(enc.line(ex)) for ex in exs]))
    return out


def err_names(d):
    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k.endswith("error_code_name") and x != "NONE":
                    yield x
                yield from walk(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x)

    return set(walk(d["response"]["body"])) if d["response"] else set()


def ep(d, side):
    host, port = d["connection"][side].rsplit(":", 1)
    return host, int(port)


def start(d):
    return (d["request"] or d["response"])["ts"]


def sides(d):
    return [m for m in (d["request"], d["response"]) if m]


# (expression, reference over the NDJSON dict): every field and operator at least once
CASES = [
    ('api == "JoinGroup"', lambda d: d["api"] == "JoinGroup"),
    ('api == "joingroup"', lambda d: d["api"] == "JoinGroup"),  # enum values ignore case
    ('api != "Produce"', lambda d: d["api"] is not None and d["api"] != "Produce"),
    ('api contains "Group"', lambda d: "Group" in (d["api"] or "")),
    ('api matches "^(Sync|Join)"', lambda d: re.match("^(Sync|Join)", d["api"] or "") is not None),
    ('api in {"Heartbeat", "Fetch"}', lambda d: d["api"] in ("Heartbeat", "Fetch")),
    ("api_key == 0", lambda d: d["api_key"] == 0),
    ("api_key < 3", lambda d: d["api_key"] is not None and d["api_key"] < 3),
    ("api_key <= 3", lambda d: d["api_key"] is not None and d["api_key"] <= 3),
    ("api_key > 10", lambda d: d["api_key"] is not None and d["api_key"] > 10),
    ("api_key >= 10", lambda d: d["api_key"] is not None and d["api_key"] >= 10),
    ("version in 3..7", lambda d: d["api_version"] is not None and 3 <= d["api_version"] <= 7),
    ("correlation_id in {1, 2, 3}", lambda d: d["correlation_id"] in (1, 2, 3)),
    (
        'client_id matches "^kp|consumer"',
        lambda d: re.search("^kp|consumer", d["client_id"] or "") is not None,
    ),
    ('client contains ":"', lambda d: True),
    ('client.ip == "127.0.0.1"', lambda d: ep(d, "client")[0] == "127.0.0.1"),
    ("client.port > 50000", lambda d: ep(d, "client")[1] > 50000),
    (
        'broker matches ":1909[0-2]$"',
        lambda d: re.search(":1909[0-2]$", d["connection"]["broker"]) is not None,
    ),
    ('broker.ip != "127.0.0.1"', lambda d: ep(d, "broker")[0] != "127.0.0.1"),
    ("broker.port == 19092", lambda d: ep(d, "broker")[1] == 19092),
    ("conn == 3 || conn == 5", lambda d: d["connection"]["id"] in (3, 5)),
    ('status == "ok"', lambda d: d["status"] == "ok"),
    ('status != "ok"', lambda d: d["status"] != "ok"),
    ("latency > 1ms", lambda d: (d["latency_ms"] or 0) > 1),
    ("latency >= 0.5", lambda d: (d["latency_ms"] or 0) >= 0.5),  # plain numbers are ms
    ("latency < 500us", lambda d: d["latency_ms"] is not None and d["latency_ms"] < 0.5),
    ("latency > 0.1s", lambda d: (d["latency_ms"] or 0) > 100),
    ("latency", lambda d: d["latency_ms"] is not None),  # a bare field: present
    ("not latency", lambda d: d["latency_ms"] is None),
    ("frame == 30", lambda d: any(30 in (m["frame"], m["first_frame"]) for m in sides(d))),
    (
        "frame in 50..60",
        lambda d: any(50 <= m[k] <= 60 for m in sides(d) for k in ("frame", "first_frame")),
    ),
    ("size > 0.5KB", lambda d: sum(m["size"] for m in sides(d)) > 500),
    ("size <= 100", lambda d: sum(m["size"] for m in sides(d)) <= 100),
    ("request.size > 200B", lambda d: d["request"] is not None and d["request"]["size"] > 200),
    (
        "response.size >= 0.25KiB",
        lambda d: d["response"] is not None and d["response"]["size"] >= 256,
    ),
    ("acks == -1", lambda d: d.get("acks") == -1),
    ("acks", lambda d: "acks" in d),
    ("inferred", lambda d: "inferred" in d),
    ("inferred == false", lambda d: "inferred" not in d),
    ('error == "MEMBER_ID_REQUIRED"', lambda d: "MEMBER_ID_REQUIRED" in err_names(d)),
    ('error == "member_id_required"', lambda d: "MEMBER_ID_REQUIRED" in err_names(d)),
    (
        'error in {"REBALANCE_IN_PROGRESS", "UNKNOWN_PRODUCER_ID"}',
        lambda d: bool(err_names(d) & {"REBALANCE_IN_PROGRESS", "UNKNOWN_PRODUCER_ID"}),
    ),
    ('error contains "PRODUCER"', lambda d: any("PRODUCER" in e for e in err_names(d))),
    ("errors", lambda d: bool(err_names(d))),
    ("errors == true", lambda d: bool(err_names(d))),
    ("!errors", lambda d: not err_names(d)),
    ("errors != true", lambda d: not err_names(d)),
    ("records >= 1", None),  # checked against the batches below
    ('partition == 0 and topic matches "-"', None),
    (
        "body.request.acks == -1",
        lambda d: d["request"] is not None and (d["request"]["body"] or {}).get("acks") == -1,
    ),
    (
        'body.request.group_id == "lib-group-1"',
        lambda d: (
            d["request"] is not None
            and (d["request"]["body"] or {}).get("group_id") == "lib-group-1"
        ),
    ),
    (
        "body.response.generation_id >= 0",
        lambda d: (
            d["response"] is not None
            and isinstance((d["response"]["body"] or {}).get("generation_id"), int)
            and d["response"]["body"]["generation_id"] >= 0
        ),
    ),
    ("time > 0", lambda d: True),
    ('body.request.protocols.name == "range"', None),
    ("body.response.members", None),
    (
        '(api == "Produce" or api == "Fetch") && !(latency < 0.2)',
        lambda d: (
            d["api"] in ("Produce", "Fetch")
            and not (d["latency_ms"] is not None and d["latency_ms"] < 0.2)
        ),
    ),
]


def records(d):
    side = {"Produce": d["request"], "Fetch": d["response"]}.get(d["api"])
    if side is None or side["body"] is None:
        return None
    n = 0
    stack = [side["body"]]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("batches"), list):  # a records field: count, do not descend
                for b in v["batches"]:
                    inner = b.get("records")  # a magic 0/1 wrapper's inner messages
                    n += b["record_count"] if "batch_length" in b else (
                        len(inner) if isinstance(inner, list) else 1)
                continue
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def body_paths(d, side, *path):
    vals = [d[side]["body"]] if d[side] and d[side]["body"] is not None else []
    for key in path:
        vals = [
            x[key]
            for v in vals
            for x in (v if isinstance(v, list) else [v])
            if isinstance(x, dict) and key in x
        ]
    return [x for v in vals for x in (v if isinstance(v, list) else [v])]


def topic_partitions(d):
    out = set()
    for m in sides(d):
        stack = [m["body"]]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                name = next(
                    (v[k] for k in ("name", "topic", "topic_name") if isinstance(v.get(k), str)),
                    None,
                )
                for lst in v.values():
                    if isinstance(lst, list):
                        for p in lst:
                            if isinstance(p, dict):
                                for k in ("partition_index", "index", "partition"):
                                    if type(p.get(k)) is int:
                                        out.add((name, p[k]))
                                        break
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
    return out


REFS = {
    "records >= 1": lambda d: (records(d) or 0) >= 1,
    'partition == 0 and topic matches "-"': lambda d: (
        any(p == 0 for _t, p in topic_partitions(d))
        and any(t and "-" in t for t, _p in topic_partitions(d))
    ),
    'body.request.protocols.name == "range"': lambda d: (
        "range" in body_paths(d, "request", "protocols", "name")
    ),
    "body.response.members": lambda d: any(
        v is not None and v is not False for v in body_paths(d, "response", "members")
    ),
}


@pytest.mark.parametrize(("expr", "ref"), CASES, ids=[c[0] for c in CASES])
def test_field_and_operator(expr, ref, data):
    ref = ref or REFS[expr]
    selected = total = 0
    for exs, dicts in data:
        f = compile_filter(expr)
        got = [f.match(ex) for ex in exs]
        want = [bool(ref(d)) for d in dicts]
        assert got == want, expr
        selected += sum(got)
        total += len(got)
    assert 0 < selected < total or expr in (
        'client contains ":"',
        "inferred == false",
        "inferred",
        "time > 0",
    ), expr


def test_every_named_field_is_exercised():
    used = {m for expr, _r in CASES for m in re.findall(r"[a-z_]+(?:\.[a-z_]+)?", expr)}
    assert set(FIELDS) <= used


# -- errors: one message, the caret's column -----------------------------------------------

ERRORS = [
    ("", "empty filter", 1),
    ("api ==", "ends too early", 7),
    ("latency > ", "ends too early", 11),
    ('api = "Fetch"', "equality is ==", 5),
    ("api == 'Fetch'", "double quotes", 8),
    ("api == Fetch", 'strings go in double quotes: api == "Fetch"', 8),
    ("latncy > 5", "unknown field 'latncy' (did you mean \"latency\"?)", 1),
    ('api == "Fetc"', 'did you mean "Fetch"?', 8),
    ('status == "done"', "status has no value 'done'", 11),
    ('error == "NOT_A_CODE"', "error has no value", 10),
    ("api < 3", "does not take '<'", 5),
    ("errors > 1", "does not take '>'", 8),
    ("latency > abc", "needs a number", 11),
    ("latency > 5 parsecs", "unexpected 'parsecs'", 13),
    ("latency > 5parsecs", "unknown time unit 'parsecs'", 11),
    ("api_key == 1.5", "whole number", 12),
    ("api_key == 1ms", "plain number", 12),
    ("size > 3XB", "unknown size unit", 8),
    ('time > "yesterday"', "ISO-8601", 8),
    ('client matches "("', "bad regular expression", 17),
    ("(api_key == 1", "expected ')'", 14),
    ("api_key == 1)", "unexpected ')'", 13),
    ("api_key == 1 api_key", "unexpected 'api_key'", 14),
    ("body.acks == 1", "body.request. or body.response.", 1),
    ("body.request.acks == 1ms", "plain numbers", 22),
    ("conn in {}", "unexpected '}'", 10),
    ("and", "unexpected 'and'", 1),
    ("errors &", "&& or ||", 8),
]


@pytest.mark.parametrize(
    ("expr", "message", "column"), ERRORS, ids=[e[0] or "empty" for e in ERRORS]
)
def test_error_message_and_caret(expr, message, column):
    with pytest.raises(FilterError) as info:
        compile_filter(expr)
    e = info.value
    assert message in e.message
    assert e.column == column
    lines = e.render(expr).splitlines()
    assert len(lines) == 3 and lines[2].index("^") == 2 + column - 1


def test_try_compile_returns_the_error_for_an_input_box():
    e = try_compile("latency >")
    assert isinstance(e, FilterError) and e.column == 10
    f = try_compile('api == "Fetch"')
    assert isinstance(f, Filter) and not f.needs_bodies
    assert try_compile("errors").needs_bodies  # type: ignore[union-attr]


def test_time_absolute_iso_and_epoch(data):
    exs, dicts = data[0]
    mid = start(dicts[len(dicts) // 2])
    iso = __import__("datetime").datetime.fromtimestamp(mid, __import__("datetime").UTC).isoformat()
    a = compile_filter(f"time >= {mid!r}")
    b = compile_filter(f'time >= "{iso}"')
    want = [start(d) >= mid for d in dicts]
    assert [a.match(ex) for ex in exs] == want == [b.match(ex) for ex in exs]
    assert 0 < sum(want) < len(want)


# -- laziness -----------------------------------------------------------------------------


def test_header_terms_never_decode_a_body(data, monkeypatch):
    calls = []
    monkeypatch.setattr(BodyDecoder, "json", lambda *a, **k: calls.append(a) or None)
    for exs, _d in data:
        f = compile_filter('api == "Fetch" or (latency > 1ms and not client_id contains "x")')
        for ex in exs:
            f.match(ex)
        assert f.env._decoder is None
    assert calls == []


def test_body_terms_are_tried_after_header_terms(data, monkeypatch):
    decoded = []
    real = BodyDecoder.json

    def spy(self, ex, msg, is_request, walk=None):
        decoded.append(ex.api)
        return real(self, ex, msg, is_request, walk)

    monkeypatch.setattr(BodyDecoder, "json", spy)
    exs, dicts = data[0]
    # written body-first: evaluated header-first, so only Heartbeats are decoded
    f = compile_filter('body.request.generation_id > 0 and api == "Heartbeat"')
    hits = [f.match(ex) for ex in exs]
    assert any(hits)
    assert set(decoded) == {"Heartbeat"}
    assert len(decoded) == sum(d["api"] == "Heartbeat" for d in dicts)


def test_one_env_shares_topic_names_with_the_export(data):
    """A filter built on the export's decode context names topic ids as the export does."""
    from dissectors.context import DecodeContext

    ctx = DecodeContext()
    env = Env(ctx)
    f = compile_filter('topic == "lib-group"', env)
    exs = data[0][0]
    for ex in exs:
        env.decoder.learn(ex)
        f.match(ex)
    assert env.decoder.names.mapping is ctx.topic_names


def test_any_text_is_a_filter_or_a_filter_error():
    """Random token soup and random characters: never an exception other than FilterError,
    and every error points inside the text (or just past its end)."""
    import random

    rng = random.Random(15)
    vocab = ['api', 'latency', 'body.request.acks', 'topic', '==', '!=', '<', '>=', 'in', '{', '}',
             ',', '..', '(', ')', 'and', 'or', 'not', '!', '&&', '||', '"Fetch"', '"x\\"y"', '5',
             '1.5', '100ms', '-1', 'true', 'false', 'contains', 'matches', '"(["', 'errors', '=',
             "'", '"', '.', 'error', '"NONE"', '3..', 'frame', 'time', '"2026-01-01"']
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    texts += [
        "".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(0, 12))) for _ in range(500)
    ]
    ok = 0
    for text in texts:
        result = try_compile(text)
        if isinstance(result, FilterError):
            assert 1 <= result.column <= len(text) + 1, text
        else:
            ok += 1
    assert ok > 50  # the soup also forms valid filters
