"""The write semantics in the core, without FUSE: editors' sequences replayed on the Editor.

Needs nothing but Python (the real-program versions are in test_write.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pisessfs import writer
from pisessfs.edits import Editor
from pisessfs.sessions import Store
from pisessfs.view import NotPermitted
from tests import damaged
from tests.driven import Driven


def setup(tmp_path: Path) -> tuple[Editor, Path, int]:
    f = tmp_path / "s.jsonl"
    f.write_bytes(damaged.good(3))  # 00000000 <- 00000001 <- 00000002
    view = Driven(Store(str(tmp_path)))
    sess = damaged.enter(view, 1, "s")
    nodes = view.lookup(sess, "nodes").ino
    return Editor(view.view), f, view.lookup(nodes, "00000002").ino


def commit(ed: Editor, fh: int) -> str | None:
    job = ed.prepare(fh)
    if job is None:
        return None
    writer.write(job.pending)
    ed.finish(job)
    return job.pending.entry_id


def last(f: Path) -> dict[str, object]:
    entry: dict[str, object] = json.loads(f.read_bytes().splitlines()[-1])
    return entry


def test_vim_default_save_forks_once(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    name = "0002-user.md"
    ed.rename(folder, name, folder, name + "~", 0)  # vim moves the original aside
    assert name not in dict(Driven(ed.view).children(folder))
    ed.create(10, folder, name, 0o644)  # ...and writes a new one
    ed.write(10, 0, b"edited\n")
    new = commit(ed, 10)
    assert new is not None and last(f)["parentId"] == "00000000"
    assert commit(ed, 10) is None  # fsync then flush: still one line
    ed.close(10)
    ed.unlink(folder, name + "~")
    files = dict(Driven(ed.view).children(folder))
    assert set(files) == {"0001-user.md", "0002-user.md", "0003-user.md"}
    assert Driven(ed.view).content(files[name].ino) == b"message number 1\n"  # the original


def test_unchanged_in_place_save_appends_nothing(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    before = f.read_bytes()
    ino = Driven(ed.view).lookup(folder, "0003-user.md").ino
    assert ed.open(11, ino, os.O_WRONLY | os.O_TRUNC)
    ed.write(11, 0, b"message number 2\n")
    assert commit(ed, 11) is None
    assert f.read_bytes() == before


def test_new_file_becomes_a_child_and_then_stands_for_it(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    ed.create(12, folder, "next.md", 0o644)
    ed.write(12, 0, b"go on\n")
    new = commit(ed, 12)
    assert last(f)["parentId"] == "00000002"
    ed.write(12, 0, b"go on\n")  # the same bytes again: nothing
    assert commit(ed, 12) is None
    sess = damaged.enter(Driven(ed.view), 1, "s")
    leaf = Driven(ed.view).lookup(Driven(ed.view).lookup(sess, "nodes").ino, str(new)).ino
    assert "next.md" in dict(Driven(ed.view).children(leaf))


@pytest.mark.warns  # the refusal is logged
def test_message_files_cannot_be_deleted(tmp_path: Path) -> None:
    ed, _, folder = setup(tmp_path)
    with pytest.raises(NotPermitted):
        ed.unlink(folder, "0001-user.md")


def test_another_writer_appending_meanwhile_is_fine(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    ed.create(13, folder, "a.md", 0o644)
    ed.write(13, 0, b"ours\n")
    job = ed.prepare(13)
    assert job is not None
    with f.open("ab") as out:  # Pi appends between our read and our write
        out.write(damaged.line(damaged.user("0000abcd", "00000002", "pi's", 50)))
    writer.write(job.pending)
    ed.finish(job)
    texts = [
        json.loads(x)["message"]["content"][0]["text"] for x in f.read_bytes().splitlines()[1:]
    ]
    assert texts[-2:] == ["pi's", "ours"]


@pytest.mark.warns  # the torn line stays malformed forever, as in Pi
def test_a_torn_tail_gets_its_newline_before_our_line(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    with f.open("ab") as out:
        out.write(b'{"type":"label","id":"half"')  # a torn, unparseable last line
    ed.create(14, folder, "b.md", 0o644)
    ed.write(14, 0, b"after the tear\n")
    assert commit(ed, 14) is not None
    lines = f.read_bytes().splitlines()
    assert lines[-2] == b'{"type":"label","id":"half"'
    assert json.loads(lines[-1])["message"]["content"][0]["text"] == "after the tear"


def test_vim_second_save_of_a_new_file_forks_it(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    ed.create(20, folder, "new.md", 0o644)
    ed.write(20, 0, b"first\n")
    first = commit(ed, 20)
    ed.close(20)
    sess = damaged.enter(Driven(ed.view), 1, "s")
    new_leaf = Driven(ed.view).lookup(Driven(ed.view).lookup(sess, "nodes").ino, str(first)).ino
    ed.rename(new_leaf, "new.md", new_leaf, "new.md~", 0)  # vim's second :w
    ed.create(21, new_leaf, "new.md", 0o644)
    ed.write(21, 0, b"second\n")
    commit(ed, 21)
    assert last(f)["parentId"] == "00000002"  # a sibling of "first": an edit, not a reply


def test_scratch_nodes_are_freed_when_deleted(tmp_path: Path) -> None:
    ed, _, folder = setup(tmp_path)
    for i in range(50):
        ed.create(100 + i, folder, "4913", 0o644)
        ed.write(100 + i, 0, b"x" * 1000)
        ino = Driven(ed.view).lookup(folder, "4913").ino
        ed.close(100 + i)
        ed.unlink(folder, "4913")
        ed.forget(ino)  # the kernel lets go of the inode
    assert ed.view.scratch.nodes == {}
    assert ed.view.scratch.overlays == {}


def test_same_text_without_final_newline_or_with_crlf_appends_nothing(tmp_path: Path) -> None:
    ed, f, folder = setup(tmp_path)
    before = f.read_bytes()
    ino = Driven(ed.view).lookup(folder, "0002-user.md").ino
    for fh, data in ((30, b"message number 1"), (31, b"message number 1\r\n")):
        assert ed.open(fh, ino, os.O_WRONLY | os.O_TRUNC)
        ed.write(fh, 0, data)
        assert commit(ed, fh) is None
        ed.close(fh)
    assert f.read_bytes() == before


def test_unchanged_vim_save_leaves_the_message_itself(tmp_path: Path) -> None:
    ed, _, folder = setup(tmp_path)
    name = "0002-user.md"
    ino = Driven(ed.view).lookup(folder, name).ino
    ed.rename(folder, name, folder, name + "~", 0)
    ed.create(40, folder, name, 0o644)
    ed.write(40, 0, b"message number 1\n")
    assert commit(ed, 40) is None
    ed.close(40)
    ed.unlink(folder, name + "~")
    assert Driven(ed.view).lookup(folder, name).ino == ino  # the message file again, not a stand-in
    for n in list(ed.view.scratch.nodes):
        ed.forget(n)
    assert ed.view.scratch.nodes == {}
