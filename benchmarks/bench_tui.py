"""How the TUI copes with a large capture: time to first rows, indexing time, how long the UI
stalls while the worker indexes, scrolling and filtering latency, and memory.

    python benchmarks/bench_tui.py                         # the bench capture if built, \
plus a synthetic one
    python benchmarks/bench_tui.py --pcap big.pcap         # any capture
    python benchmarks/bench_tui.py --synthetic 1000000     # N tiny exchanges (built once, cached)
    python benchmarks/bench_tui.py --synthetic 0           # the bench capture only

Run one capture a process when peaks matter (VmHWM is the process's). Memory: `rss_*` from /proc;
`rss_growth_b_per_row` is (RSS after - RSS before the app) / rows, fixed costs included;
`columns_b_per_row` is the store's column arrays, summary index and the table's row array;
`spill_mb` the frames written to the temporary file (disk, not memory).

The app runs headless (Textual's test driver, 160x45) in this process, exactly as on a terminal
except for the output. A script, not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "benchmarks" / ".data"


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB from /proc."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cur, peak


def build_synthetic(n: int, path: Path, conns: int = 64) -> None:
    """n ApiVersions exchanges over `conns` connections, raw-IP pcap, written in a stream."""
    from tests.support import packets as P
    from tests.support.engine import apiv_request, apiv_response

    tmp = path.with_suffix(".tmp")
    convs = [P.Conversation(cport=30000 + i) for i in range(conns)]
    ts = 1_700_000_000.0
    with open(tmp, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 101))

        def put(data: bytes) -> None:
            nonlocal ts
            ts += 0.00001
            sec = int(ts)
            f.write(struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(data), len(data)))
            f.write(data)

        for c in convs:
            for p in c.handshake():
                put(p)
        for i in range(n):
            c = convs[i % conns]
            corr = i // conns
            put(c.send(True, apiv_request(corr, f"client-{i % conns}")))
            put(c.send(False, apiv_response(corr)))
    tmp.rename(path)


async def measure(paths: list[str], label: str) -> dict:
    from textual import events

    from kanalyze.tui.app import KanalyzeApp
    from kanalyze.tui.widgets.exchange_table import ExchangeTable

    rss_before, _ = rss_mb()
    size_mb = sum(os.path.getsize(p) for p in paths) / 2**20
    app = KanalyzeApp(paths)
    t0 = time.perf_counter()
    lags: list[float] = []
    out: dict = {"capture": label, "size_mb": round(size_mb, 1)}
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        table = screen.query_one(ExchangeTable)
        while not table.rows:
            await asyncio.sleep(0.002)
        out["first_rows_s"] = round(time.perf_counter() - t0, 3)
        out["first_rows_from_index_start_s"] = round(app.first_rows_s or 0, 3)
        # the event loop's lateness while the worker indexes: how long the UI could not react
        while not app.store.done:
            s = time.perf_counter()
            await asyncio.sleep(0.02)
            lags.append(time.perf_counter() - s - 0.02)
        while screen.applied_upto < len(app.store) or screen.filtering:
            await asyncio.sleep(0.01)
        out["indexed_s"] = round(time.perf_counter() - t0, 3)
        out["exchanges"] = len(app.store)
        lags.sort()
        if lags:
            out["ui_lag_ms_p50"] = round(lags[len(lags) // 2] * 1000, 1)
            out["ui_lag_ms_p99"] = round(lags[int(len(lags) * 0.99)] * 1000, 1)
            out["ui_lag_ms_max"] = round(lags[-1] * 1000, 1)
        # keyboard scrolling over the whole table: from the key event to the cursor having moved
        # and the next frame drawn (Pilot.press would also wait for the process to go idle)
        timings = []
        table.focus()
        await pilot.pause(0.1)
        for key in ["end"] + ["pageup"] * 10 + ["home"] + ["pagedown"] * 10:
            before = table.cursor
            s = time.perf_counter()
            app.post_message(events.Key(key, None))
            deadline = s + 2.0  # a small capture: the cursor may already be at the top
            while table.cursor == before and time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
            await asyncio.sleep(0)
            if table.cursor != before:
                timings.append(time.perf_counter() - s)
        if timings:
            out["key_to_cursor_ms_max"] = round(max(timings) * 1000, 1)
            out["key_to_cursor_ms_median"] = round(sorted(timings)[len(timings) // 2] * 1000, 1)
        # sort every row by latency (worker), then back to capture order
        for name, key in (("sort_latency_s", "latency"), ("sort_time_s", "time")):
            s = time.perf_counter()
            table.sort_key = key
            screen.refilter()
            while screen.filtering:
                await asyncio.sleep(0.01)
            out[name] = round(time.perf_counter() - s, 3)
        # a header-only filter over every row (worker), then one that decodes bodies
        for name, text in (("filter_api_s", "api:fetch"), ("filter_topic_s", "topic:x")):
            s = time.perf_counter()
            screen.apply_filter(text)
            while screen.filtering:
                await asyncio.sleep(0.01)
            out[name] = round(time.perf_counter() - s, 3)
        out["rows_after_filter"] = len(table.rows)
        cur, peak = rss_mb()
        out["rss_mb_before"] = round(rss_before, 1)
        out["rss_mb_after"] = round(cur, 1)
        out["rss_mb_peak"] = round(peak, 1)
        store = app.store
        n = max(1, len(store))
        out["rss_growth_b_per_row"] = round((cur - rss_before) * 2**20 / n)
        # the columnar data: header fields, the summary index, the table's row list
        out["columns_b_per_row"] = round(
            (store.rows.nbytes() + len(store._summary) * 4 + len(table.rows) * 8) / n
        )
        out["distinct_summaries"] = len(store._summary_values)
        out["spill_mb"] = round(store.spill.size / 2**20, 1)  # frames on disk, not in memory
        await pilot.press("q")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pcap", action="append", default=[], help="capture(s) to open (repeatable)")
    ap.add_argument(
        "--synthetic",
        type=int,
        default=1_000_000,
        metavar="N",
        help="also a synthetic capture of N exchanges (0: none; default 1000000)",
    )
    args = ap.parse_args()
    runs: list[tuple[list[str], str]] = []
    if args.pcap:
        runs.append((args.pcap, ", ".join(os.path.basename(p) for p in args.pcap)))
    else:
        bench = DATA / "bench-250mb-plain.pcap"
        if bench.exists():
            runs.append(([str(bench)], bench.name))
    if args.synthetic:
        DATA.mkdir(parents=True, exist_ok=True)
        syn = DATA / f"tui-synthetic-{args.synthetic}.pcap"
        if not syn.exists():
            s = time.perf_counter()
            build_synthetic(args.synthetic, syn)
            sys.stderr.write(f"built {syn} in {time.perf_counter() - s:.1f}s\n")
        runs.append(([str(syn)], syn.name))
    for paths, label in runs:
        print(json.dumps(asyncio.run(measure(paths, label))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
