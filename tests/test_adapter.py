"""The pyfuse3 adapter awaited directly with fake request contexts: errno mapping, wrapping.

Needs pyfuse3 installed (a dependency), but no mount and no /dev/fuse.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pyfuse3
import pytest
import trio

from pisessfs.fuse_ops import MUTABLE_TIMEOUT, WATCHED_TIMEOUT, Operations
from pisessfs.sessions import Store
from pisessfs.view import PAGES, View
from tests import damaged
from tests.conftest import need_open_flags


class Ctx:
    uid = gid = pid = 0
    umask = 0o022


CTX = cast(pyfuse3.RequestContext, Ctx())


def ops_for(tmp_path: Path, read_only: bool = False) -> Operations:
    (tmp_path / "s.jsonl").write_bytes(damaged.good())
    return Operations(View(Store(str(tmp_path))), read_only=read_only)


async def enter(ops: Operations) -> pyfuse3.EntryAttributes:
    """The session folder of s.jsonl: ``s`` is a link to its name."""
    link = await ops.lookup(1, b"s", CTX)
    return await ops.lookup(1, await ops.readlink(link.st_ino, CTX), CTX)


def errno_of(call: Callable[[], Coroutine[Any, Any, object]]) -> int:
    with pytest.raises(pyfuse3.FUSEError) as exc:
        trio.run(call)
    return int(exc.value.errno)


def test_missing_name_is_enoent(tmp_path: Path) -> None:
    ops = ops_for(tmp_path)
    assert errno_of(lambda: ops.lookup(1, b"nope", CTX)) == errno.ENOENT


def test_unexpected_exception_answers_eio_and_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ops = ops_for(tmp_path)

    def boom(*args: object) -> None:  # fault injection
        raise ValueError("boom")

    monkeypatch.setattr(ops.view, "resolve", boom)
    with caplog.at_level(logging.ERROR):
        assert errno_of(lambda: ops.lookup(1, b"s", CTX)) == errno.EIO
    assert "boom" in caplog.text
    caplog.clear()  # the error was the point of this test


@pytest.mark.warns  # each refusal logs its reason
@pytest.mark.parametrize(("read_only", "want"), [(False, errno.EACCES), (True, errno.EROFS)])
def test_writes_are_refused_with_the_contracts_errno(
    tmp_path: Path, read_only: bool, want: int
) -> None:
    ops = ops_for(tmp_path, read_only)

    async def open_tree() -> object:
        sess = await enter(ops)
        tree = await ops.lookup(sess.st_ino, b"tree.txt", CTX)
        return await ops.open(tree.st_ino, os.O_WRONLY, CTX)

    assert errno_of(open_tree) == want


def test_unknown_xattr_is_enoattr_and_known_ones_answer(tmp_path: Path) -> None:
    ops = ops_for(tmp_path)

    async def attrs() -> tuple[object, bytes]:
        sess = await enter(ops)
        names = await ops.listxattr(sess.st_ino, CTX)
        return names, await ops.getxattr(sess.st_ino, b"user.pi.session", CTX)

    names, value = trio.run(attrs)
    assert b"user.pi.file" in cast(list[bytes], names) and value == b"dmg"
    assert errno_of(lambda: ops.getxattr(1, b"security.selinux", CTX)) == pyfuse3.ENOATTR


def test_read_serves_the_rendered_bytes(tmp_path: Path) -> None:
    ops = ops_for(tmp_path)

    async def cat() -> bytes:
        sess = await enter(ops)
        nodes = await ops.lookup(sess.st_ino, b"nodes", CTX)
        node = await ops.lookup(nodes.st_ino, b"00000001", CTX)
        f = await ops.lookup(node.st_ino, b"0002-user.md", CTX)
        fi = await ops.open(f.st_ino, os.O_RDONLY, CTX)
        data = await ops.read(fi.fh, 0, 4096)
        await ops.release(fi.fh)
        assert f.st_size == len(data)
        return data

    assert trio.run(cat) == b"message number 1\n"


def test_the_kernel_is_told_when_a_listing_it_keeps_changed(tmp_path: Path) -> None:
    """With the patched pyfuse3 (patches/pyfuse3-3.5.0-walks.patch) opendir answers ENOSYS
    once, and the kernel then keeps every folder's listing until told: an append that adds
    a leaf drops the session folder's and leaves/'s (PAGES), not only their attributes."""
    need_open_flags()
    ops = ops_for(tmp_path)

    async def walk() -> tuple[int, int]:
        sess = await enter(ops)
        leaves = await ops.lookup(sess.st_ino, b"leaves", CTX)
        with pytest.raises(pyfuse3.FUSEError) as said:
            await ops.opendir(leaves.st_ino, CTX)
        assert said.value.errno == errno.ENOSYS
        return sess.st_ino, leaves.st_ino

    sess, leaves = trio.run(walk)
    ops.view.invalidations.clear()
    with (tmp_path / "s.jsonl").open("ab") as f:  # a fork: a second leaf
        f.write(damaged.line(damaged.user("0000000a", "00000000", "a fork", 9)))
    ops.view.changed_session(str(tmp_path / "s.jsonl"))  # (what the watcher calls)
    dropped = set(ops.view.invalidations)
    assert {(sess, PAGES), (leaves, PAGES)} <= dropped


def test_what_can_change_is_kept_for_minutes_only_while_every_folder_is_watched(
    tmp_path: Path,
) -> None:
    """A walk of a year of sessions outlasts 10 s: the kernel keeps names and attributes of
    what the live view invalidates for 10 minutes, and for 10 s when a folder of the
    sessions could not be watched (nothing would tell it of a change)."""
    ops = ops_for(tmp_path)

    async def conversation() -> tuple[float, float]:
        sess = await enter(ops)
        conv = await ops.lookup(sess.st_ino, b"conversation.md", CTX)
        return conv.entry_timeout, conv.attr_timeout

    ops.watched = lambda: True
    assert trio.run(conversation) == (WATCHED_TIMEOUT, WATCHED_TIMEOUT)
    ops.watched = lambda: False
    assert trio.run(conversation) == (MUTABLE_TIMEOUT, MUTABLE_TIMEOUT)
    assert WATCHED_TIMEOUT > 60 > MUTABLE_TIMEOUT


def test_a_read_only_open_asks_for_no_flush_and_a_write_does(tmp_path: Path) -> None:
    """flush is where a save is committed (its errors reach close()): only readers skip it."""
    need_open_flags()
    ops = ops_for(tmp_path)

    async def opens() -> tuple[pyfuse3.FileInfo, pyfuse3.FileInfo]:
        sess = await enter(ops)
        tree = await ops.lookup(sess.st_ino, b"tree.txt", CTX)
        nodes = await ops.lookup(sess.st_ino, b"nodes", CTX)
        node = await ops.lookup(nodes.st_ino, b"00000002", CTX)
        reader = await ops.open(tree.st_ino, os.O_RDONLY, CTX)
        writer, _ = await ops.create(node.st_ino, b"new.md", 0o644, os.O_WRONLY, CTX)
        return reader, writer

    reader, writer = trio.run(opens)
    assert reader.noflush and not writer.noflush
