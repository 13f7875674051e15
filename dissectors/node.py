"""The decoded tree: every field knows where its bytes are.

A `Node` is one decoded item. `offset`/`length` locate it in `source` (0 = the
Kafka frame itself, other ids = a decompressed buffer registered in the
decode context), which is what the TUI hex view highlights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dissectors.diagnostics import Diagnostic

# kinds of node
PRIM = "prim"  # value is int/str/bool/float/None/bytes
STRUCT = "struct"  # children are named fields
ARRAY = "array"  # children are elements (name = index as str); None value = null array
RAW = "raw"  # undecoded bytes (unknown tag, unsupported version, ...)
RECORDS = "records"  # value is the JSON-ready records structure (see dissectors.records)


@dataclass(slots=True)
class Node:
    name: str
    kind: str
    offset: int
    length: int
    value: Any = None
    children: list[Node] | None = None
    source: int = 0
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def child(self, name: str) -> Node | None:
        """The direct child named `name`, if present."""
        for c in self.children or ():
            if c.name == name:
                return c
        return None

    def walk(self):
        """This node and every descendant, depth first."""
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            if n.children:
                stack.extend(reversed(n.children))


_CHILDREN = Node.__dict__["children"]  # the slot behind Node.children


class LazyNode(Node):
    """A Node whose children are built on first access to `children`.

    The record nodes of a batch are built this way: the NDJSON export never looks at them
    (the records are in the batch's value), the TUI and every other reader of `children`
    gets the same list it always got. `pending` is the zero-argument builder until then
    (None after); a builder may offer `child_diagnostics()`, the (source, diagnostics) of
    each child in order, so the diagnostics can be gathered without building the nodes.
    Copies and pickles are plain Nodes.
    """

    __slots__ = ("pending",)
    pending: Callable[[], list[Node]] | None

    @property
    def children(self) -> list[Node] | None:
        build = self.pending
        if build is not None:
            self.pending = None
            _CHILDREN.__set__(self, build())
        return _CHILDREN.__get__(self, Node)

    @children.setter
    def children(self, value: list[Node] | None) -> None:
        self.pending = None
        _CHILDREN.__set__(self, value)

    def __repr__(self) -> str:
        return "Node" + Node.__repr__(self)[len("LazyNode") :]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return _fields(self) == _fields(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (
            Node,
            _fields(self),
        )


def _fields(n: Node) -> tuple:
    return (n.name, n.kind, n.offset, n.length, n.value, n.children, n.source, n.diagnostics)
