"""What the mount shows, checked against the real Pi ``SessionManager`` (tests/pi/oracle.mjs).

Needs a real mount (/dev/fuse) and node with the pinned Pi package (``npm ci``); skips
loudly without them, fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pisessfs.model import CONVERSATION_TYPES
from pisessfs.names import id_name
from tests.conftest import Mount, mounted, pi
from tests.test_disk import finished
from tests.test_workers import DONE, wait_done

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

Oracle = dict[str, Any]


def files_in(folder: Path) -> list[Path]:
    """The numbered message files of a leaf or node folder, in order (images left out)."""
    return sorted(p for p in folder.iterdir() if p.name.endswith(".md"))


def ids_in(folder: Path) -> list[str]:
    return [os.getxattr(p, "user.pi.id").decode() for p in files_in(folder)]


def conversation(oracle: Oracle, branch: list[str]) -> list[str]:
    types = {e["id"]: e["type"] for e in oracle["entries"]}
    return [i for i in branch if types[i] in CONVERSATION_TYPES]


def ask_pi(real: Path, tmp_path: Path) -> Oracle:
    copy = tmp_path / f"oracle-{real.name}"
    shutil.copyfile(real, copy)  # Pi may migrate or repair the file it opens
    answer: Oracle = pi(str(copy))
    assert "error" not in answer, answer
    return answer


def session_folders(m: Mount) -> list[Path]:
    # (latest is a link to one of them)
    return sorted(p.parent for p in m.path.glob("*/*/session.jsonl") if not p.parent.is_symlink())


def real_file(folder: Path) -> Path:
    return Path(os.getxattr(folder, "user.pi.file").decode())


@pytest.fixture(params=["in the mount", "by workers"])
def served(request: pytest.FixtureRequest, sessions: Path) -> Iterator[Mount]:
    """The fixture sessions mounted, as a first walk meets them: rendered by the mount
    itself, or by its render workers (every session then answered from what they saved in
    the store, as a later mount answers them)."""
    workers = "2" if request.param == "by workers" else "0"
    with mounted(sessions, "--workers", workers) as m:
        if workers != "0":
            wait_done(m)
            done = DONE.search(m.log_text())
            assert done is not None and done.group(2) == "0", m.log_text()  # none left
        yield m
    finished(m)


def test_every_leaf_folder_matches_pis_branch(served: Mount, tmp_path: Path) -> None:
    checked = 0
    for folder in session_folders(served):
        oracle = ask_pi(real_file(folder), tmp_path)
        doc = json.loads((folder / "session.json").read_text())
        if doc["version"] in (2, 3):
            checked += _check_tree_session(folder, oracle, doc)
        else:
            checked += _check_v1_session(folder, oracle)
    assert checked >= 7, checked  # the examples alone have 7 leaves


def _check_tree_session(folder: Path, oracle: Oracle, doc: dict[str, Any]) -> int:
    assert sorted(leaf["id"] for leaf in doc["leaves"]) == sorted(oracle["leaves"]), folder
    for leaf in oracle["leaves"]:
        want = conversation(oracle, oracle["branches"][leaf])
        assert ids_in(folder / "leaves" / leaf) == want, (folder, leaf)
        _check_branch_view(folder / "leaves" / f"{leaf}.md", folder / "leaves" / leaf, want)
    for name in os.listdir(folder / "leaves"):
        leaf = os.getxattr(folder / "leaves" / name, "user.pi.id").decode()
        assert leaf in oracle["leaves"]
    _check_branch_view(folder / "current.md", folder / "current", None)
    _check_nodes(folder, oracle)
    heads = headings((folder / "conversation.md").read_bytes())
    in_file = [e["id"] for e in oracle["entries"] if e["type"] in CONVERSATION_TYPES]
    assert [eid for eid, _ in heads] == in_file, folder  # every entry once, in file order
    current = folder / "current"
    assert os.getxattr(current, "user.pi.id").decode() == oracle["leafId"]
    for p in files_in(current):
        eid = os.getxattr(p, "user.pi.id").decode()
        if eid in oracle["userTexts"]:
            text = oracle["userTexts"][eid]
            assert p.read_text() == (text if text.endswith("\n") else text + "\n"), p
    return len(oracle["leaves"])


def _check_nodes(folder: Path, oracle: Oracle) -> None:
    """``nodes/<id>/`` and ``nodes/<id>.md`` of entries inside branches too (a hundred per
    session at most): Pi's ``getBranch(id)`` walks parents from ``id``, so it is the leaf's
    branch cut at ``id``."""
    path_to: dict[str, list[str]] = {}
    for leaf in oracle["leaves"]:
        branch = oracle["branches"][leaf] or []  # (none where Pi would loop)
        for i, eid in enumerate(branch):
            path_to.setdefault(eid, branch[: i + 1])
    some = sorted(path_to)[:: max(1, len(path_to) // 100)]
    for eid in some:
        want = conversation(oracle, path_to[eid])
        node = folder / "nodes" / id_name(eid)
        assert ids_in(node) == want, (folder, eid)
        _check_branch_view(node.with_name(node.name + ".md"), node, want)
    assert len(some) >= min(len(path_to), 10), folder


HEADING = re.compile(rb"^## (\d+) (\S+) \xc2\xb7 (\S+)(?: \xc2\xb7 .*)?\n\n", re.M)


def headings(view: bytes) -> list[tuple[str, int]]:
    """(entry id, offset of the bytes after the heading) of every heading of a view."""
    return [(m.group(3).decode(), m.end()) for m in HEADING.finditer(view)]


def _check_branch_view(view: Path, folder: Path, want: list[str] | None) -> None:
    """A branch as one file: one heading per numbered file, in path order, each followed
    by exactly that file's bytes."""
    data = view.read_bytes()
    heads = headings(data)
    files = files_in(folder)
    assert [eid for eid, _ in heads] == ids_in(folder), view
    if want is not None:
        assert [eid for eid, _ in heads] == want, view
    for (_, at), p in zip(heads, files, strict=True):
        body = p.read_bytes()
        assert data[at : at + len(body)] == body, p


def _check_v1_session(folder: Path, oracle: Oracle) -> int:
    # Pi gives v1 entries random ids when it migrates; compare the sequence instead.
    (leaf,) = oracle["leaves"]
    want = conversation(oracle, oracle["branches"][leaf])
    files = files_in(folder / "current")
    assert len(files) == len(want), folder
    _check_branch_view(folder / "current.md", folder / "current", None)
    roles = {e["id"]: e["role"] for e in oracle["entries"]}
    for p, eid in zip(files, want, strict=True):
        if roles[eid] == "user":
            assert p.name.endswith("-user.md")
            text = oracle["userTexts"][eid]
            assert p.read_text() == (text if text.endswith("\n") else text + "\n"), p
    return 1
