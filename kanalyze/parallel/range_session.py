"""`--jobs N` for the commands that consume exchanges (`summary`, `report`, `stats`, the
TUI's index): a `Session` whose exchanges come from byte ranges run in parallel, stitched back
into the one-process order.

Each range's engine (range 0 in this process, the others in forked workers, as for `export`)
writes every exchange it completes, pickled, into a scratch file; the stitch
(`kanalyze.parallel.stitch`) says which of them stand, in what order and with which
connection id; `exchanges()` then reads them back in that order with the run's connection
ids and stream offsets (`range_stats.offset_shifts`). The consumers (the report's analyzers,
the stats collectors, the TUI's store; body decoding and topic names learned in wire order)
are the unchanged one-process code fed the same exchanges in the same order, so their output
is the same by construction: what runs in parallel is the engine (reassembly, framing,
correlation), what stays serial is the analysis. `digests(make)` moves per-exchange work into
the ranges as well: each range ships what `make`'s digest returns for its exchanges instead of
them (`summary`: the frameless exchange and its response's error codes), checked like `export`
for topic-id names read in one range and taught in another. `decoded(decoder)` is that for the
bodies (`report`, `stats`: `kanalyze.parallel.range_bodies`), with the names checked where one
process would decode each side, and a rerun in one process (`single`) when one differs.

What the consumers read besides exchanges: the packet count and files (`capture`), the
engine's statistics (`engine.stats`, rebuilt by `range_stats` without the peaks: `summary
--json`, which prints them, stays one process), and `on_packet` (the stats `conv` table, the
TUI's progress), fed by one plain walk over the packets in this process, kept in step with
the exchanges. When the stitch refuses, or a worker fails, the session runs as one process
(`Session.exchanges`): nothing has been yielded by then.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from dissectors.context import DecodeContext
from kanalyze.bodies import Bodies, BodyDecoder
from kanalyze.bodies.names import TopicNames
from kanalyze.capture import CaptureError, CaptureStats, read_captures
from kanalyze.correlation import ConnInfo, Exchange, Message
from kanalyze.engine import Engine
from kanalyze.framing import Pdu
from kanalyze.parallel import range_stats
from kanalyze.parallel.range_export import (
    RANGE_BYTES_ENV,
    RangeOutput,
    RangeTask,
    check_names,
    run_tasks,
)
from kanalyze.parallel.range_plan import FINAL
from kanalyze.parallel.ranges import plan_ranges, run_range
from kanalyze.parallel.stitch import Stitched, Unstitchable, stitch
from kanalyze.parallel.worker import RecordingNames
from kanalyze.session import Session

if TYPE_CHECKING:
    from kanalyze.parallel.range_bodies import Keep

# tests and benchmarks read these after a run
last_fallback: str | None = None  # why the last run was one process (None: it was stitched)
last_ranges = 0  # how many ranges the last stitched run had


def _pack(ex: Exchange, frames: bool) -> tuple:
    """`ex` as plain tuples, which pickle in about a third of the time of its dataclasses;
    its connection id is left out (the parent gives the run's), its frames' bytes too unless
    `frames` (then made bytes of their own: a frame may be a view of a read block)."""
    return (ex.conn.client, ex.conn.broker, *ex[1:6], _pack_msg(ex.request, frames),
            _pack_msg(ex.response, frames), ex.acks, ex.inferred)


def _pack_msg(m: Message | None, frames: bool) -> tuple | None:
    if m is None:
        return None
    p = m.pdu
    data = (p.data if type(p.data) is bytes else bytes(p.data)) if frames else b""
    return (data, *p[1:], m.header, m.body_offset, m.diagnostics, m.done, m.cost)


def _unpack(t: tuple, info: ConnInfo, shift: tuple[int, int]) -> Exchange:
    """`_pack`'s exchange back, on the run's connection `info`, its frames' stream offsets
    moved by `shift` (client side, broker side)."""
    return Exchange(info, *t[2:7], _unpack_msg(t[7], shift[0]),  # type: ignore[call-arg]
                    _unpack_msg(t[8], shift[1]), t[9], t[10])


def _unpack_msg(m: tuple | None, by: int) -> Message | None:
    if m is None:
        return None
    return Message(Pdu(m[0], m[1], m[2] + by, *m[3:8]), m[8], m[9], m[10], m[11], m[12])


# A digest: built per range with the run's topic-name registry (a plain dict, or one noting
# what each exchange's decode read and taught), called with every exchange in the range's
# completion order; it returns a tuple whose first item is the exchange, shipped without its
# frames' bytes, which the parent gives the run's connection id and stream offsets.
Digest = Callable[[Exchange], tuple]
MakeDigest = Callable[[dict[str, str]], Digest]


def collect_range(task: RangeTask, make: MakeDigest | None = None,
                  preloaded: dict[str, str] | None = None) -> RangeOutput:
    """One range's exchanges (or their digests), pickled one after the other into
    `task.out_path` (the `RangeOutput.lines` entries give each one's offset, size and local
    connection id; `.names` the topic-id names each digest read and taught, the registry
    starting from `preloaded`). A digest with a `finish()` is asked at the end whether the
    range stands (it raises `Unstitchable` when not)."""
    items: list[tuple[int, int, int]] = []
    recorded: dict[int, tuple[dict[str, str | None], dict[str, str]]] = {}
    names = RecordingNames(dict(preloaded or {}))
    digest = make(names) if make is not None else None
    pos = 0
    dumps = pickle.dumps
    with open(task.out_path, "wb") as out:

        def on_exchange(ex: Exchange) -> None:
            nonlocal pos
            cid = ex.conn.id
            if digest is not None:
                names.reads, names.writes = {}, {}
                got = digest(ex)
                value = (_pack(got[0], False), *got[1:])
                if names.reads or names.writes:
                    recorded[len(items)] = (names.reads, names.writes)
            else:
                value = (_pack(ex, True),)
            blob = dumps(value, pickle.HIGHEST_PROTOCOL)
            items.append((pos, len(blob), cid))
            out.write(blob)
            pos += len(blob)

        res = run_range(task.rng, task.opts, on_exchange)
    finish = getattr(digest, "finish", None)
    if finish is not None:
        finish()
    return RangeOutput(res, items, recorded)


@dataclass(slots=True)
class RangeSession(Session):
    """`Session` with `jobs` processes over byte ranges (see the module docstring).
    `processes=False` runs the ranges one after the other in this process (the tests' way to
    cut a capture into many ranges cheaply). A stitched run does not call `hold` (the
    exchanges are read back one at a time: nothing waits in memory); one that falls back to
    one process uses it and `park_held` as `Session` does."""

    jobs: int = 1
    processes: bool = True
    # why a `decoded` run's shipped bodies differ from one process's (then run `single()`)
    diverged: str | None = None
    _names: tuple[TopicNames, dict[str, str]] | None = None  # (registry, what it held)

    def exchanges(self) -> Iterator[Exchange]:
        return self._ranged(None)  # type: ignore[return-value]

    def digests(self, make: MakeDigest) -> Iterator[tuple]:
        """What `make`'s digest returns for each exchange, in the one-process order, computed
        in the ranges (one process: here, from a registry that starts empty)."""
        return self._ranged(make)  # type: ignore[return-value]

    def decoded(self, decoder: BodyDecoder, learn: bool = False, facts: bool = False,
                codes: bool = False, latency: bool = False,
                keep: Keep | None = None) -> Iterator[Bodies]:
        """Each exchange in the one-process order with its bodies bound to `decoder`, as
        `Bodies(ex, decoder)` would give them (after `decoder.learn(ex)` with `learn`), but
        decoded in the ranges (`range_bodies`), with the facts (`facts`), the response's error
        codes (`codes`) and the report text's latency kind (`latency`) worked out there too;
        with `keep`, only the bodies it names are shipped.
        When the stitch refuses, one process decodes them here. When a shipped body read a
        topic name the run's registry did not hold at that point, `diverged` says so after
        the run: the caller runs again over `single()`."""
        global last_fallback, last_ranges
        from kanalyze.parallel.range_bodies import BodiesDigest, ShippedBodies, wants

        last_fallback, last_ranges = None, 0
        self.diverged = None
        mapping = decoder.names.mapping
        self._names = (decoder.names, dict(mapping))
        template, records, from_data = wants(decoder)
        make = partial(BodiesDigest, template=template, records=records,
                       learn_from_data=from_data, facts=facts, codes=codes, latency=latency,
                       keep=keep)
        with tempfile.TemporaryDirectory(prefix="kanalyze-jobs-") as tmp:
            got = self._stitched(tmp, make, dict(mapping), bodies=True)
            if isinstance(got, str):
                last_fallback = got
                for ex in Session.exchanges(self):
                    if learn:
                        decoder.learn(ex)
                    yield Bodies(ex, decoder)
                return
            outs, st, paths, shifts = got
            last_ranges = len(outs)
            for item in _replay(outs, st, paths, shifts, self._tap(), True):
                b = ShippedBodies(item[0], decoder, item[1:], self)  # type: ignore[index]
                if learn and TopicNames.teaches(b.ex):
                    b.learn()
                yield b

    def single(self) -> Session:
        """The same run in one process, the registry of the last `decoded` run back to what
        it held before (a caller's rerun after `diverged`, noted in `last_fallback`)."""
        global last_fallback
        last_fallback = f"ran again in one process: {self.diverged}"
        if self._names is not None:
            names, before = self._names
            names.restore(before)
        return Session(self.paths, self.opts, progress=self.progress, on_packet=self.on_packet,
                       hold=self.hold, park_held=self.park_held)

    def _ranged(self, make: MakeDigest | None) -> Iterator[object]:
        global last_fallback, last_ranges
        last_fallback, last_ranges = None, 0
        with tempfile.TemporaryDirectory(prefix="kanalyze-jobs-") as tmp:
            got = self._stitched(tmp, make)
            if isinstance(got, str):
                last_fallback = got
                exchanges = Session.exchanges(self)
                yield from exchanges if make is None else map(make({}), exchanges)
                return
            outs, st, paths, shifts = got
            last_ranges = len(outs)
            yield from _replay(outs, st, paths, shifts, self._tap(), make is not None)

    def _stitched(self, tmp: str, make: MakeDigest | None,
                  preloaded: dict[str, str] | None = None, bodies: bool = False) -> tuple[
            list[RangeOutput], Stitched, list[str], dict[tuple[int, int], tuple[int, int]]] | str:
        """The ranges run and stitched, or why not (then this is a one-process run);
        `preloaded`: the topic-id names the run's registry starts with; `bodies`: whether
        the ranges decode bodies (the planner weighs their bytes then)."""
        range_bytes = int(os.environ.get(RANGE_BYTES_ENV) or 0) or None
        try:
            ranges = plan_ranges(self.paths, self.jobs, range_bytes, bodies=bodies)
        except CaptureError:  # not a capture: one process says so, in its words
            return "the input is not a capture"
        if ranges is None:
            return "the input cannot be cut into ranges"
        ctx = DecodeContext()  # unused: the ranges decode no body
        tasks = [RangeTask(r, self.opts, ctx, True, os.path.join(tmp, f"r{r.index}.pickle"))
                 for r in ranges]
        try:
            outs = run_tasks(tasks, self.jobs - 1 if self.processes else None,
                             partial(collect_range, make=make, preloaded=preloaded))
        except OSError as e:
            return f"workers failed: {e}"
        except Unstitchable as e:  # a range's own verdict (`collect_range`, in this process)
            return str(e)
        try:
            st = stitch([o.result for o in outs], self.opts, others=True)
            check_names(outs, st, preloaded or {})
            self._totals(outs, st)
            shifts = range_stats.offset_shifts([o.result for o in outs], st)
        except Unstitchable as e:
            return str(e)
        self.capture = CaptureStats(files=[self.paths[0]], packets=sum(r.count for r in ranges))
        return outs, st, [t.out_path for t in tasks], shifts

    def _totals(self, outs: list[RangeOutput], st: Stitched) -> None:
        """`engine.stats` as one engine would have counted them (`range_stats`; the peaks
        excepted); raises `Unstitchable` when they cannot be had."""
        engine = Engine(lambda _ex: None, self.opts)
        engine.stats = range_stats.engine_stats([o.result for o in outs], st)
        self.engine = engine

    def _tap(self) -> Callable[[int], None] | None:
        """`on_packet` kept in step with the exchanges as in one process: a call with packet
        number P shows it every packet up to P (before an exchange released after P)."""
        if self.on_packet is None:
            return None
        tap = self.on_packet
        packets = read_captures(self.paths, CaptureStats(), views=True)
        seen = 0

        def upto(no: int) -> None:
            nonlocal seen
            while seen < no:
                pkt = next(packets, None)
                if pkt is None:
                    seen = no
                    return
                tap(pkt)
                seen = pkt.no

        return upto


def _replay(outs: list[RangeOutput], st: Stitched, paths: list[str],
            shifts: dict[tuple[int, int], tuple[int, int]],
            tap: Callable[[int], None] | None, digests: bool) -> Iterator[object]:
    """The exchanges (or digests) that stand, in the stitched order, with the run's
    connection ids. Each is read from its scratch file on its own (`os.pread`: mapping the
    files would count every page read back in this process's RSS, as much as the capture's
    frames)."""
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    try:
        infos: dict[tuple[int, int], ConnInfo] = {}
        loads, pread = pickle.loads, os.pread
        for (r, i), at in zip(st.sequence, st.released, strict=True):
            if tap is not None:
                tap(at)
            off, size, lid = outs[r].lines[i]
            got = loads(pread(fds[r], size, off))
            packed = got[0]
            info = infos.get((r, lid))
            if info is None:
                info = infos[(r, lid)] = ConnInfo(st.ids[r][lid], packed[0], packed[1])
            # stream offsets as the run counts them
            ex = _unpack(packed, info, shifts.get((r, lid), (0, 0)))
            yield (ex, *got[1:]) if digests else ex
        if tap is not None:
            tap(FINAL)
    finally:
        for fd in fds:
            os.close(fd)


__all__ = ["Digest", "MakeDigest", "RangeSession", "collect_range"]
