"""The command line as a user meets it: useful output, clear errors, never a traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAP = ROOT / "captures" / "lib_codecs.pcap"


def kanalyze(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kanalyze.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )


def test_export_to_file_and_stdout_agree(tmp_path):
    out = tmp_path / "x.ndjson"
    a = kanalyze("export", str(CAP), "-o", str(out))
    b = kanalyze("export", str(CAP))
    assert a.returncode == 0 and b.returncode == 0
    assert out.read_bytes() == b.stdout
    rows = [json.loads(line) for line in b.stdout.splitlines()]
    assert len(rows) > 20 and all(r["schema"] == "kanalyze.exchange/1" for r in rows)


def test_stdin_pipe():
    r = kanalyze("export", "--header-only", "-", stdin=CAP.read_bytes())
    assert r.returncode == 0
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows and all(row["request"] is None or row["request"]["body"] is None for row in rows)


def test_summary_json_adds_up():
    r = kanalyze("summary", "--json", str(CAP))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exchanges"] == sum(a["count"] for a in doc["apis"]) == sum(doc["status"].values())
    for side in ("client_to_broker", "broker_to_client"):
        b = doc["bytes"][side]
        assert b["stream"] == b["decoded"] + b["skipped"] + b["gaps"] > 0


def test_summary_text():
    r = kanalyze("summary", str(CAP))
    assert r.returncode == 0
    text = r.stdout.decode()
    assert "Produce" in text and "Fetch" in text and "client_to_broker" in text


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", b"empty"),
        (b"just some text\n", b"not a pcap"),
        (bytes(range(256)) * 64, b"not a pcap"),
    ],
    ids=["empty", "text", "binary"],
)
def test_bad_inputs_give_clear_errors(tmp_path, content, needle):
    f = tmp_path / "bad.pcap"
    f.write_bytes(content)
    for cmd in ("export", "summary"):
        r = kanalyze(cmd, str(f))
        assert r.returncode == 2
        assert needle in r.stderr and b"Traceback" not in r.stderr


def test_missing_file_and_bad_options():
    r = kanalyze("export", "/no/such/file.pcap")
    assert r.returncode == 2 and b"cannot open" in r.stderr and b"Traceback" not in r.stderr
    r = kanalyze("export", str(CAP), "--port", "99999")
    assert r.returncode == 2 and b"not a TCP port" in r.stderr
    r = kanalyze("frobnicate")
    assert r.returncode == 2 and b"invalid choice" in r.stderr
    r = kanalyze()
    assert r.returncode == 2


def test_an_input_that_cannot_be_read_leaves_the_output_file_alone(tmp_path):
    """An input that is not there, a directory without captures, or a file that cannot be
    opened: one line, exit 2, and an earlier export in the output file is still there (it
    used to be emptied before the input was read)."""
    from kanalyze.inputs import unopenable_input

    out = tmp_path / "earlier.ndjson"
    out.write_bytes(b"an earlier export\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for bad, why in ((empty, b"no capture file"), (tmp_path / "gone.pcap", b"cannot open")):
        r = kanalyze("export", str(CAP), str(bad), "-o", str(out))
        assert r.returncode == 2 and why in r.stderr, r.stderr
        assert b"Traceback" not in r.stderr and out.read_bytes() == b"an earlier export\n"
    # what `export` asks before it opens the output (a directory here: the command line
    # expands those, and root opens any file, so permissions cannot stand in for it)
    assert unopenable_input([str(CAP), "-", "s3a://b/x.pcap"]) is None
    assert unopenable_input([str(CAP), str(empty)]) == f"{empty}: cannot open: Is a directory"


def test_a_directory_or_a_pattern_reads_the_captures_it_names(tmp_path):
    """A rotated set's directory (as `kanalyze spark` takes it) or a quoted pattern: the
    same lines as the files named one by one; what is not a capture in a directory is left
    out with a note; a directory without captures is one line and exit 2."""
    rot = tmp_path / "rot"
    rot.mkdir()
    other = ROOT / "captures" / "kp_codecs.pcap"
    (rot / "k.pcap").write_bytes(CAP.read_bytes())
    (rot / "k.pcap10").write_bytes(other.read_bytes())
    (rot / "notes.txt").write_text("rotated by tcpdump -C 1\n")
    (rot / "broker.log.gz").write_bytes(gzip.compress(b"[2026-11-25] INFO started\n"))
    (rot / "k.pcap5.gz").write_bytes(gzip.compress(CAP.read_bytes()))
    want = kanalyze("export", str(rot / "k.pcap"), str(rot / "k.pcap5.gz"), str(rot / "k.pcap10"))
    assert want.returncode == 0 and want.stdout.count(b"\n") > 20
    got = kanalyze("export", str(rot))
    assert got.returncode == 0 and got.stdout == want.stdout
    assert b"not a capture" in got.stderr and b"broker.log.gz (and 1 more)" in got.stderr
    by_pattern = kanalyze("export", str(rot / "k.pcap*"))
    assert by_pattern.returncode == 0 and by_pattern.stdout == want.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    r = kanalyze("summary", str(empty))
    assert r.returncode == 2 and b"no capture file in this directory" in r.stderr
    r = kanalyze("summary", str(tmp_path / "nothing*.pcap"))
    assert r.returncode == 2 and b"no file matches" in r.stderr


def test_export_into_a_text_only_stdout(tmp_path):
    """Called from Python with stdout redirected to a StringIO (no binary buffer): the same
    lines."""
    import contextlib
    import io

    from kanalyze.cli import main

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(["export", str(CAP)]) == 0
    assert text.getvalue().encode() == kanalyze("export", str(CAP)).stdout


def test_unwritable_output_is_a_clear_error(tmp_path):
    r = kanalyze("export", str(CAP), "-o", str(tmp_path / "no" / "such" / "dir.ndjson"))
    assert (
        r.returncode == 1
        and b"No such file or directory" in r.stderr
        and b"Traceback" not in r.stderr
    )
    if Path("/dev/full").exists():  # a full disk
        with open("/dev/full", "wb") as full:
            r = subprocess.run(
                [sys.executable, "-m", "kanalyze.cli", "export", str(CAP)],
                stdout=full,
                stderr=subprocess.PIPE,
                timeout=120,
                cwd=ROOT,
            )
        assert r.returncode == 1 and b"No space left" in r.stderr and b"Traceback" not in r.stderr


def test_unsupported_link_type_is_reported(tmp_path):
    from tests.support import packets as P

    f = tmp_path / "lt.pcap"
    f.write_bytes(P.pcap([(1.0, b"\x00" * 60)], linktype=147))
    r = kanalyze("summary", "--json", str(f))
    assert r.returncode == 3  # nothing analyzed (README: exit status)
    assert b"unsupported link type (1 packets of link type 147)" in r.stderr
    assert json.loads(r.stdout)["packets_not_tcp"]["unsupported_linktypes"] == {"147": 1}


def test_every_prefix_of_a_capture_is_handled(tmp_path):
    """Cut a real capture at many byte positions: always exchanges or a clear error, never a
    crash."""
    from kanalyze.capture import CaptureError
    from kanalyze.session import Session

    data = CAP.read_bytes()
    cuts = sorted({*range(0, 200, 7), *range(200, len(data), max(1, len(data) // 150)), len(data)})
    full = None
    for n in cuts:
        f = tmp_path / "p.pcap"
        f.write_bytes(data[:n])
        s = Session([str(f)])
        try:
            exs = list(s.exchanges())
        except CaptureError:
            assert n < 24
            continue
        st = s.engine.stats
        for side in (st.client, st.broker):
            assert side.stream == side.frames + side.skipped + side.gaps
        if n == len(data):
            full = len(exs)
    assert full and full > 20


def test_summary_names_error_codes():
    """tansu rejects magic 0/1 produce batches: the summary must count and name those errors."""
    r = kanalyze("summary", "--json", str(ROOT / "captures" / "lib_legacy.pcap"))
    doc = json.loads(r.stdout)
    produce_errors = [e for e in doc["errors"] if e["api"] == "Produce"]
    assert produce_errors and all(
        e["code"] != 0 and e["name"] and e["name"] != "NONE" for e in produce_errors
    )
    assert sum(e["count"] for e in produce_errors) >= 1


def test_summary_counts_diagnostics():
    r = kanalyze("summary", "--json", str(ROOT / "captures" / "crafted" / "gap.pcap"))
    doc = json.loads(r.stdout)
    assert doc["diagnostics"].get("truncated", 0) >= 1  # frames cut by the capture gaps
    assert doc["stream_events_dropped"] == 0


def test_summary_counts_limit_hits():
    """Engine bounds from the command line: a hit is counted in `limits`, named in the text output,
    and the bytes still add up."""
    cap = str(ROOT / "captures" / "aio_group.pcap")
    doc = json.loads(kanalyze("summary", "--json", cap).stdout)
    assert not any(doc["limits"].values())
    assert doc["peaks"]["open_connections"] >= 2
    doc = json.loads(
        kanalyze("summary", "--json", "--max-connections", "1", "--max-buffered", "100", cap).stdout
    )
    assert doc["limits"]["max_connections"] >= 1
    assert doc["peaks"]["open_connections"] == 1 and doc["peaks"]["buffered_bytes"] <= 100
    for side in ("client_to_broker", "broker_to_client"):
        b = doc["bytes"][side]
        assert b["stream"] == b["decoded"] + b["skipped"] + b["gaps"]
    text = kanalyze("summary", "--max-connections", "1", cap)
    assert text.returncode == 0 and b"limits hit: max_connections" in text.stdout


def test_limit_flags_reject_nonsense():
    r = kanalyze("summary", "--max-buffered", "0", str(CAP))
    assert r.returncode == 2 and b"positive" in r.stderr and b"Traceback" not in r.stderr


def _fetch_v15_topics(stdout: bytes) -> list[dict]:
    rows = [json.loads(line) for line in stdout.splitlines()]
    return [
        t
        for r in rows
        if r["api"] == "Fetch" and r["api_version"] == 15
        for t in r["request"]["body"]["topics"]
    ]


def test_topic_ids_file_names_fetches_by_id(tmp_path):
    """--topic-ids takes kafka-topics.sh --describe output (ids in Kafka's base64 form) or JSON;
    export then names every by-id topic, from the first frame on; a bad file is exit 2."""
    import base64
    import uuid

    cap = ROOT / "captures" / "replication" / "mixed_ids.pcap"
    truth = json.loads(cap.with_suffix(".truth.json").read_text())
    ((tid, name),) = truth["topic_ids"].items()
    kafka_form = base64.urlsafe_b64encode(uuid.UUID(tid).bytes).decode().rstrip("=")
    describe = tmp_path / "describe.txt"
    describe.write_text(
        f"Topic: {name}\tTopicId: {kafka_form}\tPartitionCount: 1\tReplicationFactor: 3\t"
        f"Configs: \n\tTopic: {name}\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\n"
    )
    plain = _fetch_v15_topics(kanalyze("export", str(cap)).stdout)
    # nothing on the wire names it for export (the record-batch links are the analysis's: a
    # filtered export must name what the unfiltered one names)
    assert all(t["topic_id"] == tid and "topic_name" not in t for t in plain)
    named = _fetch_v15_topics(kanalyze("export", "--topic-ids", str(describe), str(cap)).stdout)
    assert len(named) == len(plain) == 8 and all(t["topic_name"] == name for t in named)
    r = kanalyze("report", "--json", "--topic-ids", str(describe), str(cap))
    parts = json.loads(r.stdout)["replication"]
    assert [(p["topic"], p["topic_id"]) for p in parts] == [(name, tid)]
    # a filter on the name selects the by-id fetches too, from the first one on
    fetches = f'topic == "{name}" && api == "Fetch"'
    r = kanalyze("report", "--json", "--topic-ids", str(describe), "-Y", fetches, str(cap))
    assert json.loads(r.stdout)["stats"]["exchanges"] == 16
    bad = tmp_path / "bad.json"
    bad.write_text('{"repl-c": "not-an-id"}')
    r = kanalyze("report", "--topic-ids", str(bad), str(cap))
    assert r.returncode == 2 and b"is a topic id" in r.stderr and b"Traceback" not in r.stderr
