"""`kanalyze export --format events` over every capture of the repo: one type per field (derived
from the lines, compared with the committed index template), `@timestamp` on every line, every
line under the cap, and DuckDB loads the lot and counts errors per topic per minute as the NDJSON
does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest

from kanalyze.capture import CaptureError
from kanalyze.export import ExchangeEncoder
from kanalyze.export.events import DEFAULT_MAX_LINE, FIELDS, EventEncoder, index_template
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs" / "dashboards" / "kanalyze-events.index-template.json"
CAPTURES = sorted(
    p for p in (ROOT / "captures").rglob("*") if p.name.endswith((".pcap", ".pcap.gz", ".pcapng"))
)
# the index types and the JSON types their values must have
JSON_TYPE = {
    "date": "string",
    "keyword": "string",
    "ip": "string",
    "text": "string",
    "long": "integer",
    "boolean": "boolean",
}


def _json_type(v: object) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        inner = {_json_type(x) for x in v}
        assert len(inner) <= 1, v
        return f"array<{inner.pop() if inner else '?'}>"
    return type(v).__name__


def _exchanges(cap: Path) -> list:
    try:
        return list(Session([str(cap)]).exchanges())
    except CaptureError:
        return []


@cache
def exported(with_bodies: bool = False) -> tuple[tuple[str, list[bytes], list[dict]], ...]:
    """(capture name, event lines, NDJSON records) for every capture of the repo."""
    out = []
    for cap in CAPTURES:
        enc = EventEncoder(with_bodies=with_bodies)
        nd = ExchangeEncoder()
        exs = _exchanges(cap)
        out.append((cap.name, [enc.line(ex) for ex in exs], [nd.encode(ex) for ex in exs]))
    return tuple(out)


def mapping_types() -> dict[str, str]:
    """Dotted field -> index type, read back from the committed template."""
    out: dict[str, str] = {}

    def walk(props: dict, prefix: str) -> None:
        for k, v in props.items():
            if "properties" in v:
                walk(v["properties"], f"{prefix}{k}.")
            else:
                out[prefix + k] = v["type"]

    walk(json.loads(TEMPLATE.read_text())["template"]["mappings"]["properties"], "")
    return out


def test_committed_template_is_current() -> None:
    assert json.loads(TEMPLATE.read_text()) == index_template(), (
        "regenerate docs/dashboards/kanalyze-events.index-template.json from index_template()"
    )


@pytest.mark.parametrize("with_bodies", [False, True], ids=["plain", "with-bodies"])
def test_one_type_per_field_timestamp_and_cap(with_bodies: bool) -> None:
    mapping = mapping_types()
    seen: dict[str, set[str]] = {}
    lines = 0
    for name, evs, _nd in exported(with_bodies):
        for line in evs:
            lines += 1
            assert len(line) + 1 <= DEFAULT_MAX_LINE, (name, len(line))
            doc = json.loads(line)
            assert list(doc) == list(FIELDS), name  # every field on every line, in one order
            ts = doc["@timestamp"]
            assert datetime.fromisoformat(ts).tzinfo is not None and ts.endswith("Z"), ts
            for k, v in doc.items():
                if v is not None and v != []:
                    seen.setdefault(k, set()).add(_json_type(v))
    assert lines > 500
    for field, kinds in seen.items():
        assert len(kinds) == 1, (field, kinds)
        index_type = mapping[field]
        want = JSON_TYPE[index_type]
        got = kinds.pop()
        assert got in (want, f"array<{want}>"), (field, got, index_type)
        assert got.startswith("array") == FIELDS[field].endswith("[]"), field
    # the fields that matter were filled somewhere
    for f in (
        "kafka.topics",
        "kafka.partitions",
        "kafka.error_codes",
        "kafka.records",
        "kafka.group_id",
        "kafka.producer_id",
        "kafka.acks",
        "event.duration",
        "kafka.replica_id",
    ):
        assert f in seen, f
    assert ("kafka.body" in seen) == with_bodies


def test_line_cap_cuts_the_body_first() -> None:
    cap = ROOT / "captures" / "lib_codecs.pcap"
    enc = EventEncoder(with_bodies=True, max_line=4096)
    docs = [json.loads(enc.line(ex)) for ex in _exchanges(cap)]
    cut = [d for d in docs if d["kafka.truncated"]]
    assert cut, "lib_codecs' Produce bodies are larger than 4 KiB"
    for d in cut:
        assert len(json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode()) <= 4096
        assert d["kafka.topics"] and d["kafka.body"].startswith('{"request":')


def _errors(v: object) -> int:
    if isinstance(v, dict):
        return sum(
            1
            if (k == "error_code" or k.endswith("_error_code")) and type(x) is int and x
            else _errors(x)
            for k, x in v.items()
        )
    if isinstance(v, list):
        return sum(_errors(x) for x in v)
    return 0


def _listed_topics(body: object, names: dict[str, str], out: set[str]) -> None:
    """Topics of the per-topic lists of an NDJSON body (the test's own reading)."""
    if isinstance(body, dict):
        for k, v in body.items():
            if isinstance(v, list) and k in ("topics", "topic_data", "responses"):
                for t in v:
                    if isinstance(t, dict):
                        name = t.get("name") or t.get("topic") or t.get("topic_name")
                        tid = t.get("topic_id")
                        if isinstance(name, str) and name:
                            out.add(name)
                        elif isinstance(tid, str) and tid.strip("0-"):
                            out.add(names.get(tid, tid[:8]))
            _listed_topics(v, names, out)
    elif isinstance(body, list):
        for x in body:
            _listed_topics(x, names, out)


def ndjson_errors_per_topic_minute() -> Counter:
    want: Counter = Counter()
    for _name, _evs, nd in exported(False):
        names: dict[str, str] = {}
        for d in nd:
            rsp = (d["response"] or {}).get("body")
            if d["api"] == "Metadata" and isinstance(rsp, dict):
                for t in rsp.get("topics") or []:
                    if t.get("topic_id") and t.get("name"):
                        names[t["topic_id"]] = t["name"]
            n = _errors(rsp)
            if not n:
                continue
            topics: set[str] = set()
            for side in ("request", "response"):
                if d[side]:
                    _listed_topics(d[side]["body"], names, topics)
            ts = (d["request"] or d["response"])["ts"]
            minute = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M")
            for t in topics:
                want[(t, minute)] += n
    return want


def test_duckdb_loads_every_capture_and_counts_errors_per_topic_minute(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")  # in the test extra; skipped only where not installed
    path = tmp_path / "events.ndjson"
    with path.open("wb") as f:
        for _name, evs, _nd in exported(False):
            for line in evs:
                f.write(line + b"\n")
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    total = con.execute("SELECT count(*) FROM read_json_auto(?)", [str(path)]).fetchone()[0]
    assert total == sum(len(evs) for _n, evs, _nd in exported(False))
    rows = con.execute(
        """SELECT topic,
                  strftime(date_trunc('minute', CAST("@timestamp" AS TIMESTAMPTZ)),
                           '%Y-%m-%dT%H:%M'),
                  sum("kafka.error_count")
           FROM (SELECT unnest("kafka.topics") AS topic, * FROM read_json_auto(?)
                 WHERE "kafka.error_count" > 0)
           GROUP BY ALL""",
        [str(path)],
    ).fetchall()
    got = Counter({(t, m): int(n) for t, m, n in rows})
    want = ndjson_errors_per_topic_minute()
    assert got == want
    assert sum(want.values()) > 0
    # errors by name per minute: the whole error count, topic or not
    by_name = con.execute(
        """SELECT sum(len("kafka.error_codes")) FILTER (WHERE "kafka.error_count" > 0),
                  sum("kafka.error_count") FROM read_json_auto(?)""",
        [str(path)],
    ).fetchone()
    assert by_name[1] == sum(
        _errors((d["response"] or {}).get("body")) for _n, _e, nd in exported(False) for d in nd
    )
    assert by_name[0] > 0


def test_cli_events_and_bad_cap() -> None:
    cap = ROOT / "captures" / "aio_group.pcap"
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", "--format", "events", str(cap)],
        capture_output=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines and all(json.loads(x)["kafka.schema"] == "kanalyze.event/1" for x in lines)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "kanalyze.cli",
            "export",
            "--format",
            "events",
            "--max-line-bytes",
            "10",
            str(cap),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 2
    assert "--max-line-bytes" in p.stderr.strip().splitlines()[-1]


def test_bodies_are_redacted_by_default() -> None:
    """The body string of an event is redacted like every other output (SCRAM proof here)."""
    cap = ROOT / "captures" / "sasl_scram_rejected.pcap"
    secret = "C7vD5FJE131kphCrRTsOkNmFLmj6NddLUMuz2x5Uvw8="  # the client proof on the wire
    enc = EventEncoder(with_bodies=True)
    text = b"\n".join(enc.line(ex) for ex in _exchanges(cap)).decode()
    assert '\\"client_proof\\":\\"<redacted' in text
    assert secret not in text
    from dissectors.context import DecodeContext

    shown = EventEncoder(DecodeContext(show_secrets=True), with_bodies=True)
    assert secret in b"\n".join(shown.line(ex) for ex in _exchanges(cap)).decode()


def test_line_cap_halves_the_longest_list_without_bodies() -> None:
    cap = ROOT / "captures" / "kp_codecs.pcap"
    enc = EventEncoder(max_line=1120)
    docs = [(len(line), json.loads(line)) for line in map(enc.line, _exchanges(cap))]
    cut = [d for n, d in docs if d["kafka.partition_count"] > len(d["kafka.partitions"])]
    assert cut and all(d["kafka.truncated"] for d in cut)
    assert all(n <= 1120 for n, _d in docs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--with-bodies"], "--with-bodies needs --format events"),
        (
            ["--format", "openmetrics", "--max-line-bytes", "5000"],
            "--max-line-bytes needs --format events",
        ),
        (["--format", "events", "--step", "1"], "--step needs --format openmetrics"),
    ],
)
def test_format_options_without_their_format(argv: list[str], message: str) -> None:
    cap = ROOT / "captures" / "aio_group.pcap"
    p = subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", "export", *argv, str(cap)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [f"kanalyze: error: {message}"]
