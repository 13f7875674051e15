"""`kanalyze tui`: the Textual application.

Data flows one way: an exchange source (capture files through `Session`, or anything that calls
`add_exchanges` — a live capture) fills the `ExchangeStore` from a worker thread; screens poll
the store and draw only what is visible; bodies are decoded when a row is shown or selected.
The analysis views get the report document through `analysis_source` once asked for.
"""

from __future__ import annotations

import contextlib
import os
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import get_current_worker

from dissectors.context import DecodeContext
from kanalyze.capture import CaptureError
from kanalyze.commands.common import with_jobs
from kanalyze.correlation import Exchange
from kanalyze.engine import EngineOptions
from kanalyze.export.pcap import PcapWriteError
from kanalyze.session import Session
from kanalyze.tui.analysis_source import analyze_exchanges
from kanalyze.tui.locate import target_of
from kanalyze.tui.messages import AnalysisReady, IndexProgress
from kanalyze.tui.pcap_export import ExportCancelled, write_pcap
from kanalyze.tui.screens.exchanges import ExchangesScreen
from kanalyze.tui.screens.groups import GroupsScreen
from kanalyze.tui.screens.help import HelpScreen
from kanalyze.tui.screens.replication import ReplicationScreen
from kanalyze.tui.screens.semantics import SemanticsScreen
from kanalyze.tui.spill import SpillClosed, SpillWriteError
from kanalyze.tui.store import ExchangeStore
from kanalyze.views.progress import ReadMeter

ANALYSIS_MODES = ("replication", "semantics", "groups")
BATCH_EXCHANGES = 4096  # exchanges handed to the store at once while indexing a file...
BATCH_BYTES = 4 << 20  # ...or fewer, when their frames add up to this (big Fetch responses)


class KanalyzeApp(App):
    """Where exchanges come from, one of:

    * `paths`: capture files, indexed by `Session` in a worker thread;
    * `source`: a callable returning an iterable of exchanges, iterated in a worker thread;
    * `feed`: a callable run in a worker thread with the app as argument; it pushes with
      `app.add_exchanges(...)` (e.g. a `LiveSession` subscriber) and returns when done;
      `stop` is called when the app exits (e.g. `LiveSession.stop`);
    * nothing: call `add_exchanges` / `finish_indexing` from any thread yourself.
    """

    CSS_PATH = "kanalyze.tcss"
    TITLE = "kanalyze"
    ENABLE_COMMAND_PALETTE = True  # ctrl+p: every action of the app and the screen, by name
    MODES = {
        "exchanges": ExchangesScreen,
        "replication": ReplicationScreen,
        "semantics": SemanticsScreen,
        "groups": GroupsScreen,
    }
    DEFAULT_MODE = "exchanges"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("1", "mode('exchanges')", "Exchanges"),
        Binding("2", "mode('replication')", "Replication"),
        Binding("3", "mode('semantics')", "Semantics"),
        Binding("4", "mode('groups')", "Groups"),
        Binding("r", "analyze", "Analyze", show=False),
        Binding("t", "toggle_theme", "Theme"),
    ]

    def __init__(
        self,
        paths: Sequence[str] = (),
        opts: EngineOptions | None = None,
        ctx: DecodeContext | None = None,
        source: Callable[[], Iterable[Exchange]] | None = None,
        source_label: str | None = None,
        theme: str = "textual-dark",
        feed: Callable[[KanalyzeApp], None] | None = None,
        stop: Callable[[], None] | None = None,
        jobs: int | None = None,
    ) -> None:
        super().__init__()
        self.jobs = jobs  # --jobs: indexing over byte ranges in that many processes
        self.feed = feed
        self.stop_feed = stop
        self.paths = list(paths)
        self.opts = opts or EngineOptions()
        self.store = ExchangeStore(ctx)
        # the user's --topic-ids, for the analysis's own registry (the store's learns as it decodes)
        self.topic_ids = dict(ctx.topic_names) if ctx is not None else {}
        self.source = source
        self.source_label = source_label or (
            ", ".join(os.path.basename(p) for p in self.paths) or "live"
        )
        self._initial_theme = theme
        self.report: dict | None = None
        self.report_count = 0
        self.analysis_running = False
        self.analysis_progress = 0.0
        self.index_started: float | None = None
        self.first_rows_s: float | None = None  # time from start of indexing to the first exchange
        self.index_s: float | None = None
        self.last_export: tuple[str, int] | None = None

    def on_mount(self) -> None:
        self.theme = self._initial_theme
        if self.paths or self.source is not None:
            self.index_started = time.perf_counter()
            self._index()
        elif self.feed is not None:
            self.index_started = time.perf_counter()
            self._run_feed()

    def on_unmount(self) -> None:
        try:
            if self.stop_feed is not None:
                self.stop_feed()
        finally:
            self.store.close()  # the spill file goes now (and with the process in any case)

    @work(thread=True, exclusive=True, group="index")
    def _run_feed(self) -> None:
        assert self.feed is not None
        self.feed(self)
        self.finish_indexing()

    # -- feeding ----------------------------------------------------------------------------
    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        """Append exchanges; safe from any thread (a live capture's worker calls this)."""
        try:
            n = self.store.add(exchanges)
        except SpillClosed:  # the app is exiting: a late live exchange has nowhere to go
            return
        except OSError as e:  # the temporary file cannot grow (disk full): say so, stop indexing
            self.finish_indexing(f"error: cannot write the spill file: {e}")
            raise
        if n and self.first_rows_s is None and self.index_started is not None:
            self.first_rows_s = time.perf_counter() - self.index_started

    def finish_indexing(self, error: str | None = None) -> None:
        """No more exchanges will come (end of files); safe from any thread."""
        self.store.error = error
        self.store.done = True
        self.store.progress = 1.0 if error is None else self.store.progress
        if self.index_started is not None:
            self.index_s = time.perf_counter() - self.index_started
        self.post_message(IndexProgress(len(self.store), done=True))

    def _iter_source(self) -> tuple[Iterator[Exchange], Callable[[], float | None]]:
        if self.source is not None:
            return iter(self.source()), lambda: None
        # the share of the input read, counted from the packets (pcap, pcapng and .gz alike)
        meter = ReadMeter(self.paths)
        session = Session(self.paths, self.opts, on_packet=meter.packet, hold=self.store.hold)
        # --jobs N: the same exchanges from N processes (forked workers run the ranges' engines
        # only, then exit without touching the terminal)
        session = with_jobs(session, self.jobs)
        return session.exchanges(), meter.fraction

    @work(thread=True, exclusive=True, group="index")
    def _index(self) -> None:
        worker = get_current_worker()
        batch: list[Exchange] = []
        held = 0  # frame bytes in `batch`
        last = time.perf_counter()
        try:
            exchanges, progress = self._iter_source()
            for ex in exchanges:
                batch.append(ex)
                held += (ex.request.pdu.size if ex.request else 0) + (
                    ex.response.pdu.size if ex.response else 0
                )
                n = len(batch)
                if (
                    n >= BATCH_EXCHANGES
                    or held >= BATCH_BYTES
                    or not len(self.store)
                    or ((n & 0xFF) == 0 and time.perf_counter() - last > 0.1)
                ):
                    self.add_exchanges(batch)
                    batch = []
                    held = 0
                    last = time.perf_counter()
                    self.store.progress = progress()
                    if worker.is_cancelled:
                        return
                    time.sleep(
                        0.002
                    )  # let the UI thread take the GIL: keys stay responsive while indexing
            self.add_exchanges(batch)
        except CaptureError as e:
            self.add_exchanges(batch)
            self.finish_indexing(f"error: {e}")
            return
        except SpillClosed:  # the app is exiting (`Engine.hold` met the closed spill file)
            return
        except SpillWriteError as e:  # `Engine.hold` spills frames as exchanges complete
            if not self.store.done:
                self.finish_indexing(f"error: cannot write the spill file: {e}")
            return
        except OSError as e:  # reading the input, or writing the spill file; the rows so far stay
            if not self.store.done:
                self.finish_indexing(f"error: {e}")
            return
        self.finish_indexing()

    def on_index_progress(self, message: IndexProgress) -> None:
        if message.done:
            self._summarize()
            if self.current_mode in ANALYSIS_MODES:
                self.request_analysis()

    @work(thread=True, exclusive=True, group="summaries")
    def _summarize(self) -> None:
        """Background pass once indexing is done: topics and error names of every row, so the
        connections pane's error counts are complete (rows on screen are summarized first
        anyway)."""
        worker = get_current_worker()
        with contextlib.suppress(SpillClosed):  # the app is exiting
            self.store.summarize_all(lambda: worker.is_cancelled, lambda: time.sleep(0.002))

    # -- analysis ---------------------------------------------------------------------------
    def request_analysis(self, force: bool = False) -> None:
        """Run the analysis when it is missing or stale (and indexing finished, unless forced)."""
        if self.analysis_running:
            return
        n = len(self.store)
        if not force and (
            not self.store.done or (self.report is not None and self.report_count >= n)
        ):
            return
        self.analysis_running = True
        self.analysis_progress = 0.0
        self._analyze(n)

    @work(thread=True, exclusive=True, group="analysis")
    def _analyze(self, n: int) -> None:
        """The report over rows [0, n), rebuilt one by one from the store (streaming: the
        analysis keeps what it needs, the store no exchanges)."""
        worker = get_current_worker()
        total = max(1, n)

        def counted() -> Iterator[Exchange]:
            for i, ex in self.store.iter_exchanges(0, n):
                if (i & 0xFF) == 0:
                    if worker.is_cancelled:  # quitting: end the analysis early, nobody waits for it
                        return
                    self.analysis_progress = i / total
                yield ex

        try:
            report = analyze_exchanges(counted(), self.topic_ids)
        except SpillClosed:  # the app is exiting
            return
        if worker.is_cancelled:
            return
        self.report_count = n
        self.post_message(AnalysisReady(report))

    def on_analysis_ready(self, message: AnalysisReady) -> None:
        self.report = message.report
        self.analysis_running = False

    # -- export -----------------------------------------------------------------------------
    def export_rows(self, rows: Sequence[int], path: str) -> None:
        self._export(array("q", rows), path)

    @work(thread=True, group="export")
    def _export(self, rows: array, path: str) -> None:
        """NDJSON of the rows, in their order (each exchange rebuilt from the store), or, for a
        .pcap name, the packets carrying them as `export -w` writes them (pcap_export.py)."""
        worker = get_current_worker()
        what = f"{len(rows):,} exchanges"
        try:
            if path.endswith(".pcap"):
                _found, n = write_pcap(
                    self.store, rows, self.paths, path, self.opts, lambda: worker.is_cancelled
                )
                what = f"{n:,} packets of {len(rows):,} exchanges"
            else:
                exchange = self.store.exchange
                line = self.store.encoder.line
                with open(path, "w", encoding="utf-8") as f:
                    for i in rows:
                        f.write(line(exchange(i)))
                        f.write("\n")
        except (SpillClosed, ExportCancelled):  # the app is exiting
            return
        except (OSError, CaptureError, PcapWriteError) as e:
            self.call_from_thread(self.notify, f"export failed: {e}", severity="error")
            return
        self.last_export = (path, len(rows))
        self.call_from_thread(self.notify, f"exported {what} to {path}")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette lists every binding of the app and of the screen it opened on
        (shown in the footer or not), with its key; picking one runs the action there."""
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        for key, active in screen.active_bindings.items():
            b = active.binding
            if b.action in seen or not b.description:
                continue
            seen.add(b.action)
            yield SystemCommand(
                f"{b.description} ({b.key_display or key})",
                b.action,
                partial(self._run_bound, active.node, b.action),
            )

    async def _run_bound(self, node: DOMNode, action: str) -> None:
        await self.run_action(action, node)

    # -- actions ----------------------------------------------------------------------------
    def action_mode(self, mode: str) -> None:
        self.switch_mode(mode)
        if mode in ANALYSIS_MODES:
            self.request_analysis()

    def jump_to_frame(self, frame: int, finding: dict | None = None) -> None:
        """From a view's row to the exchanges view, the exchange of `frame` selected, and for
        a finding the field it is about (kanalyze/tui/locate.py)."""
        self.switch_mode("exchanges")
        self.call_after_refresh(self._goto_frame, frame, finding)

    def _goto_frame(self, frame: int, finding: dict | None = None) -> None:
        screen = self.screen
        if isinstance(screen, ExchangesScreen):
            screen.goto("frame", frame, None if finding is None else target_of(finding))

    def action_analyze(self) -> None:
        self.request_analysis(force=True)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"
