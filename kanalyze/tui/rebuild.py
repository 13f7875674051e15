"""An `Exchange` made again from its row and its spilled frames, equal to the one indexed.

A message's header dict and body offset are a function of its frame and the exchange's api,
version and status (the correlator parses them the same way), so only frames are spilled; the
diagnostics the correlator added (gaps, duplicate ids, pending limit) are kept aside, for the
few messages that have any.
"""

from __future__ import annotations

from collections.abc import Sequence

from dissectors.diagnostics import Diagnostic
from kanalyze.correlation import SASL_RAW_API, Exchange, Message
from kanalyze.framing import Pdu
from kanalyze.headers import read_request_header, read_response_header
from kanalyze.tui.rows import Row


def request_message(pdu: Pdu, api_key: int | None, diags: Sequence[Diagnostic] | None) -> Message:
    header: dict[str, object] = {}
    at = 0
    if api_key != SASL_RAW_API:  # raw SASL tokens have no header
        parsed = read_request_header(pdu.data)
        if parsed is not None:
            header, at = parsed.fields, parsed.body_offset
    return Message(pdu, header, at, list(diags or ()), done=True)


def response_message(
    pdu: Pdu,
    api_key: int | None,
    api_version: int | None,
    status: str,
    diags: Sequence[Diagnostic] | None,
) -> Message:
    data = pdu.data
    header: dict[str, object] = {}
    at = 0
    if api_key == SASL_RAW_API:
        pass
    elif api_key is None or api_version is None:  # a request_missing whose api was not inferred
        if len(data) < 4:
            at = len(data)
        else:
            header, at = {"correlation_id": int.from_bytes(data[0:4], "big", signed=True)}, 4
    else:
        parsed_response = read_response_header(data, api_key, api_version)
        header, at = parsed_response.fields, parsed_response.body_offset
    return Message(pdu, header, at, list(diags or ()))


def exchange(
    row: Row,
    req: Pdu | None,
    resp: Pdu | None,
    req_diags: Sequence[Diagnostic] | None,
    resp_diags: Sequence[Diagnostic] | None,
) -> Exchange:
    return Exchange(
        row.conn,
        row.api_key,
        row.api_version,
        row.correlation_id,
        row.client_id,
        row.status,
        None if req is None else request_message(req, row.api_key, req_diags),
        None
        if resp is None
        else response_message(resp, row.api_key, row.api_version, row.status, resp_diags),
        row.acks,
        row.inferred,
    )
