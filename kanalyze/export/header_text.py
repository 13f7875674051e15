"""The header-only NDJSON line of an exchange, written as text directly.

The indexing path (`export --header-only`, the TUI's index) writes one such line per exchange
and nothing else, so its cost per exchange is most of that path's output cost: built here
from f-strings (about 5x `dumps` of the exchange's dict), in a module of its own so that the
optional build compiles it (dissectors/native.py). The text equals what
`ExchangeEncoder.encode` gives with bodies off, encoded by `kanalyze.jsontext.dumps`
(`test_fast_header_only_lines_equal_the_generic_encoding`, in
tests/functional/test_real_captures.py).
"""

from __future__ import annotations

from kanalyze.correlation import Exchange, Message
from kanalyze.jsontext import dumps, ts_text

SCHEMA_VERSION = "kanalyze.exchange/1"
HEADER_KEYS = ("request_api_key", "request_api_version", "correlation_id", "client_id")
CACHED = 10_000  # texts kept per cache: live runs see endless connections and client ids


class HeaderText:
    """Header-only lines, with the texts that repeat (connections, api names, client ids)
    spelled once."""

    def __init__(self) -> None:
        self.conns: dict[int, str] = {}
        self.strs: dict[str | None, str] = {}
        self.apis: dict[int | None, str] = {}

    def line(self, ex: Exchange) -> str:
        conn, api_key, api_version, corr, client_id, status, req, resp, acks, inferred = ex
        out = self.conns.get(conn.id)
        if out is None:
            if len(self.conns) >= CACHED:
                self.conns.clear()
            out = dumps({"id": conn.id, "client": conn.client, "broker": conn.broker})
            self.conns[conn.id] = out
        # the text of ex.latency_ns (a request and a response in time order) and ex.api
        if req is not None and resp is not None and resp.pdu.last_ts >= req.pdu.last_ts:
            latency = repr(round((resp.pdu.last_ts - req.pdu.last_ts) / 1e6, 3))
        else:
            latency = "null"
        api = self.apis.get(api_key)
        if api is None:
            api = dumps(ex.api)  # a few dozen keys at most
            self.apis[api_key] = api
        cid = self.text(client_id)
        tail = "" if acks is None else f',"acks":{acks}'
        if inferred is not None:
            tail += f',"inferred":{dumps(inferred)}'
        return (
            f'{{"schema":"{SCHEMA_VERSION}","connection":{out},'
            f'"api_key":{"null" if api_key is None else api_key},"api":{api},'
            f'"api_version":{"null" if api_version is None else api_version},'
            f'"correlation_id":{"null" if corr is None else corr},"client_id":{cid},'
            f'"status":"{status}","latency_ms":{latency},'
            f'"request":{self.message(req)},"response":{self.message(resp)}{tail}}}'
        )

    def text(self, value: str | None) -> str:
        """`dumps(value)` of a client id (or any str), cached."""
        out = self.strs.get(value)
        if out is None:
            out = dumps(value)
            if len(self.strs) < CACHED:
                self.strs[value] = out
        return out

    def message(self, msg: Message | None) -> str:
        if msg is None:
            return "null"
        pdu = msg.pdu
        h = msg.header
        n = len(h)
        if n == 4 and tuple(h) == HEADER_KEYS:
            cid = h["client_id"]
            ctext = self.text(cid) if cid is None or isinstance(cid, str) else dumps(cid)
            header = (
                f'{{"request_api_key":{h["request_api_key"]},'
                f'"request_api_version":{h["request_api_version"]},'
                f'"correlation_id":{h["correlation_id"]},'
                f'"client_id":{ctext}}}'
            )
        elif n == 1 and "correlation_id" in h:
            header = f'{{"correlation_id":{h["correlation_id"]}}}'
        else:
            header = dumps(h)
        diags = dumps([d.to_json() for d in msg.diagnostics]) if msg.diagnostics else "[]"
        return (
            f'{{"frame":{pdu.last_pkt},"first_frame":{pdu.first_pkt},'
            f'"ts":{ts_text(pdu.last_ts)},"size":{pdu.size + 4},"header":{header},'
            f'"body":null,"diagnostics":{diags}}}'
        )
