"""The per-row fields the exchanges table shows, filters and sorts on, in flat arrays.

One Python `Exchange` with its messages, frames and header dicts costs about 1.5 KB; the same
fields as machine integers in `array`s cost about 80 bytes a row, and repeated strings (client
ids) are stored once. `Row` is a light view of one row, built on demand for the visible lines;
it has the attribute names of `Exchange`, so the filter language applies to both.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from dissectors.apis import API_NAMES
from kanalyze.correlation import (
    NO_RESPONSE,
    OK,
    REQUEST_MISSING,
    SASL_RAW_API,
    SASL_RAW_NAME,
    ConnInfo,
    Exchange,
)

STATUSES = (OK, NO_RESPONSE, REQUEST_MISSING)
STATUS_CODES = {s: i for i, s in enumerate(STATUSES)}
NONE32 = -(2**31)  # "None" in the 'i' columns (api key, version, acks: int16 on the wire)
NONE64 = -(2**63)  # "None" in the 'q' columns (correlation id: int32 on the wire, latency)
NO_MESSAGE = -1  # no request / response in the spill-offset columns


def api_name(api_key: int | None) -> str | None:
    """`Exchange.api` for a bare api key."""
    if api_key == SASL_RAW_API:
        return SASL_RAW_NAME
    return API_NAMES.get(api_key) if api_key is not None else None


@dataclass(slots=True, frozen=True)
class Row:
    """One row's header fields (what `Exchange` offers without its messages)."""

    index: int
    conn: ConnInfo
    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    status: str
    start_ts: int
    latency_ns: int | None
    acks: int | None
    size: int  # request and response frames, size prefixes excluded
    inferred: dict[str, object] | None = None  # an orphan response's inferred api (rare: sparse)

    @property
    def api(self) -> str | None:
        return api_name(self.api_key)


class RowTable:
    """Columns of every row; `append` is called under the store's lock, reads need none (an
    index below the published length never changes)."""

    def __init__(self) -> None:
        self.ts = array("q")  # start_ts
        self.lat = array("q")  # latency_ns or NONE64
        self.size = array("q")
        self.conn = array("i")  # connection id
        self.api = array("i")  # api key or NONE32
        self.ver = array("i")  # api version or NONE32
        self.corr = array("q")  # correlation id or NONE64
        self.client = array("i")  # index into `client_ids`, -1 for None
        self.status = array("b")  # index into STATUSES
        self.acks = array("i")  # acks or NONE32
        self.req = array("q")  # spill offset of the request frame or NO_MESSAGE
        self.resp = array("q")  # spill offset of the response frame or NO_MESSAGE
        self.req_body = array("i")  # where the request body starts in its frame (0: none)
        self.resp_body = array("i")  # where the response body starts in its frame
        self.conns: dict[int, ConnInfo] = {}
        self.inferred: dict[int, dict[str, object]] = {}  # row index -> Exchange.inferred (rare)
        self.client_ids: list[str] = []
        self._client_index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ts)

    def append(self, ex: Exchange, req_off: int, resp_off: int) -> None:
        """One row (written out flat: this runs once per exchange while indexing)."""
        c = ex.conn
        conn_id = c.id
        if conn_id not in self.conns:
            self.conns[conn_id] = c
        cid = ex.client_id
        if cid is None:
            ci = -1
        else:
            ci = self._client_index.get(cid, -1)
            if ci < 0:
                ci = self._client_index[cid] = len(self.client_ids)
                self.client_ids.append(cid)
        req, resp = ex.request, ex.response
        size = 0
        ts = lat = NONE64
        if resp is not None:
            rp = resp.pdu
            ts, size = rp.last_ts, rp.size
            self.resp_body.append(resp.body_offset)
        else:
            self.resp_body.append(0)
        if req is not None:
            qp = req.pdu
            if resp is not None and ts >= qp.last_ts:  # as Exchange.latency_ns: never negative
                lat = ts - qp.last_ts
            ts = qp.last_ts
            size += qp.size
            self.req_body.append(req.body_offset)
        else:
            self.req_body.append(0)
        k, v, corr, acks = ex.api_key, ex.api_version, ex.correlation_id, ex.acks
        if ex.inferred is not None:
            self.inferred[len(self.ts)] = ex.inferred
        self.ts.append(0 if ts == NONE64 else ts)
        self.lat.append(lat)
        self.size.append(size)
        self.conn.append(conn_id)
        self.api.append(NONE32 if k is None else k)
        self.ver.append(NONE32 if v is None else v)
        self.corr.append(NONE64 if corr is None else corr)
        self.client.append(ci)
        self.status.append(STATUS_CODES[ex.status])
        self.acks.append(NONE32 if acks is None else acks)
        self.req.append(req_off)
        self.resp.append(resp_off)

    def api_key(self, i: int) -> int | None:
        k = self.api[i]
        return None if k == NONE32 else k

    def api_version(self, i: int) -> int | None:
        v = self.ver[i]
        return None if v == NONE32 else v

    def latency(self, i: int) -> int | None:
        v = self.lat[i]
        return None if v == NONE64 else v

    def correlation_id(self, i: int) -> int | None:
        v = self.corr[i]
        return None if v == NONE64 else v

    def client_id(self, i: int) -> str | None:
        k = self.client[i]
        return None if k < 0 else self.client_ids[k]

    def row(self, i: int) -> Row:
        acks = self.acks[i]
        return Row(
            i,
            self.conns[self.conn[i]],
            self.api_key(i),
            self.api_version(i),
            self.correlation_id(i),
            self.client_id(i),
            STATUSES[self.status[i]],
            self.ts[i],
            self.latency(i),
            None if acks == NONE32 else acks,
            self.size[i],
            self.inferred.get(i),
        )

    def nbytes(self) -> int:
        """Bytes held by the columns (allocated length, not capacity)."""
        cols = (
            self.ts,
            self.lat,
            self.size,
            self.conn,
            self.api,
            self.ver,
            self.corr,
            self.client,
            self.status,
            self.acks,
            self.req,
            self.resp,
            self.req_body,
            self.resp_body,
        )
        return sum(len(a) * a.itemsize for a in cols)
