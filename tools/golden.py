"""Render every capture under every output mode into a directory, or compare two such directories.

Why: refactors must keep outputs byte-identical; this is the before/after check
(`render` on the old tree, `render` on the new one, `compare`). The small committed
golden set in `tests/golden/` is a separate, test-enforced subset.

    python tools/golden.py render OUT_DIR [--captures DIR ...] [--jobs N]
    python tools/golden.py compare OLD_DIR NEW_DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = ("captures", "captures/crafted", "captures/replication")
SUFFIXES = (".pcap", ".pcapng", ".gz")

# (name, argv after the file): every mode whose output must stay identical
MODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("export", ("export",)),
    ("export-header-only", ("export", "--header-only")),
    ("export-no-records", ("export", "--no-records")),
    ("export-show-secrets", ("export", "--show-secrets")),
    ("export-mvb16", ("export", "--max-value-bytes", "16")),
    ("summary", ("summary",)),
    ("summary-json", ("summary", "--json")),
    ("report", ("report",)),
    ("report-json", ("report", "--json")),
)


def captures(dirs: list[str]) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        p = ROOT / d
        out.extend(sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SUFFIXES)))
    return out


def render_one(cap: Path, mode: str, argv: tuple[str, ...], out: Path) -> str:
    # relative paths: renders from different checkouts compare equal
    cmd = [sys.executable, "-m", "kanalyze.cli", argv[0], str(cap.relative_to(ROOT)), *argv[1:]]
    r = subprocess.run(cmd, capture_output=True, cwd=ROOT, check=False)
    name = f"{cap.parent.name}__{cap.name}__{mode}"
    (out / f"{name}.out").write_bytes(r.stdout)
    (out / f"{name}.err").write_bytes(r.stderr + f"\nexit={r.returncode}\n".encode())
    return name


def render(out: Path, dirs: list[str], jobs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = [(c, m, a) for c in captures(dirs) for m, a in MODES]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(lambda w: render_one(w[0], w[1], w[2], out), work):
            pass
    print(f"rendered {len(work)} outputs into {out}")


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    bad = [n for n in names if not (old / n).exists() or not (new / n).exists()
           or not filecmp.cmp(old / n, new / n, shallow=False)]
    lines = sum(len((old / n).read_bytes().splitlines()) for n in names if (old / n).exists())
    for n in bad:
        print(f"DIFFERS: {n}")
    print(f"{len(names)} files ({lines} lines) compared, {len(bad)} differ")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("out", type=Path)
    r.add_argument("--captures", action="append", default=None)
    r.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    a = ap.parse_args()
    if a.cmd == "render":
        render(a.out, a.captures or list(DEFAULT_DIRS), a.jobs)
        return 0
    return compare(a.old, a.new)


if __name__ == "__main__":
    sys.exit(main())
