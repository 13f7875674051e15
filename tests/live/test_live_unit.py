"""Live mode without a network: the command and the session driven by a fake capture source
(packets replayed from the committed captures), the metrics, and the permission path."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kanalyze.live as live
from kanalyze import cli
from kanalyze.capture import CaptureStats, read_captures
from kanalyze.commands.live import NdjsonOutput, listen_address
from kanalyze.engine import EngineOptions
from kanalyze.export import ExchangeEncoder
from kanalyze.live import CaptureCounters, LiveOptions, LiveSession
from kanalyze.session import Session
from tests.support.engine import apiv_request, apiv_response
from tests.support.packets import Conversation

CAPTURES = Path(__file__).resolve().parents[2] / "captures"


class FakeSource:
    """Replays (ts, bytes) packets; at the end stops the session, or signals this process."""

    def __init__(self, packets: list[tuple[int, bytes]], linktype: int, at_end=None) -> None:  # noqa: ANN001
        self.packets = list(packets)
        self.linktype = linktype
        self.counters = CaptureCounters()
        self.at_end = at_end
        self.closed = False

    def read(self, timeout: float | None):  # noqa: ANN201
        if self.packets:
            ts, data = self.packets.pop(0)
            self.counters.packets += 1
            self.counters.bytes += len(data)
            return ts, data
        if self.at_end is not None:
            at_end, self.at_end = self.at_end, None
            at_end()
        if timeout:
            time.sleep(min(timeout, 0.01))
        return None

    def update_counters(self) -> None:
        self.counters.kernel_packets = self.counters.packets
        self.counters.kernel_drops = 0

    def close(self) -> None:
        self.closed = True


def replay(path: Path) -> tuple[list[tuple[int, bytes]], int]:
    pkts = list(read_captures([str(path)], CaptureStats()))
    return [(p.ts_ns, p.data) for p in pkts], pkts[0].linktype


def export_lines(path: Path, decode: bool = True) -> list[str]:
    enc = ExchangeEncoder(decode=decode)
    return [enc.line(ex) for ex in Session([str(path)], EngineOptions()).exchanges()]


NO_HOUSEKEEPING = LiveOptions(tick_s=1e9)  # replayed packets are old: no wall-clock expiry


@pytest.mark.parametrize("name", ["lib_acks.pcap", "aio_group.pcap", "replication/isr.pcap"])
def test_session_equals_offline_export(name: str) -> None:
    pkts, lt = replay(CAPTURES / name)
    src = FakeSource(pkts, lt)
    s = LiveSession(src, LiveOptions(tick_s=1e9))
    src.at_end = lambda: s.stop("eof")
    enc = ExchangeEncoder()
    lines: list[str] = []
    s.subscribe(lambda ex: lines.append(enc.line(ex)))
    st = s.run()
    assert src.closed
    assert st.stop_reason == "eof"
    assert lines == export_lines(CAPTURES / name)
    assert st.exchanges == len(lines)


def test_pending_requests_expire_while_running() -> None:
    conv = Conversation()
    now = time.time_ns()
    pkts = [(now, p) for p in conv.handshake()]
    pkts.append((now, conv.send(True, apiv_request(1))))
    pkts.append((now, conv.send(False, apiv_response(1))))
    pkts.append((now, conv.send(True, apiv_request(2))))  # never answered
    src = FakeSource(pkts, 101)
    s = LiveSession(src, LiveOptions(tick_s=0.05, pending_timeout_s=0.2, idle_timeout_s=0.5))
    seen: list[tuple[str, float]] = []
    t0 = time.monotonic()
    s.subscribe(lambda ex: seen.append((ex.status, time.monotonic() - t0)))
    ticks: list[int] = []

    def tick(sess: LiveSession) -> None:
        ticks.append(sess.open_connections)
        if len(seen) == 2 and sess.open_connections == 0:
            sess.stop("done")

    s.on_tick(tick)
    s.opts.duration_s = 5
    st = s.run()
    assert st.stop_reason == "done"
    assert [x for x, _ in seen] == ["ok", "no_response"]
    assert st.idle_closed == 1
    assert s.engine.order == {} and s.engine.conns == {}


def test_acks0_produce_does_not_hold_back_the_output() -> None:
    import struct

    from tests.support.packets import request_frame

    a, b = Conversation(cport=40001), Conversation(cport=40002)
    now = time.time_ns()
    pkts = [(now, p) for p in a.handshake() + b.handshake()]
    acks0 = struct.pack("!hii", 0, 1000, 0)  # Produce v2: acks=0, timeout, no topics
    pkts.append((now + 1, a.send(True, request_frame(0, 2, 1, "p", acks0))))
    pkts.append((now + 2, b.send(True, apiv_request(7))))
    pkts.append((now + 3, b.send(False, apiv_response(7))))
    src = FakeSource(pkts, 101)
    s = LiveSession(src, LiveOptions(tick_s=0.05, acks0_grace_s=0.1, duration_s=5))
    seen: list[tuple[str, str]] = []
    s.subscribe(lambda ex: seen.append((ex.api, ex.status)))
    s.on_tick(lambda sess: sess.stop("both out") if len(seen) == 2 else None)
    assert s.run().stop_reason == "both out"  # emitted while running, not at close
    assert seen == [("Produce", "ok"), ("ApiVersions", "ok")]


def test_max_packets_and_duration() -> None:
    pkts, lt = replay(CAPTURES / "lib_acks.pcap")
    s = LiveSession(FakeSource(pkts, lt), LiveOptions(tick_s=1e9, max_packets=10))
    assert s.run().stop_reason == "packet limit reached"
    assert s.source.counters.packets == 10
    s = LiveSession(FakeSource([], lt), LiveOptions(tick_s=1e9, duration_s=0.1))
    assert s.run().stop_reason == "duration reached"


# -- the command, with the capture backend replaced ------------------------------------------


@pytest.fixture
def fake_capture(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """`kanalyze live` reads the given capture file instead of an interface; SIGTERM at the end."""
    opened: dict[str, object] = {}

    def use(path: Path) -> None:
        pkts, lt = replay(path)

        def fake_open(iface: str, bpf: str, snaplen: int = 0, buffer_bytes: int = 0) -> FakeSource:
            opened.update(iface=iface, bpf=bpf)
            return FakeSource(pkts, lt, at_end=lambda: os.kill(os.getpid(), signal.SIGTERM))

        monkeypatch.setattr(live, "open_source", fake_open)

    use.opened = opened  # type: ignore[attr-defined]
    return use


SLOW_EXPIRY = ["--pending-timeout", "1e9", "--idle-timeout", "1e9"]


def test_command_writes_export_equal_ndjson_and_pcap(fake_capture, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = CAPTURES / "lib_acks.pcap"
    fake_capture(src)
    out, pcap = tmp_path / "o.ndjson", tmp_path / "o.pcap"
    rc = cli.main(
        [
            "live",
            "-i",
            "lo",
            "--port",
            "9092",
            "-o",
            str(out),
            "--write-pcap",
            str(pcap),
            *SLOW_EXPIRY,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0
    assert fake_capture.opened["bpf"] == "tcp port 9092"
    assert out.read_text().splitlines() == export_lines(src)
    assert export_lines(pcap) == export_lines(src)
    assert "SIGTERM" in err and "exchanges:" in err and "Traceback" not in err


def test_command_rotates_output(fake_capture, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    src = CAPTURES / "aio_group.pcap"
    fake_capture(src)
    out = tmp_path / "o.ndjson"
    assert (
        cli.main(["live", "-i", "lo", "-o", str(out), "--rotate-bytes", "20000", *SLOW_EXPIRY]) == 0
    )
    files = sorted(tmp_path.glob("o.ndjson*"), key=lambda p: (len(p.name), p.name))
    assert len(files) > 2
    lines = [line for f in files for line in f.read_text().splitlines()]
    assert lines == export_lines(src)
    assert all(f.stat().st_size < 20000 + 20000 for f in files)


def test_output_rotation_by_time(tmp_path: Path) -> None:
    o = NdjsonOutput(str(tmp_path / "x"), rotate_seconds=0.05)
    o.write("a")
    time.sleep(0.06)
    o.tick()
    o.write("b")
    o.close()
    assert [Path(f).read_text() for f in o.files] == ["a\n", "b\n"]
    with pytest.raises(ValueError):
        NdjsonOutput("-", rotate_bytes=10)


def test_worker_lines_are_written_as_bytes_and_rotated_by_bytes(tmp_path: Path) -> None:
    """`live --workers` hands the output the workers' UTF-8 as it came (views of a blob)."""
    o = NdjsonOutput(str(tmp_path / "x"), rotate_bytes=8)
    o.write("text")  # one process's path first, then bytes: the order is kept
    blob = "é1\nline2".encode()
    o.write_many([memoryview(blob)[:3], memoryview(blob)[4:]])
    o.close()
    assert [Path(f).read_text() for f in o.files] == ["text\né1\n", "line2\n"]
    assert o.lines == 3


def test_header_only_with_metrics(fake_capture, tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    src = CAPTURES / "lib_acks.pcap"
    fake_capture(src)
    out = tmp_path / "o.ndjson"
    from kanalyze import metrics

    served = []
    monkeypatch.setattr(
        metrics.Metrics, "serve", lambda self, host, port: served.append((self, host, port))
    )
    assert (
        cli.main(
            [
                "live",
                "-i",
                "lo",
                "--header-only",
                "--prometheus",
                "0.0.0.0:19399",
                "-o",
                str(out),
                *SLOW_EXPIRY,
            ]
        )
        == 0
    )
    assert out.read_text().splitlines() == export_lines(src, decode=False)
    m, host, port = served[0]
    assert (host, port) == ("0.0.0.0", 19399)
    total = sum(
        s.value
        for fam in m.registry.collect()
        if fam.name == "kanalyze_requests"
        for s in fam.samples
        if s.name.endswith("_total")
    )
    assert total == len(export_lines(src))


def test_broken_pipe_stops_cleanly(capsys, fake_capture, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    # capsys first: torn down last, after monkeypatch put its own stdout back
    fake_capture(CAPTURES / "aio_group.pcap")

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError

        def fileno(self) -> int:
            return os.open(os.devnull, os.O_WRONLY)

    monkeypatch.setattr(sys, "stdout", Closed())
    monkeypatch.setattr(os, "dup2", lambda a, b: None)
    assert cli.main(["live", "-i", "lo", *SLOW_EXPIRY]) == 0
    err = capsys.readouterr().err
    assert "output closed" in err and "Traceback" not in err


# -- errors the user can act on ----------------------------------------------------------------


def test_permission_error_is_a_clear_message(monkeypatch, capsys) -> None:  # noqa: ANN001
    real = socket.socket

    def denied(family=-1, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if family == socket.AF_PACKET:
            raise PermissionError(1, "Operation not permitted")
        return real(family, *a, **k)

    monkeypatch.setattr(socket, "socket", denied)
    assert cli.main(["live", "-i", "lo"]) == 2
    err = capsys.readouterr().err
    assert "root or the CAP_NET_RAW capability" in err
    assert "Traceback" not in err


def test_bad_filter_and_interface(capsys) -> None:  # noqa: ANN001
    assert cli.main(["live", "-i", "lo", "--bpf", "tcp port banana and"]) == 2
    assert "bad BPF filter" in capsys.readouterr().err
    assert cli.main(["live", "-i", "no-such-if0"]) == 2
    assert "no such interface" in capsys.readouterr().err
    assert cli.main(["live", "-i", "lo", "--rotate-bytes", "10"]) == 2
    assert "need -o FILE" in capsys.readouterr().err


def test_listen_address() -> None:
    assert listen_address("9100") == ("127.0.0.1", 9100)
    assert listen_address("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert listen_address("[::1]:9100") == ("::1", 9100)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop a capability")
def test_without_cap_net_raw_for_real(tmp_path: Path) -> None:
    capsh = "/usr/sbin/capsh" if os.path.exists("/usr/sbin/capsh") else None
    if capsh is None:
        pytest.skip("capsh not installed")
    if (
        subprocess.run(
            [capsh, "--drop=cap_net_raw", "--", "-c", "true"], capture_output=True, timeout=30
        ).returncode
        != 0
    ):
        pytest.skip("capsh cannot drop capabilities here (no CAP_SETPCAP)")
    cmd = f"{sys.executable} -m kanalyze.cli live -i lo --duration 1"
    p = subprocess.run(
        [capsh, "--drop=cap_net_raw", "--", "-c", cmd],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert "root or the CAP_NET_RAW capability" in p.stderr
    assert "Traceback" not in p.stderr


# -- metrics from decoded exchanges ----------------------------------------------------------------


def observe_all(path: Path):  # noqa: ANN201
    from prometheus_client import CollectorRegistry

    from kanalyze.metrics import Metrics

    m = Metrics(CollectorRegistry())
    enc = ExchangeEncoder()
    encoded = []
    for ex in Session([str(path)], EngineOptions()).exchanges():
        d = enc.encode(ex)
        m.observe(ex, d)
        encoded.append(json.loads(json.dumps(d)))
    return m, encoded


def gauge(m, name: str) -> dict[tuple, float]:  # noqa: ANN001
    return {
        tuple(sorted(s.labels.items())): s.value
        for fam in m.registry.collect()
        for s in fam.samples
        if s.name == name
    }


def test_follower_lag_and_hw_from_replication_traffic() -> None:
    m, ex = observe_all(CAPTURES / "replication" / "isr.pcap")
    offs = gauge(m, "kanalyze_follower_fetch_offset")
    lags = gauge(m, "kanalyze_follower_lag")
    assert offs and lags
    # the last follower Fetch per (topic, partition, replica), recomputed from the encoded exchanges
    from kanalyze.analysis.wire import (
        batch_end,
        batches,
        fetch_replica,
        fetch_requests,
        fetch_responses,
    )

    want_off, want_lag = {}, {}
    for d in ex:
        if d["api"] != "Fetch" or not d["response"]:
            continue
        rid = fetch_replica(d["request"]["body"])
        ends = {}
        for t, p, part in fetch_responses(d["response"]["body"]):
            if part.get("error_code"):
                continue
            e = [part["high_watermark"]] + [batch_end(b) for b in batches(part.get("records"))]
            ends[(t, p)] = max(x for x in e if x is not None)
        if rid < 0:
            continue
        for t, p, part in fetch_requests(d["request"]["body"]):
            key = (("partition", str(p)), ("replica", str(rid)), ("topic", t))
            want_off[key] = part["fetch_offset"]
            if (t, p) in ends:
                want_lag[key] = max(0, ends[(t, p)] - part["fetch_offset"])
    assert offs == want_off
    assert lags == want_lag


# -- the interface going down (issue 9, must-do 5) --------------------------------------------


class FakeSocket:
    """recvmsg_into raises the queued errors first, then times out."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)

    def settimeout(self, _t: float | None) -> None:
        pass

    def recvmsg_into(self, *_a: object) -> tuple:
        if self.errors:
            code = self.errors.pop(0)
            raise OSError(code, os.strerror(code))
        raise TimeoutError


def _af_packet_with(errors: list[int]) -> live.AfPacketSource:
    src = object.__new__(live.AfPacketSource)  # no real socket: needs no CAP_NET_RAW
    src.sock = FakeSocket(errors)
    src.iface = "eth9"
    src.counters = CaptureCounters()
    src._buf, src._anc = bytearray(64), 64
    return src


def test_interface_down_is_counted_and_capture_goes_on() -> None:
    import errno

    src = _af_packet_with([errno.ENETDOWN, errno.ENETDOWN])
    assert src.read(0.01) is None and src.read(0.01) is None and src.read(0.01) is None
    assert src.counters.interface_down == 2


def test_interface_removed_is_a_live_error() -> None:
    import errno

    src = _af_packet_with([errno.ENODEV])
    with pytest.raises(live.LiveError, match="eth9 went away"):
        src.read(0.01)


class VanishingSource(FakeSource):
    """Replays the packets, then the interface goes away."""

    def read(self, timeout: float | None):  # noqa: ANN201
        if not self.packets:
            raise live.LiveError("interface lo went away")
        return super().read(timeout)


def test_interface_gone_keeps_every_exchange_already_captured() -> None:
    pkts, lt = replay(CAPTURES / "aio_group.pcap")
    s = LiveSession(VanishingSource(pkts, lt), NO_HOUSEKEEPING)
    enc = ExchangeEncoder()
    lines: list[str] = []
    s.subscribe(lambda ex: lines.append(enc.line(ex)))
    st = s.run()
    assert s.failed and st.stop_reason == "interface lo went away"
    assert s.source.closed
    assert lines == export_lines(CAPTURES / "aio_group.pcap")


def test_command_reports_interface_gone_and_keeps_output(
    monkeypatch, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    src_path = CAPTURES / "lib_acks.pcap"
    pkts, lt = replay(src_path)

    def fake_open(iface: str, bpf: str, snaplen: int = 0, buffer_bytes: int = 0) -> FakeSource:
        s = VanishingSource(pkts, lt)
        s.counters.interface_down = 1
        return s

    monkeypatch.setattr(live, "open_source", fake_open)
    out = tmp_path / "o.ndjson"
    rc = cli.main(["live", "-i", "lo", "-o", str(out), *SLOW_EXPIRY])
    err = capsys.readouterr().err
    assert rc == 1
    assert out.read_text().splitlines() == export_lines(src_path)
    assert "went away" in err and "interface down: 1 times" in err and "Traceback" not in err


def test_command_reports_limit_hits(fake_capture, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    fake_capture(CAPTURES / "aio_group.pcap")
    assert (
        cli.main(
            [
                "live",
                "-i",
                "lo",
                "-o",
                str(tmp_path / "o.ndjson"),
                "--max-connections",
                "1",
                *SLOW_EXPIRY,
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "limits hit: max_connections" in err and "Traceback" not in err


def test_compiled_filters_keep_whole_packets() -> None:
    """libpcap compiles `ret #65535`; in the kernel that cuts 65549-byte loopback frames."""
    from kanalyze.live.bpf import _PROGRAMS, DLT_EN10MB, DLT_RAW, compile_bpf

    for dlt in (DLT_EN10MB, DLT_RAW):
        compile_bpf("tcp port 9092", dlt)
        prog = _PROGRAMS[-1]
        rets = [prog.bf_insns[i].k for i in range(prog.bf_len) if prog.bf_insns[i].code == 6]
        assert 0 in rets  # the rejecting return is kept
        assert {k & 0xFFFFFFFF for k in rets if k} == {0xFFFFFFFF}


def test_on_loopback_the_kernel_drops_the_outgoing_copies() -> None:
    """Three instructions in front of libpcap's program: load the packet type, and return 0
    for PACKET_OUTGOING; the program behind them is unchanged (its jumps are relative)."""
    import struct

    from kanalyze.live.bpf import _PROGRAMS, DLT_EN10MB, compile_bpf

    fprog = compile_bpf("tcp port 9092", DLT_EN10MB, drop_outgoing=True)
    insns, prog = _PROGRAMS[-1], _PROGRAMS[-2]
    assert struct.unpack("HL", fprog)[0] == len(insns) == prog.bf_len + 3  # type: ignore[attr-defined]
    head = [(i.code, i.jt, i.jf, i.k) for i in insns[:3]]  # type: ignore[index]
    assert head == [(0x20, 0, 0, -0x1000 + 4), (0x15, 0, 1, 4), (0x06, 0, 0, 0)]
    rest = [(i.code, i.jt, i.jf, i.k) for i in insns[3:]]  # type: ignore[index]
    assert rest == [
        (prog.bf_insns[i].code, prog.bf_insns[i].jt, prog.bf_insns[i].jf, prog.bf_insns[i].k)  # type: ignore[attr-defined]
        for i in range(prog.bf_len)  # type: ignore[attr-defined]
    ]
