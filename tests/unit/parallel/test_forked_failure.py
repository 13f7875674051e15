"""A `--jobs` run whose own range fails while a forked worker still sends its result must end
with the error, not wait for that worker forever (it did: the worker's result was larger
than the pipe holds, and the worker kept a copy of the reading end, so it never saw the
parent go; found when a compiled range engine raised in the first range)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from types import SimpleNamespace
    from kanalyze.parallel.range_export import start_tasks

    def big(task):
        return b"x" * (8 << 20)  # far more than a pipe's buffer

    def boom(task):
        time.sleep(0.5)  # the worker is sending by now
        raise RuntimeError("range 0 failed")

    tasks = [SimpleNamespace(rng=SimpleNamespace(index=i)) for i in range(2)]
    try:
        start_tasks(tasks, 1, fn=big, first=boom)
    except RuntimeError as e:
        print("raised:", e)
        sys.exit(0)
    sys.exit(1)
    """
)


def test_a_failing_range_does_not_wait_for_a_worker_still_sending() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised: range 0 failed" in done.stdout
