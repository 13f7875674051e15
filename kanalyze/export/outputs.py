"""The export formats besides NDJSON: `-T fields -e ...` (TSV/CSV), `-T parquet -o FILE` (the
Spark `exchanges` table's columns, without Spark), `-w FILE` (a filtered pcap), and the
dashboard formats `-T events` and `-T openmetrics` (`kanalyze.export.formats`).

`add_output_arguments` adds the options; `run_output` runs one of these formats and returns
the exit status, or None when the command should write NDJSON as before.
"""

from __future__ import annotations

import argparse
import sys

from dissectors.context import DecodeContext

FORMATS = ("ndjson", "fields", "parquet", "events", "openmetrics")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output formats")
    g.add_argument(
        "-T",
        "--format",
        choices=FORMATS,
        default="ndjson",
        help="ndjson (default); fields: the -e fields, tab-separated; "
        "parquet: one typed row per exchange (needs -o FILE and pyarrow); "
        "events: flat index-ready documents; openmetrics: Prometheus series with capture "
        "timestamps, for a backfill (docs/dashboards.md)",
    )
    g.add_argument(
        "-e",
        dest="fields",
        action="append",
        default=[],
        metavar="FIELD",
        help="a field for -T fields (repeatable): any filter field or body path",
    )
    g.add_argument(
        "-E",
        dest="field_options",
        action="append",
        default=[],
        metavar="OPT=VALUE",
        help="-T fields options: header=y|n, separator=/t|/s|CHAR, aggregator=CHAR",
    )
    g.add_argument("--csv", action="store_true", help="-T fields as CSV (comma-separated, quoted)")
    g.add_argument(
        "-w",
        "--write-pcap",
        metavar="FILE",
        default=None,
        help="write the packets that carry the selected exchanges to a pcap FILE "
        "(instead of NDJSON)",
    )


def _fail(message: str) -> None:
    sys.stderr.write(f"kanalyze: error: {message}\n")
    raise SystemExit(2)


def _field_options(items: list[str]) -> dict[str, object]:
    opts: dict[str, object] = {"header": False, "separator": "\t", "aggregator": ","}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in ("header", "separator", "aggregator"):
            _fail(f"-E {item!r}: expected header=y|n, separator=/t|/s|CHAR or aggregator=CHAR")
        if key == "header":
            if value not in ("y", "n"):
                _fail(f"-E {item!r}: header is y or n")
            opts["header"] = value == "y"
        else:
            value = {"/t": "\t", "/s": " "}.get(value, value)
            if len(value) != 1:
                _fail(f"-E {item!r}: {key} is one character (or /t, /s)")
            opts[key] = value
    return opts


def check_output_arguments(args: argparse.Namespace) -> list | None:
    """Validate the format options before any input is read (exit 2); the -e field specs."""
    fmt = args.format
    from kanalyze.export.formats import check_format  # the dashboard formats' options

    problem = check_format(args)
    if problem is not None:
        _fail(problem)
    if args.write_pcap is not None and fmt != "ndjson":
        _fail("-w writes a pcap; it does not combine with -T")
    if args.fields and fmt != "fields":
        _fail("-e needs -T fields")
    if (args.field_options or args.csv) and fmt != "fields":
        _fail("-E and --csv need -T fields")
    if fmt == "fields":
        if not args.fields:
            _fail("-T fields needs at least one -e FIELD (e.g. -e api -e latency)")
        from kanalyze.export.fields import field_specs
        from kanalyze.query.parse import FilterError

        try:
            return field_specs(args.fields)
        except FilterError as e:
            _fail(e.message)
    if fmt == "parquet" and args.output == "-":
        _fail("-T parquet needs -o FILE")
    return None


def needs_learning(specs: list | None) -> bool:
    if not specs:
        return False  # NDJSON: nothing to import
    from kanalyze.query.fields import FACTS

    return bool(specs) and any(s.cost >= FACTS for s in specs)  # type: ignore[union-attr]


def run_output(
    args: argparse.Namespace,
    session,
    ctx: DecodeContext,
    specs: list | None,  # noqa: ANN001
    opts,
) -> int | None:  # noqa: ANN001 - EngineOptions
    """Write the chosen format; None when it is NDJSON (the caller's own path)."""
    if args.write_pcap is not None:
        return _pcap(args, session, opts)
    if args.format == "fields":
        return _fields(args, session, ctx, specs)
    if args.format == "parquet":
        return _parquet(args, session)
    if args.format in ("events", "openmetrics"):
        from kanalyze.export.formats import write_format

        write_format(args, session, ctx)
        return 0
    return None


def _fields(args: argparse.Namespace, session, ctx: DecodeContext, specs) -> int:  # noqa: ANN001
    from kanalyze.export.fields import FieldWriter
    from kanalyze.query.subject import Env

    o = _field_options(args.field_options)
    to_file = args.output != "-"
    out = open(args.output, "w", encoding="utf-8") if to_file else sys.stdout  # noqa: SIM115
    env = Env(ctx)
    learn = needs_learning(specs) and getattr(session, "selection", None) is None
    try:
        w = FieldWriter(
            out,
            specs,
            env,
            header=bool(o["header"]),
            separator=str(o["separator"]),
            aggregator=str(o["aggregator"]),
            as_csv=args.csv,
        )
        for ex in session.exchanges():
            if learn:
                env.decoder.learn(ex)
            w.write(ex)
    finally:
        if out is not sys.stdout:
            out.close()
        else:
            out.flush()
    return 0


def _parquet(args: argparse.Namespace, session) -> int:  # noqa: ANN001
    try:
        from kanalyze.export.parquet import write_parquet
    except ImportError as e:
        _fail(f"-T parquet needs pyarrow (pip install 'kanalyze[parquet]'): {e}")
    n = write_parquet(args.output, session)
    sys.stderr.write(f"kanalyze: {n} exchanges written to {args.output}\n")
    return 0


def _pcap(args: argparse.Namespace, session, opts) -> int:  # noqa: ANN001
    from kanalyze.export.pcap import PcapWriteError, export_pcap

    sel = getattr(session, "selection", None)
    keep = sel if sel is not None else (lambda _ex: True)
    try:
        selected, packets = export_pcap(
            args.write_pcap, list(session.paths), opts, keep, session.capture
        )
    except PcapWriteError as e:
        _fail(str(e))
    sys.stderr.write(
        f"kanalyze: {selected} exchanges, {packets} packets written to {args.write_pcap}\n"
    )
    return 0
