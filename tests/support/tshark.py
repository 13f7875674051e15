"""tshark as a differential oracle: run it on a capture and read back its Kafka PDUs.

tshark shows a reassembled Kafka PDU in the packet that carries the PDU's last byte, and with
``-T fields -E occurrence=a -E aggregator=|`` a packet carrying several PDUs yields one row whose
fields hold one ``|``-separated value per PDU, in PDU order. That alignment holds only when every
PDU of the packet has the field: a packet mixing matched and unmatched responses has fewer
``kafka.request_frame`` values than ``kafka.correlation_id`` values, and a packet whose PDU tshark
cannot dissect far enough lacks a value somewhere. For those packets (rare) the PDUs are read
again from PDML, where each PDU is its own ``<proto name="kafka">`` element, so nothing is guessed.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

FIELDS = (
    "frame.number",
    "kafka.request_key",
    "kafka.request.version",
    "kafka.response_key",
    "kafka.correlation_id",
    "kafka.request_frame",
    "tcp.srcport",
    "tcp.stream",
)


@dataclass(frozen=True, slots=True)
class TsharkPdu:
    """One Kafka PDU as tshark dissects it."""

    frame: int
    is_request: bool
    api_key: int | None  # None: a response tshark could not match to a request
    api_version: int | None
    correlation_id: int
    request_frame: int | None = None  # responses only: the request tshark matched it to
    stream: int = -1  # tshark's tcp.stream index (one per TCP connection)


def tshark_binary() -> str | None:
    return shutil.which("tshark")


def base_args(pcap: Path | str, port: int) -> list[str]:
    """Common options: reassemble out-of-order segments (without it tshark 4.0 loses PDUs)."""
    return [
        tshark_binary() or "tshark",
        "-n",
        "-r",
        str(pcap),
        "-o",
        "tcp.reassemble_out_of_order:TRUE",
        "-d",
        f"tcp.port=={port},kafka",
        "-Y",
        "kafka",
    ]


def _run(args: list[str]) -> bytes:
    """Run tshark; a capture cut short mid-packet is fine (tshark still prints what precedes it)."""
    proc = subprocess.run(args, capture_output=True, check=False)
    if proc.returncode != 0 and not (proc.returncode == 2 and b"cut short" in proc.stderr):
        raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def _ints(cell: str) -> list[int]:
    return [int(v) for v in cell.split("|")] if cell else []


def _row_pdus(row: list[str], port: int) -> list[TsharkPdu] | None:
    """PDUs of one ``-T fields`` row, or None when the aggregated values do not line up."""
    frame = int(row[0])
    stream = int(row[7].split("|")[0]) if row[7] else -1
    req_keys, req_vers, resp_keys, corr, req_frames = (_ints(c) for c in row[1:6])
    to_broker = int(row[6].split("|")[0]) != port if row[6] else bool(req_keys)
    if to_broker:
        if resp_keys or not len(req_keys) == len(req_vers) == len(corr):
            return None
        return [
            TsharkPdu(frame, True, k, v, c, None, stream)
            for k, v, c in zip(req_keys, req_vers, corr, strict=True)
        ]
    if req_keys:
        return None
    # Unmatched responses carry neither key nor request frame; a row is unambiguous only when
    # all of its responses are matched or none is.
    if not corr or (resp_keys and len(resp_keys) != len(corr)) or len(req_frames) != len(resp_keys):
        return None
    keys: list[int | None] = list(resp_keys) if resp_keys else [None] * len(corr)
    frames: list[int | None] = list(req_frames) if req_frames else [None] * len(corr)
    return [
        TsharkPdu(frame, False, k, None, c, f, stream)
        for k, c, f in zip(keys, corr, frames, strict=True)
    ]


def _pdml_pdus(pcap: Path | str, port: int, frames: set[int]) -> dict[int, list[TsharkPdu]]:
    """PDUs of the given packets, read from PDML (one ``kafka`` proto element per PDU)."""
    filt = "kafka and frame.number in {" + ", ".join(str(f) for f in sorted(frames)) + "}"
    args = base_args(pcap, port)
    args[args.index("-Y") + 1] = filt
    out = _run([*args, "-T", "pdml"])
    result: dict[int, list[TsharkPdu]] = {}
    for packet in ET.fromstring(out).iter("packet"):
        num = None
        pdus: list[TsharkPdu] = []
        for proto in packet.findall("proto"):
            if proto.get("name") == "frame":
                num = int(
                    next(
                        f.get("show")
                        for f in proto.iter("field")
                        if f.get("name") == "frame.number"
                    )
                )
            if proto.get("name") != "kafka":
                continue
            vals: dict[str, int] = {}
            for f in proto.iter("field"):
                name = f.get("name")
                if name in FIELDS and name not in vals:
                    vals[name] = int(f.get("show", "0"))
            if "kafka.correlation_id" not in vals:
                continue
            assert num is not None
            srcport, stream = tcp_of(packet)
            if srcport != port:
                pdus.append(
                    TsharkPdu(
                        num,
                        True,
                        vals["kafka.request_key"],
                        vals.get("kafka.request.version"),
                        vals["kafka.correlation_id"],
                        None,
                        stream,
                    )
                )
            else:
                pdus.append(
                    TsharkPdu(
                        num,
                        False,
                        vals.get("kafka.response_key"),
                        None,
                        vals["kafka.correlation_id"],
                        vals.get("kafka.request_frame"),
                        stream,
                    )
                )
        if num is not None:
            result[num] = pdus
    return result


def tcp_of(packet: ET.Element) -> tuple[int | None, int]:
    """TCP source port and tcp.stream index of a PDML packet."""
    got: dict[str, int] = {}
    for f in packet.iter("field"):
        name = f.get("name")
        if name in ("tcp.srcport", "tcp.stream") and name not in got:
            got[name] = int(f.get("show", "0"))
    return got.get("tcp.srcport"), got.get("tcp.stream", -1)


def tshark_pdus(pcap: Path | str, port: int) -> list[TsharkPdu]:
    """Every Kafka PDU tshark dissects in ``pcap`` with Kafka forced on ``port``."""
    fields: list[str] = []
    for name in FIELDS:
        fields += ["-e", name]
    args = [
        *base_args(pcap, port),
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=|",
        *fields,
    ]
    out = _run(args).decode()
    pdus: list[TsharkPdu] = []
    fallback: set[int] = set()
    slots: list[int | list[TsharkPdu]] = []
    for line in out.splitlines():
        row = (line.split("\t") + [""] * len(FIELDS))[: len(FIELDS)]
        got = _row_pdus(row, port)
        if got is None:
            fallback.add(int(row[0]))
            slots.append(int(row[0]))
        else:
            slots.append(got)
    redo = _pdml_pdus(pcap, port, fallback) if fallback else {}
    for slot in slots:
        pdus.extend(redo.get(slot, []) if isinstance(slot, int) else slot)
    return pdus
