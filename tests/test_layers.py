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
    "status",
    "mountpoint",
    "heap",
    "fuse_ops",
    "edits",
    "actions",
    "watch",
    "view",
    "kept",
    "layout",
    "handles",
    "onefile",
    "summary",
    "writer",
    "appender",
    "scratch",
    "errors",
    "sessions",
    "shelf",
    "disk",
    "heads",
    "files",
    "inotify",
    "render",
    "names",
    "tree",
    "jsonl",
    "model",
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
