"""The filter bar's little query language, parsed once and applied row by row.

Terms compose with AND:

    api:Produce   api:0      request api name (prefix, any case) or key
    topic:orders             substring of the topic/partition summary (decodes bodies)
    client:web               substring of the client id or the client address
    conn:3                   connection id
    status:no_response       exact status (ok, no_response, request_missing)
    errors                   non-ok status or any error code in the response (decodes bodies)
    lat>5  latency>5         latency above N ms
    anything else            free text: substring of api, client id, addresses, correlation id, topics
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kanalyze.correlation import Exchange
    from kanalyze.tui.rows import Row


class FilterError(ValueError):
    pass


@dataclass(slots=True)
class Filter:
    text: str = ""
    apis: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    conns: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    errors_only: bool = False
    min_latency_ms: float | None = None
    words: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.apis
            or self.topics
            or self.clients
            or self.conns
            or self.statuses
            or self.errors_only
            or self.min_latency_ms is not None
            or self.words
        )

    @property
    def needs_summary(self) -> bool:
        """Whether matching needs decoded bodies (topics or error codes)."""
        return bool(self.topics or self.errors_only or self.words)

    def with_conn(self, conn: int | None) -> Filter:
        out = parse_filter(self.text)
        out.conns = [] if conn is None else [conn]
        return out

    def match(self, ex: Exchange | Row, summary: tuple[str, tuple[str, ...]] | None) -> bool:  # noqa: C901 - one test per term
        """The definition of a match; the store checks header terms on its columns
        (kanalyze/tui/rowfilter.py) and this on the rows they keep, when bodies matter."""
        if self.conns and ex.conn.id not in self.conns:
            return False
        if self.apis:
            name = (ex.api or "").lower()
            if not any(name.startswith(a) or a == str(ex.api_key) for a in self.apis):
                return False
        if self.statuses and ex.status not in self.statuses:
            return False
        if self.min_latency_ms is not None:
            lat = ex.latency_ns
            if lat is None or lat / 1e6 <= self.min_latency_ms:
                return False
        if self.clients:
            cid = (ex.client_id or "").lower()
            addr = ex.conn.client.lower()
            if not any(c in cid or c in addr for c in self.clients):
                return False
        topics, errors = summary if summary is not None else ("", ())
        if self.errors_only and ex.status == "ok" and not errors:
            return False
        if self.topics:
            tl = topics.lower()
            if not any(t in tl for t in self.topics):
                return False
        if self.words:
            hay = " ".join(
                (
                    ex.api or "",
                    ex.client_id or "",
                    ex.conn.client,
                    ex.conn.broker,
                    str(ex.correlation_id),
                    ex.status,
                    topics,
                    *errors,
                )
            ).lower()
            if not all(w in hay for w in self.words):
                return False
        return True


_STATUSES = ("ok", "no_response", "request_missing")
_KEYS = ("api", "topic", "client", "conn", "status")
_OPERATORS = ("not", "and", "or", "&&", "||", "!")


def parse_filter(text: str) -> Filter:
    """Parse the filter bar's text; raises FilterError with a readable message. What this little
    language cannot say is an error, never free text: `lat<1`, `not api:Fetch`, `frame:57`
    would otherwise silently match nothing (or everything)."""
    f = Filter(text=text)
    for raw in text.split():
        tok = raw.lower()
        key, sep, val = tok.partition(":")
        if tok in ("errors", "error", "err", "errors:only"):
            f.errors_only = True
        elif tok.startswith(("lat>", "latency>")):
            num = tok.split(">", 1)[1]
            try:
                f.min_latency_ms = float(num)
            except ValueError:
                raise FilterError(f"latency needs a number of ms: {raw!r}") from None
            if f.min_latency_ms != f.min_latency_ms or f.min_latency_ms < 0:  # nan, negative
                raise FilterError(f"latency needs a number of ms >= 0: {raw!r}")
        elif tok in _OPERATORS or tok.startswith("!"):
            raise FilterError(f"{raw!r}: no operators here, terms combine with AND")
        elif any(c in tok for c in "<>="):
            raise FilterError(f"{raw!r}: the only comparison is lat>N (ms)")
        elif sep and key.isidentifier() and key not in _KEYS:  # 10.0.0.1:9092 is free text
            raise FilterError(
                f"unknown term {key}: (terms: {', '.join(k + ':' for k in _KEYS)}"
                " errors, lat>N, words)"
            )
        elif sep and key in _KEYS:
            if not val:
                raise FilterError(f"{key}: needs a value")
            if key == "api":
                f.apis.append(val)
            elif key == "topic":
                f.topics.append(val)
            elif key == "client":
                f.clients.append(val)
            elif key == "conn":
                try:
                    f.conns.append(int(val))
                except ValueError:
                    raise FilterError(f"conn: needs a connection number: {raw!r}") from None
            else:
                if val not in _STATUSES:
                    raise FilterError(f"status is one of {', '.join(_STATUSES)}")
                f.statuses.append(val)
        else:
            f.words.append(tok)
    return f


def parse_any(text: str, env: object = None) -> Filter | object:
    """The bar's text as the bar's own terms (`api:Produce lat>5`, checked on the row columns,
    fast) or else as the query language of `-Y` (docs/filters.md: `api == "Fetch" and
    latency > 100ms`, matched on rebuilt exchanges). FilterError with the more telling of the
    two messages when neither reads it (the bar's for `key:value` text, else the language's,
    with its column)."""
    try:
        return parse_filter(text)
    except FilterError as own:
        from kanalyze.query import try_compile

        q = try_compile(text, env)  # type: ignore[arg-type]
        if not isinstance(q, ValueError):
            return q
        if ":" in text:
            raise
        raise FilterError(f"{q} (column {q.column})") from own
