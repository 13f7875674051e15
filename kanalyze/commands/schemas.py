"""`kanalyze schemas`: every API (and embedded structure) with the versions kanalyze decodes."""

from __future__ import annotations

import argparse
import json
import sys

from dissectors import apis, schemas
from dissectors.decoder import body_reader, message_reader, schema_module


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "schemas", help="list the APIs and versions kanalyze decodes", description=__doc__
    )
    p.epilog = "examples:\n  kanalyze schemas\n  kanalyze schemas --json > apis.json\n"
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    p.set_defaults(run=run)


def _decodable(api_key: int, versions: tuple[int, int], is_request: bool) -> list[int]:
    return [
        v
        for v in range(versions[0], versions[1] + 1)
        if body_reader(api_key, v, is_request) is not None
    ]


def _message_versions(name: str) -> list[int]:
    defs = schema_module(schemas.MESSAGE_MODULES[name]).MESSAGE
    lo, hi = defs[0]["valid"][0], defs[-1]["valid"][1]
    return [v for v in range(lo, hi + 1) if message_reader(name, v) is not None]


def build() -> dict[str, object]:
    """The document `--json` prints."""
    rows = []
    for key, name in sorted(apis.API_NAMES.items()):
        rows.append(
            {
                "api_key": key,
                "name": name,
                "request_versions": _decodable(key, apis.REQUEST_VERSIONS[key], True),
                "response_versions": _decodable(key, apis.RESPONSE_VERSIONS[key], False),
                "request_flexible_from": apis.REQUEST_FLEXIBLE_FROM[key],
                "response_flexible_from": apis.RESPONSE_FLEXIBLE_FROM[key],
            }
        )
    messages = [{"name": n, "versions": _message_versions(n)} for n in schemas.MESSAGE_MODULES]
    return {"apis": rows, "messages": messages}


def _span(versions: list[int]) -> str:
    if not versions:
        return "-"
    if versions == list(range(versions[0], versions[-1] + 1)):
        return f"{versions[0]}-{versions[-1]}" if len(versions) > 1 else str(versions[0])
    return ",".join(map(str, versions))


def _flex(first: object) -> str:
    return "-" if first is None else f"{first}+"


def run(args: argparse.Namespace) -> int:
    doc = build()
    out = sys.stdout
    if args.json:
        json.dump(doc, out, indent=1)
        out.write("\n")
        return 0
    out.write(f"{'key':>4}  {'api':<34} {'request':<9} {'response':<9} flexible\n")
    for row in doc["apis"]:  # type: ignore[union-attr]
        out.write(
            f"{row['api_key']:>4}  {row['name']:<34} {_span(row['request_versions']):<9} "
            f"{_span(row['response_versions']):<9} {_flex(row['request_flexible_from'])}\n"
        )
    out.write("\nembedded structures:\n")
    for m in doc["messages"]:  # type: ignore[union-attr]
        out.write(f"      {m['name']:<34} {_span(m['versions'])}\n")
    return 0
