"""A filter checked on the row columns: header terms (api, conn, status, latency, client) by
`header_matcher`, the terms that need a row's summary (errors, topic, free text) by
`summary_matcher`.

`Filter.match` defines what matches; this is the same test over `RowTable` arrays without
building a row object, so a filter over a million rows stays quick. Per distinct api key, client
id and connection the header answer is computed once (there are few of each).
"""

from __future__ import annotations

from collections.abc import Callable

from kanalyze.correlation import OK
from kanalyze.tui.filters import Filter
from kanalyze.tui.rows import NONE32, NONE64, STATUS_CODES, STATUSES, RowTable, api_name

Summary = tuple[str, tuple[str, ...]]


def header_matcher(flt: Filter, rows: RowTable) -> Callable[[int], bool]:
    """`i -> bool`: whether row i passes the header terms of `flt` (all of them, AND)."""
    conn, api, status, lat, client = rows.conn, rows.api, rows.status, rows.lat, rows.client
    conns = set(flt.conns) if flt.conns else None
    statuses = {STATUS_CODES[s] for s in flt.statuses} if flt.statuses else None
    min_ms = flt.min_latency_ms
    apis = flt.apis
    clients = flt.clients
    api_ok: dict[int, bool] = {}
    cid_ok: dict[int, bool] = {}
    addr_ok: dict[int, bool] = {}

    def api_matches(k: int) -> bool:
        key = None if k == NONE32 else k
        name = (api_name(key) or "").lower()
        return any(name.startswith(a) or a == str(key) for a in apis)

    def cid_matches(k: int) -> bool:
        cid = "" if k < 0 else rows.client_ids[k].lower()
        return any(c in cid for c in clients)

    def addr_matches(conn_id: int) -> bool:
        addr = rows.conns[conn_id].client.lower()
        return any(c in addr for c in clients)

    def match(i: int) -> bool:  # noqa: C901 - one test per term, cheapest first
        if conns is not None and conn[i] not in conns:
            return False
        if apis:
            k = api[i]
            ok = api_ok.get(k)
            if ok is None:
                ok = api_ok[k] = api_matches(k)
            if not ok:
                return False
        if statuses is not None and status[i] not in statuses:
            return False
        if min_ms is not None:
            v = lat[i]
            if v == NONE64 or v / 1e6 <= min_ms:
                return False
        if clients:
            k = client[i]
            ok = cid_ok.get(k)
            if ok is None:
                ok = cid_ok[k] = cid_matches(k)
            if not ok:
                c = conn[i]
                ok = addr_ok.get(c)
                if ok is None:
                    ok = addr_ok[c] = addr_matches(c)
                if not ok:
                    return False
        return True

    return match


def summary_matcher(flt: Filter, rows: RowTable) -> Callable[[int, Summary], bool]:
    """`(i, summary) -> bool`: whether row i passes the terms of `flt` that need its summary
    (errors, topic, free text); the header terms are `header_matcher`'s."""
    status = rows.status
    ok = STATUS_CODES[OK]
    errors_only, topics, words = flt.errors_only, flt.topics, flt.words

    def haystack(i: int, topic_text: str, errors: tuple[str, ...]) -> str:
        c = rows.conns[rows.conn[i]]
        return " ".join(
            (
                api_name(rows.api_key(i)) or "",
                rows.client_id(i) or "",
                c.client,
                c.broker,
                str(rows.correlation_id(i)),
                STATUSES[status[i]],
                topic_text,
                *errors,
            )
        ).lower()

    def match(i: int, summary: Summary) -> bool:
        topic_text, errors = summary
        if errors_only and status[i] == ok and not errors:
            return False
        if topics:
            tl = topic_text.lower()
            if not any(t in tl for t in topics):
                return False
        if words:
            hay = haystack(i, topic_text, errors)
            if not all(w in hay for w in words):
                return False
        return True

    return match
