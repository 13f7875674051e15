"""Run the atheris harnesses for a bounded time; exit non-zero on any finding.

    python fuzz/run.py --seconds 30                  # every harness, 30 s each (CI)
    python fuzz/run.py --seconds 600 --harness schema --workdir /tmp/kfuzz

Each harness runs in its own process with libFuzzer flags:
-max_total_time (the budget), -seed (with --seed), -timeout=5 (one input taking longer than 5 s is
a hang), -rss_limit_mb (memory blow-up), -max_len. The committed seeds in
fuzz/corpus/<name>/ are read only; new inputs go to <workdir>/<name>/ (a fresh
temporary directory unless --workdir is given), crashes/hangs to
<workdir>/artifacts/. A summary line per harness gives executions, libFuzzer's
`cov:`/`ft:` numbers, exec/s and wall time.

Exit status: 0 when every harness ran its budget without a finding; 1 when any
harness reported a crash, hang, memory blow-up or failed to start.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FINDINGS = HERE / "findings"  # artifacts are copied here (git-ignored) before the workdir goes
HARNESSES = ("capture", "stream", "schema", "records", "consumer", "sasl")
MAX_LEN = {
    "capture": 8192,
    "stream": 8192,
    "schema": 4096,
    "records": 8192,
    "consumer": 2048,
    "sasl": 1024,
}
STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+).*?exec/s: (\d+)")
UNITS = re.compile(r"stat::number_of_executed_units:\s*(\d+)")


@dataclass
class Result:
    name: str
    rc: int
    execs: int
    cov: int
    ft: int
    exec_s: int
    seconds: float
    artifacts: list[str]
    log: str

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.artifacts

    def line(self) -> str:
        verdict = "ok" if self.ok else f"FINDING (rc={self.rc})"
        return (
            f"{self.name:9s} {verdict:16s} execs={self.execs:<9d} cov={self.cov:<6d} "
            f"ft={self.ft:<7d} exec/s={self.exec_s:<6d} time={self.seconds:.0f}s"
        )


def run_one(
    name: str,
    seconds: int,
    workdir: Path,
    runs: int | None,
    rss_mb: int,
    timeout: int,
    seed: int | None = None,
) -> Result:
    work = workdir / name
    work.mkdir(parents=True, exist_ok=True)
    arts = workdir / "artifacts" / name
    arts.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    cmd = [
        sys.executable,
        str(HERE / f"fuzz_{name}.py"),
        f"-max_total_time={seconds}",
        f"-timeout={timeout}",
        f"-rss_limit_mb={rss_mb}",
        f"-max_len={MAX_LEN[name]}",
        f"-artifact_prefix={arts}/{name}-",
        "-print_final_stats=1",
        "-print_pcs=0",
        str(work),
        str(HERE / "corpus" / name),
    ]
    if runs:
        cmd.insert(2, f"-runs={runs}")
    env = None
    if seed is not None:  # the same inputs in the same order (a slower machine runs fewer)
        cmd.insert(2, f"-seed={seed}")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
    before = set(arts.iterdir())
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            # the outer guard only matters if libFuzzer itself wedges
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, timeout=seconds + 300, env=env
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -9
    took = time.monotonic() - t0
    text = log.read_text(errors="replace")
    execs = cov = ft = exec_s = 0
    for m in STATUS.finditer(text):
        execs, cov, ft, exec_s = (int(x) for x in m.groups())
    units = UNITS.findall(text)
    if units:
        execs = int(units[-1])
    new = sorted(str(p) for p in set(arts.iterdir()) - before)
    return Result(name, rc, execs, cov, ft, exec_s, took, new, str(log))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, required=True, help="time budget per harness")
    ap.add_argument(
        "--harness", action="append", choices=HARNESSES, help="run only this harness (repeatable)"
    )
    ap.add_argument("--workdir", type=Path, help="keep the grown corpora, logs and artifacts here")
    ap.add_argument("--runs", type=int, help="stop a harness after this many executions")
    ap.add_argument("--jobs", type=int, default=1, help="harnesses run at the same time")
    ap.add_argument("--rss-limit-mb", type=int, default=2048)
    ap.add_argument(
        "--mask-known",
        action="store_true",
        help="work around the known, reported bugs (fuzz/targets.py KNOWN_BUGS) "
        "to look for new ones",
    )
    ap.add_argument("--timeout", type=int, default=5, help="seconds one input may take (a hang)")
    ap.add_argument(
        "--seed",
        type=int,
        help="libFuzzer's random seed (and a fixed hash seed): a run that can be replayed",
    )
    args = ap.parse_args(argv)
    names = args.harness or list(HARNESSES)
    if args.mask_known:
        os.environ["KANALYZE_FUZZ_MASK"] = "1"
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kanalyze-fuzz-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [
                pool.submit(
                    run_one,
                    n,
                    args.seconds,
                    workdir,
                    args.runs,
                    args.rss_limit_mb,
                    args.timeout,
                    args.seed,
                )
                for n in names
            ]
            results = [f.result() for f in futures]
        failed = False
        for r in results:
            print(r.line(), flush=True)  # noqa: T201
            if not r.ok:
                failed = True
                FINDINGS.mkdir(exist_ok=True)
                for a in r.artifacts:
                    kept = FINDINGS / Path(a).name
                    shutil.copyfile(a, kept)
                    replay = HERE / f"fuzz_{r.name}.py"
                    print(f"    artifact: {kept} (replay: python {replay} {kept})")  # noqa: T201
                tail = Path(r.log).read_text(errors="replace").splitlines()[-40:]
                print("    " + "\n    ".join(tail))  # noqa: T201
        return 1 if failed else 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
