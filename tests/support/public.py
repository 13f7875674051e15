"""Where the third-party captures are: ``../shared/captures-public`` from the repo root.

A git worktree sits deeper than the main checkout, so the nearest ancestor holding
``shared/captures-public`` is used; the captures are read in place, never copied.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def public_captures_dir() -> Path:
    for base in ROOT.parents:
        cand = base / "shared" / "captures-public"
        if cand.is_dir():
            return cand
    return ROOT.parent / "shared" / "captures-public"


PUBLIC = public_captures_dir()
