"""Replay the committed fuzz corpora through the harness targets (strict decoding).

- fuzz/corpus/<harness>/: the seeds (valid inputs from captures/ and the test encoders);
- fuzz/regressions/<harness>/: minimized inputs that once crashed or hung a harness.

Every file must run through its target without raising and within a time bound.
Regressions for bugs not fixed yet are `xfail(strict=True)`, keyed by file name
in KNOWN_BUGS: when the fix lands the test XPASSes, fails, and the marker is removed.
"""

from __future__ import annotations

import gzip
import zlib

import pytest

from dissectors.context import DecodeContext, Limits
from dissectors.records import decode_records
from fuzz import targets as T
from kanalyze.capture import CaptureError, CaptureStats, read_capture
from kanalyze.engine import Engine, EngineOptions
from tests.fuzz.fuzzhelp import CORPUS, REGRESSIONS, bounded
from tests.support import packets as P

# regression file (harness/name) -> why it still fails (see fuzz/targets.py KNOWN_BUGS)
KNOWN_BUGS: dict[str, str] = {}


def _files(base):
    return sorted(p for p in base.glob("*/*") if p.is_file() and p.parent.name in T.TARGETS)


SEEDS = _files(CORPUS)
REGRESSION_FILES = _files(REGRESSIONS)


def test_every_harness_has_seeds():
    assert {p.parent.name for p in SEEDS} == set(T.HARNESSES)
    assert sum(p.stat().st_size for p in SEEDS) < 600_000  # kept small on purpose


@pytest.mark.parametrize("harness", T.HARNESSES)
def test_seed_corpus_replays(harness):
    target = T.TARGETS[harness]
    files = [p for p in SEEDS if p.parent.name == harness]
    for p in files:
        try:
            bounded(target, p.read_bytes(), 10.0)
        except Exception as e:
            raise AssertionError(f"{p.relative_to(CORPUS.parent)}: {e!r}") from e


def _regression_params():
    out = []
    for p in REGRESSION_FILES:
        key = f"{p.parent.name}/{p.name}"
        marks = (
            [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[key])] if key in KNOWN_BUGS else []
        )
        out.append(pytest.param(p, id=key, marks=marks))
    return out


@pytest.mark.parametrize("path", _regression_params())
def test_regression_replays(path):
    bounded(T.TARGETS[path.parent.name], path.read_bytes(), 5.0)


def test_known_bugs_have_files():
    names = {f"{p.parent.name}/{p.name}" for p in REGRESSION_FILES}
    assert set(KNOWN_BUGS) <= names


# ---- the same known bugs, stated directly against the public entry points ----
def test_oversized_plausible_request_does_not_hang_the_engine():
    """Fixed in 37e7d40 (was an endless resync loop growing Framer.events). One 14-byte client
    payload, default options: a size prefix of 0x10000001 (just over max_frame = 256 MiB,
    first byte 0x10 = max_frame >> 24 so the search does not rule it out) before an
    ApiVersions v0 header."""
    payload = b"\x10\x00\x00\x01" + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"
    _opts, pkts = T.stream_packets(T.encode_stream(0, [(0, 0, payload)]))

    def run(_data):
        engine = Engine(lambda ex: None, EngineOptions())
        for p in pkts:
            engine.feed(p)
        engine.close()
        T.check_accounting(engine)

    bounded(run, b"", 1.0)


def _unframeable_tail(from_broker: bool, nbytes: int) -> bytes:
    """A synced connection (handshake, one request), then `nbytes` of zero bytes from one
    side in 1448-byte segments: no position is a plausible frame, so the framer searches."""
    segs = [(18, 0, b""), (3, 0, b""), (0, 0, P.request_frame(18, 0, 1, "c"))]
    blob = bytes(nbytes)
    segs += [(int(from_broker), 0, blob[i : i + 1448]) for i in range(0, nbytes, 1448)]
    return T.encode_stream(0, segs)


@pytest.mark.parametrize("from_broker", [False, True], ids=["client", "broker"])
def test_search_is_linear(from_broker):
    """Fixed in 37e7d40 (a fruitless search dropped nothing and rescanned from 0). 128 KiB of
    unframeable bytes: linear work is ~0.1-0.3 s even on a loaded machine; the quadratic
    rescan takes 6-8 s (256 KiB: ~30 s; it stays quadratic up to 1 MiB)."""
    data = _unframeable_tail(from_broker, 128 * 1024)
    bounded(T.run_stream, data, 2.0)


def test_unanswered_requests_beyond_max_pending_are_linear():
    """Fixed in a2a68bb (each eviction scanned every pending id with min()). 15,000
    ApiVersions v0 requests (14 bytes each) and no response on one connection (a capture of
    one direction only): 5,000 evictions. Linear work is ~0.3 s; each eviction scans all
    10,000 pending ids (~2.7 ms), ~13 s in all."""
    import struct

    blob = b"".join(struct.pack(">ihhih", 10, 18, 0, i, -1) for i in range(15_000))
    segs = [(18, 0, b""), (3, 0, b"")] + [
        (0, 0, blob[i : i + 1448]) for i in range(0, len(blob), 1448)
    ]
    bounded(T.run_stream, T.encode_stream(0, segs), 3.0)


def _zstd_batch(records: bytes, count: int) -> bytes:
    import struct

    import crc32c
    import zstandard

    ts = 1_700_000_000_000
    body = struct.pack(">hiqqqhii", 4, count - 1, ts, ts, -1, -1, -1, count)
    body += zstandard.ZstdCompressor(level=19).compress(records)
    return struct.pack(">qiibI", 0, 9 + len(body), 0, 2, crc32c.crc32c(body)) + body


def _record_nodes(buf: bytes, max_array_count: int) -> int:
    ctx = DecodeContext(limits=Limits(max_array_count=max_array_count), strict=True)
    node = decode_records(buf, 0, len(buf), ctx)
    return sum(len(b.children or ()) for b in node.children)


def test_records_per_field_are_bounded_valid_tiny_records():
    """A 165-byte zstd batch (declared record_count 1) inflates, within the ratio cap, to
    ~26 KB of 7-byte valid records: 3714 records are materialized. At the default caps
    (64 MiB, ratio 250) a ~270 KB batch becomes ~9.6M records: ~9 GB and ~15 min."""
    rec = bytes(
        [12, 0, 0, 0, 1, 1, 0]
    )  # length 6, attrs, ts delta, offset delta, null key/value, 0 headers
    batch = _zstd_batch(rec * ((1 << 20) // len(rec)), 1)
    assert _record_nodes(batch, 1000) <= 1000


def test_records_per_field_are_bounded_fuzz_storm():
    """The records fuzzer's timeout (fuzz/regressions/records/records-bad-record-storm-zstd.bin):
    a 246-byte field whose zstd batch (record_count 3) inflates to 13.5 KB of 3-byte bad
    records: 4500 RAW nodes and 4500 diagnostics (~1 s plain, >5 s under atheris)."""
    buf = (REGRESSIONS / "records" / "records-bad-record-storm-zstd.bin").read_bytes()[1:]
    assert _record_nodes(buf, 1000) <= 1000


def test_corrupt_gzip_is_a_capture_error(tmp_path):
    """Fixed in 37e7d40 (zlib.error escaped read_capture). A gzip member whose deflate data is
    invalid from the first block: read_capture must raise CaptureError (not a capture we can
    read), not zlib.error."""
    path = tmp_path / "bad.pcap.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + b"\xff" * 8)
    try:
        list(read_capture(str(path), CaptureStats()))
    except CaptureError:
        return
    except zlib.error as e:
        raise AssertionError(f"zlib.error escaped read_capture: {e}") from e


def test_truncated_gzip_is_a_diagnostic(tmp_path):
    """The well-handled neighbour of the bug above: a gzip cut short ends with a diagnostic."""
    good = (ROOT_CRAFTED / "baseline.pcap").read_bytes()
    z = gzip.compress(good, mtime=0)
    path = tmp_path / "cut.pcap.gz"
    path.write_bytes(z[: len(z) - 20])
    stats = CaptureStats()
    list(read_capture(str(path), stats))
    assert stats.diagnostics


ROOT_CRAFTED = CORPUS.parents[1] / "captures" / "crafted"
