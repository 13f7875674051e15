#!/usr/bin/env python3
"""Whole-program mutation campaign (issue 20): damaged real-client captures through the CLI.

Each case takes one capture of captures/ (the real-client recordings, plus one built here that
carries known credentials in SASL PLAIN / SCRAM / OAUTHBEARER and delegation-token frames),
applies 1-3 mutations at the packet level -- bit flips, byte changes, truncation of a packet or
of the file, dropped, duplicated and reordered packets, a Kafka length prefix or a TCP sequence
number changed -- and runs `export`, `report --json` and `summary --json` on it. Checked per case:

* no traceback (no exception escapes `kanalyze.cli.main`); exit status 0, or 2/3 (not a
  capture / nothing analyzed) with a few clear `kanalyze: ...` lines;
* no hang: each case within `--timeout` seconds (SIGALRM in the worker);
* memory: the worker runs under an address-space limit (`--rss-mb`); a MemoryError or a killed
  worker is a finding;
* every NDJSON line validates against docs/exchange.schema.json and the report against
  docs/report.schema.json (jsonschema); the summary's byte accounting holds per direction
  (stream = decoded + skipped + gaps);
* no secret: the known credentials (raw, hex, base64 at each alignment) appear in no output.

Cases run in worker processes (one per job, `nice`d by the caller), many cases per worker, so
Python start-up is paid once; a worker that dies is restarted after the case it died on.

    python fuzz/mutate.py --cases 10000 --jobs 2 --seed 1      # the campaign (fuzz/README.md)
    python fuzz/mutate.py --cases 100 --jobs 2                 # CI slice (.ci/run)
    python fuzz/mutate.py --replay 1:4711                      # one case again (seed:case)

Exit status 1 when any case fails; failing cases are listed with their seed:case id and the
mutated capture is kept under --keep (default /tmp/kanalyze-mutate).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MUTATIONS = (
    "bitflip",
    "byteset",
    "truncate_packet",
    "truncate_file",
    "drop",
    "duplicate",
    "reorder",
    "length_field",
    "tcp_seq",
)
CHECKS = ("traceback", "exit_status", "hang", "memory", "schema", "accounting", "secret")


# ------------------------------------------------------------------ inputs
def read_pcap(data: bytes) -> tuple[bytes, list[list]]:
    """(global header, [[record header, packet bytes], ...]) of a little-endian classic pcap."""
    head, pos, out = data[:24], 24, []
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        out.append([bytearray(data[pos : pos + 16]), bytearray(data[pos + 16 : pos + 16 + incl])])
        pos += 16 + incl
    return head, out


def write_pcap(head: bytes, pkts: list[list]) -> bytes:
    parts = [head]
    for rec, data in pkts:
        struct.pack_into("<II", rec, 8, len(data), len(data))
        parts += [bytes(rec), bytes(data)]
    return b"".join(parts)


def secret_capture() -> tuple[bytes, list[bytes]]:
    """A capture of credential-carrying frames, and the secrets in it."""
    from tests.fuzz.test_secret_leaks import SCENARIOS
    from tests.support import adversarial as A

    frames, secrets = [], set()
    for name in sorted(SCENARIOS):
        if name.startswith("raw_"):
            continue  # raw tokens need their own connection after a v0 handshake
        f, s = SCENARIOS[name]
        frames += f
        secrets.add(s)
    # one conversation; correlation ids repeat across scenarios, which the engine handles
    return A.capture(frames), sorted(secrets)


def inputs() -> dict[str, bytes]:
    caps = {p.name: p.read_bytes() for p in sorted((ROOT / "captures").glob("*.pcap"))}
    caps["sasl_secrets.pcap"] = secret_capture()[0]
    return caps


def leak_forms(secret: bytes) -> list[str]:
    forms = [secret.decode("latin-1"), secret.hex(), secret.hex().upper()]
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + secret).decode()
        forms.append(enc[-(-8 * k // 6) : (8 * (k + len(secret))) // 6])
    return forms


# ------------------------------------------------------------------ mutations
def _payload_at(data: bytearray) -> int:
    """Where the TCP payload starts in an Ethernet/IPv4/TCP packet (else 0)."""
    if len(data) < 54 or data[12:14] != b"\x08\x00":
        return 0
    ihl = (data[14] & 0x0F) * 4
    tcp = 14 + ihl
    return tcp + (data[tcp + 12] >> 4) * 4 if len(data) > tcp + 12 else 0


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    head, pkts = read_pcap(data)
    done: list[str] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(MUTATIONS)
        if not pkts:
            break
        i = rng.randrange(len(pkts))
        rec, p = pkts[i]
        pay = _payload_at(p)
        if kind == "bitflip" and p:
            for _ in range(rng.randint(1, 8)):
                j = (
                    rng.randrange(pay, len(p))
                    if pay < len(p) and rng.random() < 0.8
                    else rng.randrange(len(p))
                )
                p[j] ^= 1 << rng.randrange(8)
        elif kind == "byteset" and p:
            j = rng.randrange(len(p))
            p[j] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif kind == "truncate_packet" and p:
            del p[rng.randrange(len(p)) :]
        elif kind == "truncate_file":
            blob = write_pcap(head, pkts)
            return blob[: rng.randrange(24, len(blob) + 1)], [*done, kind]
        elif kind == "drop":
            del pkts[i : i + rng.choice((1, 1, 1, 2, 5))]
        elif kind == "duplicate":
            pkts.insert(rng.randrange(len(pkts) + 1), [bytearray(rec), bytearray(p)])
        elif kind == "reorder" and len(pkts) > 1:
            j = rng.randrange(len(pkts))
            pkts[i], pkts[j] = pkts[j], pkts[i]
        elif kind == "length_field" and pay and len(p) >= pay + 4:
            n = struct.unpack_from(">i", p, pay)[0]
            new = rng.choice(
                (0, -1, 1, 3, 4, 7, 2**31 - 1, 2**28, n + rng.randint(-8, 8), n * 2, n // 2)
            )
            struct.pack_into(">i", p, pay, max(-(2**31), min(new, 2**31 - 1)))
        elif kind == "tcp_seq" and pay:
            tcp = 14 + (p[14] & 0x0F) * 4
            seq = struct.unpack_from(">I", p, tcp + 4)[0]
            delta = rng.choice((1, -1, 1000, -1000, 2**31, rng.randrange(2**32)))
            struct.pack_into(">I", p, tcp + 4, (seq + delta) & 0xFFFFFFFF)
        else:
            continue
        done.append(kind)
    return write_pcap(head, pkts), done


# ------------------------------------------------------------------ one case, in a worker
def _validators():
    import jsonschema

    load = lambda name: json.loads((ROOT / "docs" / name).read_text())  # noqa: E731
    return (
        jsonschema.Draft202012Validator(load("exchange.schema.json")),
        jsonschema.Draft202012Validator(load("report.schema.json")),
    )


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from kanalyze.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


class Hang(BaseException):
    pass


def run_case(path: str, secrets: list[str], validators, timeout: float) -> list[tuple[str, str]]:
    """The findings of one mutated capture: [(check, detail)]."""
    import traceback

    ex_v, rep_v = validators
    found: list[tuple[str, str]] = []

    def alarm(_sig, _frame):
        raise Hang()

    signal.signal(signal.SIGALRM, alarm)
    for argv in (["export", path], ["report", "--json", path], ["summary", "--json", path]):
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            rc, out, err = _cli(argv)
        except Hang:
            found.append(("hang", f"{argv[0]} over {timeout} s"))
            continue
        except MemoryError:
            found.append(("memory", f"{argv[0]}: MemoryError"))
            continue
        except Exception:  # noqa: BLE001 -- a finding, not the campaign's end
            found.append(("traceback", f"{argv[0]}: " + traceback.format_exc()[-1500:]))
            continue
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        lines = err.splitlines()
        clear = lines and len(lines) <= 4 and all(ln.startswith("kanalyze: ") for ln in lines)
        if rc != 0 and not (rc in (2, 3) and clear):  # 2: not a capture, 3: nothing analyzed
            found.append(("exit_status", f"{argv[0]}: exit {rc}: {err[-500:]}"))
        if "Traceback" in err:
            found.append(("traceback", f"{argv[0]}: {err[-1500:]}"))
        if rc != 0:
            continue
        found.extend(
            ("secret", f"{argv[0]}: {form!r}") for form in secrets if form in out or form in err
        )
        try:
            if argv[0] == "export":
                for n, line in enumerate(out.splitlines(), 1):
                    errs = list(ex_v.iter_errors(json.loads(line)))
                    if errs:
                        e = errs[0]
                        found.append(
                            (
                                "schema",
                                f"export line {n}: {list(e.absolute_path)}: {e.message[:200]}",
                            )
                        )
                        break
            elif argv[0] == "report":
                errs = list(rep_v.iter_errors(json.loads(out)))
                if errs:
                    e = errs[0]
                    found.append(("schema", f"report: {list(e.absolute_path)}: {e.message[:200]}"))
            else:
                doc = json.loads(out)
                for side, t in doc["bytes"].items():
                    if (
                        isinstance(t, dict)
                        and t["stream"] != t["decoded"] + t["skipped"] + t["gaps"]
                    ):
                        found.append(("accounting", f"summary {side}: {t}"))
        except ValueError as e:
            found.append(("schema", f"{argv[0]}: not JSON: {e}"))
    return found


def worker(rss_mb: int, timeout: float) -> None:
    """Read case lines (json: id, path, secret flag) on stdin, write result lines on stdout."""
    limit = rss_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    validators = _validators()
    forms = [f for s in secret_capture()[1] for f in leak_forms(s)]
    for line in sys.stdin:
        case = json.loads(line)
        t0 = time.monotonic()
        found = run_case(case["path"], forms if case["secrets"] else [], validators, timeout)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        sys.stdout.write(
            json.dumps(
                {"id": case["id"], "found": found, "s": time.monotonic() - t0, "rss_mb": rss}
            )
            + "\n"
        )
        sys.stdout.flush()


# ------------------------------------------------------------------ the campaign
def build_case(caps: dict[str, bytes], seed: int, n: int) -> tuple[str, bytes, list[str]]:
    rng = random.Random(f"{seed}:{n}")
    name = rng.choice(sorted(caps))
    data, done = mutate(caps[name], rng)
    return name, data, done


def campaign(args: argparse.Namespace) -> int:
    caps = inputs()
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    tmp = Path(
        tempfile.mkdtemp(prefix="kmut-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    ids = (
        [int(args.replay.split(":")[1])]
        if args.replay
        else list(range(args.start, args.start + args.cases))
    )
    seed = int(args.replay.split(":")[0]) if args.replay else args.seed
    todo = list(ids)
    per_mut: Counter[str] = Counter()
    per_cap: Counter[str] = Counter()
    fails: Counter[str] = Counter()
    findings: list[tuple[str, str, list[str], list]] = []
    stats = {"cases": 0, "seconds": 0.0, "max_case_s": 0.0, "rss_mb": 0, "worker_deaths": 0}
    t_start = time.monotonic()
    # batches of cases, `jobs` workers at a time: a few MB of mutated captures on disk at once
    batches = [todo[i : i + 200] for i in range(0, len(todo), 200)]
    procs: list[tuple[subprocess.Popen, list[int], dict, Path]] = []
    serial = iter(range(1 << 30))

    def start(chunk: list[int]) -> None:
        """A worker for `chunk`: cases in a file on its stdin, results to a file (no pipes to
        fill: the parent only polls)."""
        if not chunk:
            return
        meta: dict[int, tuple[str, str, list[str]]] = {}
        k = next(serial)
        cases, results = tmp / f"w{k}.in", tmp / f"w{k}.out"
        with cases.open("w") as f:
            for n in chunk:
                name, data, done = build_case(caps, seed, n)
                path = tmp / f"{n}.pcap"
                path.write_bytes(data)
                meta[n] = (name, str(path), done)
                f.write(
                    json.dumps({"id": n, "path": str(path), "secrets": name == "sasl_secrets.pcap"})
                    + "\n"
                )
        with cases.open() as fin, results.open("w") as fout:
            p = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--rss-mb",
                    str(args.rss_mb),
                    "--timeout",
                    str(args.timeout),
                ],
                stdin=fin,
                stdout=fout,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=ROOT,
            )
        cases.unlink()
        procs.append((p, chunk, meta, results))

    def collect(p: subprocess.Popen, chunk: list[int], meta: dict, results: Path) -> None:
        seen: set[int] = set()
        for line in results.read_text().splitlines():
            r = json.loads(line)
            n = r["id"]
            seen.add(n)
            name, path, done = meta[n]
            stats["cases"] += 1
            stats["seconds"] += r["s"]
            stats["max_case_s"] = max(stats["max_case_s"], r["s"])
            stats["rss_mb"] = max(stats["rss_mb"], r["rss_mb"])
            per_cap[name] += 1
            per_mut.update(done)
            for check, _detail in r["found"]:
                fails[check] += 1
            if r["found"]:
                findings.append((f"{seed}:{n}", name, done, r["found"]))
                shutil.move(path, keep / f"{seed}-{n}-{name}")
            else:
                Path(path).unlink(missing_ok=True)
        results.unlink()
        rest = [n for n in chunk if n not in seen]
        if rest:  # the worker died on rest[0] (killed: memory or a crash in C)
            stats["worker_deaths"] += 1
            n = rest[0]
            name, path, done = meta[n]
            stats["cases"] += 1
            per_cap[name] += 1
            per_mut.update(done)
            fails["memory"] += 1
            findings.append(
                (f"{seed}:{n}", name, done, [("memory", f"worker died: status {p.returncode}")])
            )
            with contextlib.suppress(OSError):
                shutil.move(path, keep / f"{seed}-{n}-{name}")
            for m in rest[1:]:
                with contextlib.suppress(OSError):
                    Path(meta[m][1]).unlink()
            start(rest[1:])

    while batches or procs:
        while batches and len(procs) < args.jobs:
            start(batches.pop(0))
        time.sleep(0.2)
        for entry in [e for e in procs if e[0].poll() is not None]:
            procs.remove(entry)
            collect(*entry)
            if args.progress:
                sys.stderr.write(
                    f"{stats['cases']} cases, {len(findings)} failing, "
                    f"{time.monotonic() - t_start:.0f} s\n"
                )
    with contextlib.suppress(OSError):
        tmp.rmdir()
    wall = time.monotonic() - t_start
    report = {
        "seed": seed,
        "cases": stats["cases"],
        "wall_s": round(wall, 1),
        "case_s_mean": round(stats["seconds"] / max(stats["cases"], 1), 3),
        "case_s_max": round(stats["max_case_s"], 2),
        "worker_rss_mb_max": stats["rss_mb"],
        "worker_deaths": stats["worker_deaths"],
        "failures": {c: fails.get(c, 0) for c in CHECKS},
        "per_capture": dict(sorted(per_cap.items())),
        "per_mutation": dict(sorted(per_mut.items())),
    }
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    for cid, name, done, found in findings[:50]:
        sys.stderr.write(f"FAIL {cid} {name} {done}: {found[0][0]}: {found[0][1][:300]}\n")
    return 1 if findings else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--start", type=int, default=0, help="first case number (to split a campaign)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per command before a hang")
    ap.add_argument("--rss-mb", type=int, default=2048, help="address-space limit per worker")
    ap.add_argument("--keep", default="/tmp/kanalyze-mutate", help="where failing inputs are kept")
    ap.add_argument("--replay", help="seed:case, run that one case")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.rss_mb, args.timeout)
        return 0
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
