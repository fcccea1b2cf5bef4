"""Imports point down (ARCHITECTURE.md): the core never imports pyfuse3 or trio.

Needs nothing but the source files.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "pisessfs"
# Each module may import only modules after it in this list.
ORDER = [
    "manpage",
    "cli",
    "unit",
    "mount",
    "watchdog",
    "collector",
    "status",
    "warmup",
    "mountpoint",
    "worker",
    "workers",
    "fuse_ops",
    "reads",
    "saves",
    "invalidator",
    "edits",
    "renames",
    "actions",
    "watch",
    "view",
    "changes",
    "carry",
    "keeping",
    "layout",
    "finds",
    "nodekind",
    "wholes",
    "texts",
    "handles",
    "onefile",
    "summary",
    "writer",
    "appender",
    "scratch",
    "inodes",
    "errors",
    "sessions",
    "newest",
    "naming",
    "kept",
    "loaded",
    "sums",
    "usage",
    "search",
    "store",
    "database",
    "heads",
    "files",
    "heap",
    "inotify",
    "render",
    "names",
    "tree",
    "jsonl",
    "model",
    "kind",
]
CORE = ORDER[ORDER.index("edits") :]  # free of pyfuse3 and trio


def imports(module: str) -> set[str]:
    """What ``module`` imports when it runs: imports under ``if TYPE_CHECKING:`` only name
    types (layout's node kinds are handed the view that calls them)."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out |= {a.name for a in node.names} if not node.module else {node.module}
            elif node.module:
                out.add(node.module.split(".")[0])
    return out


def test_every_module_is_placed_in_the_layering() -> None:
    assert sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__") == sorted(ORDER)


def test_imports_point_down() -> None:
    for i, module in enumerate(ORDER):
        above = set(ORDER[: i + 1])
        bad = imports(module) & above - {module}
        assert not bad, f"{module} imports {bad}, which sit above it"


def test_core_is_free_of_fuse_and_trio() -> None:
    for module in CORE:
        assert not imports(module) & {"pyfuse3", "trio"}, module


def _kind_strings(tree: ast.AST, kinds: set[str]) -> list[int]:
    """Lines where a kind is spelled as a string: compared with a ``kind``, given as a
    ``Key``'s kind or as ``kind=``."""

    def strings(node: ast.AST) -> list[ast.Constant]:
        elts = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return [e for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]

    def is_kind(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
            isinstance(node, ast.Name) and node.id == "kind"
        )

    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(is_kind, sides)):
                found += [c for side in sides for c in strings(side)]
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
            if name in ("Key", "known_of") and node.args:
                found += strings(node.args[0])
            found += [c for kw in node.keywords if kw.arg == "kind" for c in strings(kw.value)]
    return [c.lineno for c in found if c.value in kinds]


def test_a_kind_is_named_only_through_its_enum() -> None:
    """A node's kind is a ``Kind``, never a string (a typo in one was an ENOENT): no module
    of the package compares a kind with a string or makes a key of one."""
    from pisessfs.kind import Kind

    kinds = {k.value for k in Kind}
    bad = {
        p.name: lines
        for p in sorted(PKG.glob("*.py"))
        if (lines := _kind_strings(ast.parse(p.read_text()), kinds))
    }
    assert bad == {}
    assert _kind_strings(ast.parse('if key.kind == "edir": Key("msg")'), kinds) == [1, 1]


def test_no_class_over_400_lines_and_no_module_over_900() -> None:
    """What one person can hold (the issue "One store, one place per kind"): a class that
    grows past 400 lines, or a module past 900, has taken on a second job; split it where
    the jobs part, as View's parts were."""
    too_big = []
    for path in sorted(PKG.glob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 900:
            too_big.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > 400:
                    too_big.append(f"{path.name}: class {node.name}, {size} lines")
    assert too_big == []
