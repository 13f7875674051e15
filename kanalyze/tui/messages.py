"""Messages between the workers, the app and its screens."""

from __future__ import annotations

from textual.message import Message


class IndexProgress(Message):
    """The indexer added exchanges (or finished: `done`)."""

    def __init__(self, count: int, done: bool = False) -> None:
        super().__init__()
        self.count = count
        self.done = done


class AnalysisReady(Message):
    """The report document (docs/report.schema.json) for the exchanges indexed so far."""

    def __init__(self, report: dict) -> None:
        super().__init__()
        self.report = report


class ExchangeSelected(Message):
    """The table's cursor rests on exchange `index` (into the store), or None."""

    def __init__(self, index: int | None) -> None:
        super().__init__()
        self.index = index


class FieldHighlighted(Message):
    """A decoded field was highlighted: show bytes [offset, offset+length) of a buffer."""

    def __init__(self, data: bytes, title: str, offset: int, length: int) -> None:
        super().__init__()
        self.data = data
        self.title = title
        self.offset = offset
        self.length = length
