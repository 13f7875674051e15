"""-Y and the selection options on the views (`stats`, `metadata`, `records`): a filtered run
equals the unfiltered run restricted by the same condition written in Python, and a bad filter
is one error with a caret and exit 2, as for export."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kanalyze.cli import build_parser, main
from kanalyze.commands import metadata
from kanalyze.commands.common import engine_options
from kanalyze.session import Session

ROOT = Path(__file__).resolve().parents[2]
CAPS = ROOT / "captures"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    if argv[0] == "records":
        return [json.loads(line) for line in out.splitlines()]
    return json.loads(out)


@pytest.mark.parametrize("name", ["kp_legacy", "lib_group_rebalance", "lib_legacy"])
def test_stats_errors_and_latency_by_api(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(CAPS / f"{name}.pcap")
    whole = run_json(capsys, "stats", "--json", "-z", "errors", "-z", "latency", cap)["tables"]
    api = whole["errors"][0]["api"]  # every one of these captures has an error
    part = run_json(
        capsys, "stats", "--json", "-z", "errors", "-z", "latency", "-Y", f'api == "{api}"', cap
    )["tables"]
    for table in ("errors", "latency"):
        want = [r for r in whole[table] if r["api"] == api]
        assert part[table] == want
        assert want
    assert len(part["latency"]) < len(whole["latency"])


@pytest.mark.parametrize("name", ["lib_group_rebalance", "lib_transactions"])
def test_stats_clients_and_conv_selected(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(CAPS / f"{name}.pcap")
    whole = run_json(capsys, "stats", "--json", "-z", "clients", "-z", "conv", cap)["tables"]
    client = whole["clients"][0]["client_id"]
    part = run_json(
        capsys, "stats", "--json", "-z", "clients", "-Y", f'client_id == "{client}"', cap
    )["tables"]
    assert part["clients"] == [r for r in whole["clients"] if r["client_id"] == client]
    assert len(whole["clients"]) > 1
    # conv: only the conversations of the selected connections (whole connections: equal rows)
    conn = next(r["connection"] for r in whole["conv"] if r["connection"] is not None)
    part = run_json(capsys, "stats", "--json", "-z", "conv", "--conn", str(conn), cap)["tables"]
    assert part["conv"] == [r for r in whole["conv"] if r["connection"] == conn]
    assert len(part["conv"]) == 1 < len(whole["conv"])


class _Restricted:
    """The unfiltered session with its exchanges restricted by a Python predicate."""

    def __init__(self, session: Session, keep: Callable[[object], bool]) -> None:
        self.base = session
        self.keep = keep
        self.paths = session.paths

    def exchanges(self) -> Iterator:
        return (ex for ex in self.base.exchanges() if self.keep(ex))


@pytest.mark.parametrize(
    ("name", "client"), [("admin", "lib-admin"), ("lib_group_rebalance", "lib-member-b")]
)
def test_metadata_selected(name: str, client: str, capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(CAPS / f"{name}.pcap")
    args = build_parser("metadata").parse_args(["metadata", cap])
    want = metadata.build(
        _Restricted(Session([cap], engine_options(args)), lambda ex: ex.client_id == client)
    )
    got = run_json(capsys, "metadata", "--json", "-Y", f'client_id == "{client}"', cap)
    assert got == want
    none = run_json(capsys, "metadata", "--json", "-Y", 'client_id == "nobody"', cap)
    whole = run_json(capsys, "metadata", "--json", cap)
    assert whole != none  # the selection did take Metadata responses away
    assert not none["brokers"]


@pytest.mark.parametrize(
    ("name", "client"),
    [("lib_transactions", "lib-txn-consumer"), ("lib_group_rebalance", "lib-member-b")],
)
def test_records_selected(name: str, client: str, capsys: pytest.CaptureFixture[str]) -> None:
    cap = str(CAPS / f"{name}.pcap")
    whole = run_json(capsys, "records", "--json", "--all", cap)
    part = run_json(capsys, "records", "--json", "--all", "-Y", f'client_id == "{client}"', cap)
    want = [r for r in whole if r["client_id"] == client]
    assert part == want
    assert want and len(want) < len(whole)


def test_records_topic_is_the_shared_option(capsys: pytest.CaptureFixture[str]) -> None:
    """One --topic: it selects the exchanges touching the topic and keeps their records of it."""
    cap = str(CAPS / "lib_transactions.pcap")
    whole = run_json(capsys, "records", "--json", "--all", cap)
    topic = whole[0]["topic"]
    part = run_json(capsys, "records", "--json", "--all", "--topic", topic, cap)
    assert part == [r for r in whole if r["topic"] == topic]
    assert part


@pytest.mark.parametrize("command", ["stats", "metadata", "records"])
def test_bad_filter_is_one_line_exit_2(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "-Y", "api ==", str(CAPS / "admin.pcap")])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("kanalyze: error: bad filter:")
    assert lines[-1].strip() == "^"
    assert sum(line.startswith("kanalyze:") for line in lines) == 1


def _first_per_offset(records: list[dict]) -> list[dict]:
    seen: set[tuple] = set()
    out = []
    for r in records:
        k = (r["topic"], r["partition"], r["offset"])
        if r["offset"] < 0 or k not in seen:
            seen.add(k)
            out.append(r)
    return out


def test_records_deduplicate_within_the_selection(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/stats.md: the once-per-offset rule applies to the selected exchanges' records, so a
    Fetch-only selection prints the fetched copies the whole run suppresses as repeats of the
    produce: the filtered output is not a subset of the unfiltered one."""
    cap = str(CAPS / "lib_codecs.pcap")
    whole = run_json(capsys, "records", "--json", cap)
    every = run_json(capsys, "records", "--json", "--all", cap)
    fetched = run_json(capsys, "records", "--json", "-Y", 'api == "Fetch"', cap)
    assert {r["direction"] for r in whole} == {"produce"}  # each fetch repeated a produce
    assert fetched and {r["direction"] for r in fetched} == {"fetch"}
    key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
    assert sorted(map(key, fetched)) == sorted(map(key, whole))  # the same records, once each
    # = the rule run over the --all output restricted to the selection
    assert fetched == _first_per_offset([r for r in every if r["direction"] == "fetch"])
