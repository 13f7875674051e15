"""Request and response of one exchange as collapsible decoded trees. Each tree node knows the
bytes it came from (the frame or a decompressed record buffer); highlighting a node tells the
hex view to mark them. Children are built when a node is first expanded (records can be many)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from dissectors.context import DecodeContext
from dissectors.errors import error_name
from dissectors.jsonify import json_key
from dissectors.node import ARRAY, PRIM, RAW, RECORDS, Node
from dissectors.secrets import SECRET_BODIES, is_secret, redacted, withheld_spans
from kanalyze.bodies import BodyDecoder
from kanalyze.correlation import SASL_RAW_API, Exchange, Message
from kanalyze.tui.locate import Target, locate_any
from kanalyze.tui.messages import FieldHighlighted

MAX_CHILDREN = 2000  # beyond this an expanded array shows a "… N more" line


@dataclass(slots=True)
class Side:
    """One message of the exchange and the buffers its nodes point into."""

    label: str  # "request" / "response"
    frame: bytes  # pdu.data with secret bytes masked
    ctx: DecodeContext | None
    frame_no: int = 0  # the packet that completed the frame (pdu.last_pkt), as the table shows

    def buffer(self, source: int) -> tuple[bytes, str]:
        """The bytes a node points into and the hex view's title, which names the frame: the
        pane is then checkably about the exchange the table and the tree show."""
        if source == 0 or self.ctx is None:
            return self.frame, f"{self.label} frame {self.frame_no}"
        return (
            self.ctx.buffers[source - 1],
            f"{self.label} decompressed buffer #{source} (frame {self.frame_no})",
        )


@dataclass(slots=True)
class Ref:
    """What a tree node stands for: its bytes, and (for lazy children) the decoded node."""

    side: Side
    source: int
    offset: int
    length: int
    node: Node | None = None
    extra: dict | None = None  # record/batch values without their own offsets
    populated: bool = False


def json_value(v: object, limit: int = 80) -> str:
    """A value as the NDJSON spells it (null, true, "text"), cut at `limit` characters: the tree
    and `kanalyze export` read alike."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v if len(v) <= limit else v[:limit], ensure_ascii=False) + (
            "…" if len(v) > limit else ""
        )
    if isinstance(v, dict | list):
        s = json.dumps(v, ensure_ascii=False, default=str)
        return s if len(s) <= limit else s[:limit] + "…"
    return str(v)


def _value_text(node: Node, show_secrets: bool) -> str:
    v = node.value
    if is_secret(v) and not show_secrets:
        return redacted(v)  # type: ignore[arg-type]
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        return f"{len(b)} bytes {b[:16].hex()}" + ("…" if len(b) > 16 else "")
    return json_value(v)


def field_name(name: str) -> str:
    """The NDJSON key of a spec field name (HighWatermark -> high_watermark); array items as [i]."""
    return f"[{name}]" if name.isdigit() else json_key(name)[0]


def node_label(node: Node, show_secrets: bool = False) -> Text:
    name = field_name(node.name)
    kind = node.kind
    if kind == PRIM:
        text = Text.assemble((name, "bold"), ": ", _value_text(node, show_secrets))
        if json_key(node.name)[1] and isinstance(node.value, int):
            ename = error_name(node.value) or "?"
            text.append(f" ({ename})", "bold red" if node.value else "green")
    elif kind == ARRAY:
        n = "null" if node.children is None else str(len(node.children))
        text = Text.assemble((name, "bold"), f" [{n}]")
    elif kind == RECORDS:
        batches = node.value.get("batches") if isinstance(node.value, dict) else None
        desc = f"{len(batches)} batches" if batches is not None else f"{node.length} bytes"
        text = Text.assemble((name, "bold"), f": {desc}")
    elif kind == RAW:
        text = Text.assemble((name, "bold"), f": {node.length} raw bytes")
    elif isinstance(node.value, dict):
        text = Text.assemble((name, "bold"), " ", _dict_preview(node.value))
    else:
        text = Text.assemble((name, "bold"), _struct_preview(node))
    if node.diagnostics:
        text.append(
            "  ⚠ " + "; ".join(f"{d.code}: {d.message}" for d in node.diagnostics), "bold red"
        )
    return text


_PREVIEW_KEYS = ("base_offset", "offset", "codec", "producer_id", "base_sequence", "key", "value")


def _dict_preview(d: dict) -> str:
    parts = [f"{k}={json_value(d[k], 24)}" for k in _PREVIEW_KEYS if k in d]
    if "records" in d and isinstance(d["records"], list):
        parts.append(f"records={len(d['records'])}")
    return " ".join(parts)


def _struct_preview(node: Node) -> str:
    for c in node.children or ():
        if (
            c.kind == PRIM
            and c.name
            in ("Name", "Topic", "TopicName", "GroupId", "PartitionIndex", "Partition", "Index")
            and not isinstance(c.value, bytes)
        ):
            return f" {json_key(c.name)[0]}={json_value(c.value, 40)}"
    return ""


def hex_buffer(ex: Exchange, msg: Message, is_req: bool, node: Node | None) -> bytes:
    """What the hex pane shows of one side's frame (secrets masked)."""
    credentials = ex.api_key == SASL_RAW_API or (ex.api_key, is_req) in SECRET_BODIES
    body_at = msg.body_offset
    undecoded = node is None or node.kind == RAW
    if msg.diagnostics and (credentials or undecoded):  # a broken header: anything after it
        body_at = min(body_at, 8 if is_req and ex.api_key != SASL_RAW_API else 0)
        node = None
    return _mask_secrets(msg.pdu.data, node, body_at, credentials)


def _mask_secrets(data: bytes, node: Node | None, body_at: int, credentials: bool) -> bytes:
    """The frame with its secrets' bytes masked; a body that carries credentials and did not
    decode cleanly, or any body not decoded at all, is masked whole: where a secret sits in it
    is unknown."""
    whole = [(body_at, len(data) - body_at)]
    if node is None or node.kind == RAW:  # not decoded (unknown api, an unmatched response)
        spans = whole
    elif credentials:
        found = withheld_spans(node)
        spans = whole if found is None else found
    else:
        spans = [(n.offset, n.length) for n in node.walk() if n.source == 0 and is_secret(n.value)]
    if not spans:
        return data
    buf = bytearray(data)
    for off, length in spans:
        buf[off : off + length] = b"*" * min(length, max(0, len(buf) - off))
    return bytes(buf)


class DecodeTree(Tree[Ref]):
    """Decoded request and response of the selected exchange."""

    BINDINGS = [
        Binding("right,l", "expand_or_child", "Expand", show=False),
        Binding("left,h", "collapse_or_parent", "Collapse", show=False),
    ]

    def action_expand_or_child(self) -> None:
        node = self.cursor_node
        if node is None or not node.allow_expand:
            return
        if node.is_expanded:
            self.action_cursor_down()
        else:
            node.expand()

    def action_collapse_or_parent(self) -> None:
        node = self.cursor_node
        if node is None:
            return
        if node.allow_expand and node.is_expanded:
            node.collapse()
        elif node.parent is not None and node.parent is not self.root:
            self.move_cursor(node.parent)

    def __init__(self, **kwargs) -> None:
        super().__init__("no exchange selected", **kwargs)
        self.exchange: Exchange | None = None  # the exchange shown
        self.index: int | None = None  # its row in the store, when it came from one
        self.show_root = False
        self.guide_depth = 3
        self._bodies: dict[bool, TreeNode[Ref]] = {}  # is_request -> the body's tree node

    def show_exchange(
        self, ex: Exchange | None, bodies: BodyDecoder, index: int | None = None
    ) -> None:
        self.clear()
        self._bodies = {}
        self.exchange = ex
        self.index = None if ex is None else index
        self.root.set_label("exchange")
        if ex is None:
            return
        first: TreeNode[Ref] | None = None
        for msg, is_req in ((ex.request, True), (ex.response, False)):
            label = "request" if is_req else "response"
            if msg is None:
                self.root.add_leaf(Text(f"{label}: not captured", "dim"))
                continue
            node, ctx = bodies.node(ex, msg, is_req)
            show = bodies.template.show_secrets
            data = msg.pdu.data if show else hex_buffer(ex, msg, is_req, node)
            side = Side(label, data, ctx, msg.pdu.last_pkt)
            top = self._message_node(ex, msg, is_req, side, node)
            first = first or top
        if first is not None:
            # after clear() the cursor line may already equal the first line: Tree then posts no
            # NodeHighlighted, and the hex view would keep the previous exchange's bytes. Say it.
            self.move_cursor(first)
            self._announce(first)
        else:
            self.post_message(FieldHighlighted(b"", "no frame captured", 0, 0))

    def _message_node(
        self, ex: Exchange, msg: Message, is_req: bool, side: Side, body: Node | None
    ) -> TreeNode[Ref]:
        pdu = msg.pdu
        title = Text.assemble(
            (side.label.upper(), "bold"),
            f"  {ex.api or '?'} v{ex.api_version if ex.api_version is not None else '?'}"
            f"  frame {pdu.last_pkt}  {pdu.size + 4} B",
        )
        if pdu.missing:
            title.append(f"  ({pdu.missing} bytes lost in a gap)", "bold red")
        top = self.root.add(title, data=Ref(side, 0, 0, len(pdu.data), populated=True), expand=True)
        hdr = top.add(Text("header", "bold"), data=Ref(side, 0, 0, msg.body_offset, populated=True))
        for key, (off, length) in _header_spans(msg, is_req).items():
            hdr.add_leaf(
                Text.assemble((key, "bold"), f": {json_value(msg.header.get(key))}"),
                data=Ref(side, 0, off, length, populated=True),
            )
        for d in msg.diagnostics:
            top.add_leaf(
                Text(f"⚠ {d.code} at {d.offset}: {d.message}", "bold red"),
                data=Ref(side, 0, d.offset, 1, populated=True),
            )
        if body is None:
            top.add_leaf(
                Text("body: not decoded (unknown api or version)", "dim"),
                data=Ref(side, 0, msg.body_offset, len(pdu.data) - msg.body_offset, populated=True),
            )
        else:
            b = self._add(top, body, side)
            b.expand()
            self._populate(b)
            self._bodies[is_req] = b
        return top

    def reveal(
        self, target: Target, frame: int | None = None, names: Mapping[str, str] | None = None
    ) -> bool:
        """Select the field `target` names (a finding's, kanalyze/tui/locate.py): its branch
        expanded, the cursor on it, the hex pane on its bytes. The side carried by `frame` is
        searched first. False when neither side has it (the selection stays)."""
        sides = [True, False]
        resp = self._bodies.get(False)
        if (
            frame is not None
            and resp is not None
            and resp.data
            and resp.data.side.frame_no == frame
        ):
            sides.reverse()
        shown = [t for t in (self._bodies.get(s) for s in sides) if t and t.data and t.data.node]
        found = locate_any([t.data.node for t in shown], target, names)  # type: ignore[union-attr]
        if found is None:
            return False
        self._select_path(shown[found[0]], found[1])
        return True

    def _select_path(self, tnode: TreeNode[Ref], path: list[Node]) -> None:
        """Expand from `tnode` (whose node is path[0]) down the path; select the deepest."""
        for node in path[1:]:
            self._populate(tnode)
            tnode.expand()
            nxt = next(
                (c for c in tnode.children if c.data is not None and c.data.node is node), None
            )
            if nxt is None:  # beyond MAX_CHILDREN: the nearest shown ancestor
                break
            tnode = nxt
        _ = self.last_line  # lay the expanded lines out: the node's line is known after this
        self.move_cursor(tnode)
        self.scroll_to_node(tnode, animate=False)
        self._announce(tnode)

    def _add(self, parent: TreeNode[Ref], node: Node, side: Side) -> TreeNode[Ref]:
        has_kids = bool(node.children) or isinstance(node.value, dict) or bool(node.diagnostics)
        label = node_label(node, bool(side.ctx and side.ctx.show_secrets))
        ref = Ref(side, node.source, node.offset, node.length, node=node)
        if has_kids:
            return parent.add(label, data=ref)
        ref.populated = True
        return parent.add_leaf(label, data=ref)

    def _populate(self, tnode: TreeNode[Ref]) -> None:
        ref = tnode.data
        if ref is None or ref.populated:
            return
        ref.populated = True
        node = ref.node
        if node is None:
            return
        for d in node.diagnostics:
            tnode.add_leaf(
                Text(f"⚠ {d.code} at {d.offset}: {d.message}", "bold red"),
                data=Ref(ref.side, node.source, d.offset, 1, populated=True),
            )
        kids = node.children or []
        for c in kids[:MAX_CHILDREN]:
            self._add(tnode, c, ref.side)
        if len(kids) > MAX_CHILDREN:
            tnode.add_leaf(Text(f"… {len(kids) - MAX_CHILDREN} more", "dim"))
        if not kids and isinstance(node.value, dict):
            for k, v in node.value.items():
                if k == "records" and isinstance(v, list):
                    continue
                tnode.add_leaf(
                    Text.assemble((k, "bold"), f": {_short(v)}"),
                    data=Ref(ref.side, node.source, node.offset, node.length, populated=True),
                )

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Ref]) -> None:
        self._populate(event.node)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Ref]) -> None:
        self._announce(event.node)

    def _announce(self, tnode: TreeNode[Ref]) -> None:
        """Tell the hex view about `tnode`, unless it belongs to a tree since cleared (a late
        highlight of the previous exchange must not overwrite the current one's bytes)."""
        ref = tnode.data
        if ref is None:
            return
        top = tnode
        while top.parent is not None:
            top = top.parent
        if top is not self.root:
            return
        data, title = ref.side.buffer(ref.source)
        self.post_message(FieldHighlighted(data, title, ref.offset, ref.length))


def _short(v: object) -> str:
    return json_value(v, 100)


def _header_spans(msg: Message, is_req: bool) -> dict[str, tuple[int, int]]:
    if not is_req:
        return {"correlation_id": (0, 4)} if "correlation_id" in msg.header else {}
    spans = {"request_api_key": (0, 2), "request_api_version": (2, 2), "correlation_id": (4, 4)}
    if "client_id" in msg.header:
        spans["client_id"] = (8, max(2, msg.body_offset - 8))
    if "tagged_fields" in msg.header:
        spans["tagged_fields"] = (8, max(1, msg.body_offset - 8))
    return {k: v for k, v in spans.items() if k in msg.header}
