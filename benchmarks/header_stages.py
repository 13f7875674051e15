#!/usr/bin/env python3
"""Where `export --header-only` spends its CPU: each stage added to the previous ones.

    python benchmarks/header_stages.py --pcap CAPTURE [--port P] [--rounds 3]

In process, after the imports, the least CPU time of `--rounds` runs of each: the packets
read; `decode_segment` on each; the engine with the correlator's `request` and `response`
stubbed (reassembly and framing only: pure Python, `KANALYZE_PURE=1`, as a compiled class
cannot be patched; skipped otherwise); the whole engine (correlation, the orderer, held
frames, `Session`); the NDJSON lines. The difference between two rows is a stage's cost.
A script, not a test: docs/performance.md ("Where the time goes") quotes it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dissectors import DecodeContext  # noqa: E402
from kanalyze import correlation  # noqa: E402
from kanalyze.capture import CaptureStats, read_captures  # noqa: E402
from kanalyze.engine import EngineOptions  # noqa: E402
from kanalyze.export import ExchangeEncoder  # noqa: E402
from kanalyze.flows import FlowStats, decode_segment  # noqa: E402
from kanalyze.gcyoung import young_only  # noqa: E402
from kanalyze.session import Session  # noqa: E402


def cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def stages(path: str, ports: frozenset[int]) -> list[tuple[str, Callable[[], None]]]:
    def session() -> Session:
        s = Session([path], EngineOptions(ports=ports) if ports else EngineOptions())
        s.frames_wanted = False  # as `export --header-only` runs it
        return s

    def read() -> None:
        for _ in read_captures([path], CaptureStats(), views=True):
            pass

    def decode() -> None:
        fs = FlowStats()
        for p in read_captures([path], CaptureStats(), views=True):
            decode_segment(p.linktype, p.data, fs)

    def engine() -> None:
        for _ in young_only(session().exchanges()):
            pass

    def framing() -> None:
        cls = correlation.Correlator
        request, response = cls.request, cls.response
        cls.request = lambda self, pdu: True  # type: ignore[method-assign]
        cls.response = lambda self, pdu: None  # type: ignore[method-assign]
        try:
            engine()
        finally:
            cls.request, cls.response = request, response  # type: ignore[method-assign]

    def lines() -> None:
        line = ExchangeEncoder(DecodeContext(), decode=False).line_bytes
        for ex in young_only(session().exchanges()):
            line(ex)

    out = [("read", read), ("+ decode_segment", decode)]
    if os.environ.get("KANALYZE_PURE"):
        out.append(("+ reassembly, framing", framing))
    return [*out, ("+ correlation, orderer, Session", engine), ("+ NDJSON lines", lines)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pcap", required=True)
    ap.add_argument("--port", type=int, action="append", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    todo = stages(args.pcap, frozenset(args.port))
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, run in todo:
            start = cpu()
            run()
            best[name] = min(best.get(name, float("inf")), cpu() - start)
    for name, _run in todo:
        print(f"{name:34s} {best[name]:.3f} s")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
