"""Helpers for the TUI tests: generous waits (a loaded 2-core machine is slow, never flaky)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("textual")

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "captures"
WAIT_S = 60.0


def aio(fn):
    """Run an async test with asyncio (no async pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def wait_for(
    pilot, cond: Callable[[], object], timeout: float = WAIT_S, what: str = ""
) -> None:
    """Let the app run until `cond()` holds (checked every 20 ms); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await pilot.pause(0.02)


async def wait_indexed(pilot) -> None:
    """Indexing finished and the exchanges screen shows every row it will show."""
    from kanalyze.tui.screens.exchanges import ExchangesScreen

    app = pilot.app

    def ready() -> bool:
        screen = app.screen
        store = app.store
        return (
            store.done
            and isinstance(screen, ExchangesScreen)
            and not screen.filtering
            and screen.applied_upto == len(store)
            and store.summarized == len(store)
        )

    await wait_for(pilot, ready, what="indexing")
    await pilot.pause(0.3)  # one more tick of the screen: status and connection counts settle


async def wait_report(pilot) -> None:
    app = pilot.app
    await wait_for(
        pilot, lambda: app.report is not None and not app.analysis_running, what="analysis"
    )
    await pilot.pause(0.3)  # the screen polls the report every 0.25 s
    await wait_for(
        pilot, lambda: getattr(app.screen, "_shown_report", None) is app.report, what="report shown"
    )
    # the tables just filled lay out and paint on later refreshes: let them settle (a loaded
    # machine once caught the semantics snapshot before they had)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.2)
