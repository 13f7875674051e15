"""The decoded tree: every field knows where its bytes are.

A `Node` is one decoded item. `offset`/`length` locate it in `source` (0 = the
Kafka frame itself, other ids = a decompressed buffer registered in the
decode context), which is what the TUI hex view highlights.
"""

from __future__ import annotations

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
