"""Each idea in one place: only `kanalyze.export` imports the NDJSON encoder module, and the
code that learns topic names from topic ids exists once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("kanalyze", "dissectors", "tests", "benchmarks", "fuzz", "tools")
# modules another branch owns that still import it; each must really still do so (so the
# entry is dropped when it is fixed)
PENDING: set[str] = set()  # modules still importing kanalyze.export.ndjson (none left)


def _modules() -> list[tuple[str, ast.Module]]:
    paths = [p for top in SOURCES for p in sorted((ROOT / top).rglob("*.py"))]
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(), str(p))) for p in paths]


_BY_NAME = ("importorskip", "import_module", "__import__")


def _imports_ndjson(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "kanalyze.export.ndjson":
                return True
            if node.module == "kanalyze.export" and any(a.name == "ndjson" for a in node.names):
                return True
        elif isinstance(node, ast.Import):
            if any(a.name == "kanalyze.export.ndjson" for a in node.names):
                return True
        elif isinstance(node, ast.Call) and _name(node.func) in _BY_NAME and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and arg.value == "kanalyze.export.ndjson":
                return True
    return False


def test_only_the_export_package_imports_the_ndjson_module() -> None:
    offenders = {
        path
        for path, tree in _modules()
        if _imports_ndjson(tree) and not path.startswith("kanalyze/export/")
    }
    assert offenders - PENDING == set()
    assert offenders >= PENDING, "fixed: drop it from PENDING"


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def test_topic_id_names_are_learned_in_one_place() -> None:
    """A topic-id → name mapping is written in two places of the program: the dissectors'
    hook for Metadata, CreateTopics and DescribeTopicPartitions responses, and `TopicNames`
    (`learn` for every other source: --topic-ids, record-batch links, KRaft records; `replay`
    of what a `--jobs` range's decode taught, `restore` for a run redone); every consumer
    shares it through `kanalyze.bodies.TopicNames`."""
    writes = []
    for path, tree in _modules():
        if not path.startswith(("kanalyze/", "dissectors/")):
            continue
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.Call) and _name(node.func) in ("setdefault", "update"):
                targets = [node.func.value] if isinstance(node.func, ast.Attribute) else []
            for t in targets:
                base = (
                    t.value
                    if isinstance(t, ast.Subscript)
                    else (t if isinstance(node, ast.Call) else None)
                )
                if base is not None and _name(base) in ("topic_names", "topic_ids", "mapping"):
                    writes.append(f"{path}:{node.lineno}")
    files = sorted(w.split(":")[0] for w in writes)
    assert files == ["dissectors/embedded.py", *["kanalyze/bodies/names.py"] * 3], writes
    # and the list of responses that teach names is written once
    teaching = [
        path
        for path, tree in _modules()
        if path.startswith(("kanalyze/", "dissectors/"))
        and any(
            isinstance(n, ast.Name) and n.id == "NAME_SOURCES" and isinstance(n.ctx, ast.Store)
            for n in ast.walk(tree)
        )
    ]
    assert teaching == ["kanalyze/bodies/names.py"]
