"""The pyfuse3 adapter awaited directly with fake request contexts: errno mapping, wrapping.

Needs pyfuse3 installed (a dependency), but no mount and no /dev/fuse.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import stat
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pyfuse3
import pytest
import trio

from pisessfs import collector
from pisessfs.fuse_ops import Operations
from pisessfs.reads import MUTABLE_TIMEOUT, WATCHED_TIMEOUT
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
    ops.view.changes.invalidations.clear()
    with (tmp_path / "s.jsonl").open("ab") as f:  # a fork: a second leaf
        f.write(damaged.line(damaged.user("0000000a", "00000000", "a fork", 9)))
    ops.view.changes.session(str(tmp_path / "s.jsonl"))  # (what the watcher calls)
    dropped = set(ops.view.changes.invalidations)
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

    ops.reads.watched = lambda: True
    assert trio.run(conversation) == (WATCHED_TIMEOUT, WATCHED_TIMEOUT)
    ops.reads.watched = lambda: False
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


def _fields(e: pyfuse3.EntryAttributes) -> tuple[object, ...]:
    return (
        e.st_ino, e.st_mode, e.st_size, e.st_nlink, e.st_uid, e.st_gid, e.st_mtime_ns,
        e.attr_timeout, e.entry_timeout,
    )  # fmt: skip


Listed = list[tuple[bytes, tuple[object, ...]]]  # what readdir gave readdir_reply
Asked = list[tuple[str, int, object]]  # a request, its inode, the handler's answer


def _reply(token: Listed, name: bytes, e: pyfuse3.EntryAttributes, _next: int) -> bool:
    token.append((name, _fields(e)))
    return True


def _walk_as_rg(ops: Operations) -> Asked:
    """What ``rg`` asks of the session folder of ``ops_for``, through the handlers: each
    listing, each name listed (looked up and stat'ed), each link (read, and where it
    leads looked up), each file read whole."""
    asked: Asked = []
    up: dict[int, int] = {}  # folder -> the folder it is in

    async def lookup(folder: int, name: bytes) -> pyfuse3.EntryAttributes:
        if name == b"..":
            return await ops.getattr(up[folder], CTX)
        e = await ops.lookup(folder, name, CTX)
        asked.append(("lookup", folder, (name, _fields(e))))
        up.setdefault(e.st_ino, folder)
        return e

    async def walk(folder: int) -> None:
        listed: Listed = []
        await ops.readdir(folder, 0, listed)
        asked.append(("readdir", folder, listed))
        for name, _ in listed:
            e = await lookup(folder, name)
            asked.append(("getattr", e.st_ino, _fields(await ops.getattr(e.st_ino, CTX))))
            if stat.S_ISDIR(e.st_mode):
                await walk(e.st_ino)
            elif stat.S_ISLNK(e.st_mode):
                target = await ops.readlink(e.st_ino, CTX)
                asked.append(("readlink", e.st_ino, target))
                where = folder
                for part in target.split(b"/"):
                    where = (await lookup(where, part)).st_ino
            else:
                fi = await ops.open(e.st_ino, os.O_RDONLY, CTX)
                asked.append(("read", e.st_ino, await ops.read(fi.fh, 0, e.st_size + 1)))
                await ops.release(fi.fh)

    async def whole() -> None:
        sess = await enter(ops)
        up[sess.st_ino] = 1
        await walk(sess.st_ino)

    trio.run(whole)
    return asked


def _answered_at_once(ops: Operations, kind: str, ino: int, answer: object) -> bool:
    """Whether ``ops`` answers request ``kind`` at once, as its handler answered it."""
    if kind == "lookup":
        name, fields = cast(tuple[bytes, tuple[object, ...]], answer)
        e = ops.lookup_now(ino, name)
        return e is not None and _fields(e) == fields
    if kind == "getattr":
        e = ops.getattr_now(ino)
        return e is not None and _fields(e) == answer
    if kind == "readlink":
        return ops.readlink_now(ino) == answer
    if kind == "readdir":
        listed: Listed = []
        return ops.readdir_now(ino, 0, listed) is True and listed == answer
    fi = ops.open_now(ino, os.O_RDONLY)
    if fi is None or not fi.keep_cache:
        return False
    data = ops.read_now(fi.fh, 0, len(cast(bytes, answer)) + 1)
    return ops.release_now(fi.fh) is True and data == answer


def test_what_is_answered_at_once_is_what_the_handlers_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The patched pyfuse3 offers each request to ``lookup_now`` and the rest before the
    coroutine handler (``fuse_ops.now``). Over what ``rg`` asks of a session whose file is
    unchanged since it answered (every name of its folder and ``leaves/`` and their
    attributes, every link and where it leads, every whole-session file read, every
    listing), each is answered at once, and with the handler's answer."""
    need_open_flags()  # (the patched pyfuse3: listings without opendir)
    ops = ops_for(tmp_path)
    with (tmp_path / "s.jsonl").open("ab") as f:  # a fork: two leaves
        f.write(damaged.line(damaged.user("0000000a", "00000000", "a fork", 9)))
    monkeypatch.setattr(pyfuse3, "readdir_reply", _reply)  # (a token needs a real request)
    asked = _walk_as_rg(ops)
    assert {kind for kind, _, _ in asked} == {"readdir", "lookup", "getattr", "readlink", "read"}
    for kind, ino, answer in asked:
        assert _answered_at_once(ops, kind, ino, answer), (kind, ops.view.key(ino))
    assert not ops.reads._files  # (every handle released)


def test_a_file_is_given_to_the_kernel_at_its_open_once_and_never_beside_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a read-only open of a file the kernel may cache, its bytes go to the page cache
    first (``_push``, FUSE_NOTIFY_STORE): once, until the view drops its pages or the
    kernel forgets it; never while another handle of it is open (a read in flight locks
    the pages the store fills, and the loop that answers it would be waiting)."""
    stored: list[tuple[int, int, bytes]] = []
    monkeypatch.setattr(pyfuse3, "notify_store", lambda *a: stored.append(a))  # (no kernel)
    ops = ops_for(tmp_path)
    ops.init()  # (the kernel's hello: before it, nothing is given)

    async def opened() -> tuple[int, int]:
        sess = await enter(ops)
        tree = await ops.lookup(sess.st_ino, b"tree.txt", CTX)
        fi = await ops.open(tree.st_ino, os.O_RDONLY, CTX)
        return tree.st_ino, fi.fh

    def open_now(ino: int) -> int:
        fi = ops.open_now(ino, os.O_RDONLY)
        assert fi is not None
        return fi.fh

    def release(*fhs: int) -> None:
        for fh in fhs:
            assert ops.release_now(fh) is True

    tree, first = trio.run(opened)
    whole = trio.run(ops.read, first, 0, 1 << 20)
    assert stored == [(tree, 0, whole)] and whole
    release(open_now(tree))
    assert len(stored) == 1  # given already
    ops.view.changes.invalidations.append((tree, PAGES))
    ops.drain()  # (its pages go)
    beside = open_now(tree)  # (the first is still open)
    assert len(stored) == 1
    release(first, beside)
    release(open_now(tree))
    assert stored == [(tree, 0, whole)] * 2
    trio.run(ops.forget, [(tree, 1)])
    tree, last = trio.run(opened)  # (known anew: given again)
    assert stored[2:] == [(tree, 0, whole)]
    release(last)


def test_an_error_is_answered_at_once_as_the_handler_answers_it(tmp_path: Path) -> None:
    """One answer per request kind (``reads.Reads``): the fast path (``lookup_now`` and
    the rest) raises the errno the handler answers, rather than passing the request on for
    the same answer to be asked again."""
    ops = ops_for(tmp_path)
    with pytest.raises(pyfuse3.FUSEError) as now:
        ops.lookup_now(1, b"nope")
    assert now.value.errno == errno.ENOENT == errno_of(lambda: ops.lookup(1, b"nope", CTX))
    with pytest.raises(pyfuse3.FUSEError) as gone:
        ops.getattr_now(123456789)
    assert gone.value.errno == errno.ENOENT == errno_of(lambda: ops.getattr(123456789, CTX))


def test_an_entry_folder_of_a_small_session_is_answered_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What no kept answer holds (an entry folder's names and files) is answered at once
    too when no blocking work is due (a small session parsed on the loop), with what the
    handler answers: the same answer on both paths."""
    need_open_flags()  # (the patched pyfuse3: listings without opendir)
    ops = ops_for(tmp_path)
    monkeypatch.setattr(pyfuse3, "readdir_reply", _reply)  # (a token needs a real request)

    async def handlers() -> tuple[int, Listed, pyfuse3.EntryAttributes, bytes]:
        sess = await enter(ops)
        nodes = await ops.lookup(sess.st_ino, b"nodes", CTX)
        folder = await ops.lookup(nodes.st_ino, b"00000002", CTX)
        listed: Listed = []
        await ops.readdir(folder.st_ino, 0, listed)
        msg = await ops.lookup(folder.st_ino, listed[-1][0], CTX)
        fi = await ops.open(msg.st_ino, os.O_RDONLY, CTX)
        data = await ops.read(fi.fh, 0, msg.st_size + 1)
        await ops.release(fi.fh)
        return folder.st_ino, listed, msg, data

    folder, listed, msg, data = trio.run(handlers)
    again: Listed = []
    assert ops.readdir_now(folder, 0, again) is True and again == listed
    name = listed[-1][0]
    now = ops.lookup_now(folder, name)
    assert now is not None and _fields(now) == _fields(msg)
    fi = ops.open_now(msg.st_ino, os.O_RDONLY)
    assert fi is not None
    assert ops.read_now(fi.fh, 0, msg.st_size + 1) == data and data.endswith(b"\n")
    assert ops.release_now(fi.fh) is True


def test_full_collections_wait_for_a_quiet_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector's full passes (every thread waits 60-105 ms for one, in the middle of
    a first walk) are made by the mount's task once no request came for a while, not when
    allocations say, nor while a parse holds the collector paused; the young generations are
    collected as ever, and the threshold the task found is put back when it ends."""
    monkeypatch.setattr(collector, "EVERY", 0.001)
    monkeypatch.setattr(collector, "QUIET", 0.05)

    def full() -> int:
        return int(gc.get_stats()[2]["collections"])

    was = gc.get_threshold()
    asked = [time.monotonic()]

    async def walk() -> tuple[int, int]:
        with trio.fail_after(30):
            return await walked()

    async def walked() -> tuple[int, int]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collector.run, lambda: asked[0])
            await trio.sleep(0.01)
            before, young = full(), gc.get_stats()[1]["collections"]
            kept = []
            for n in range(300):  # (requests all along: each allocation pass is a busy one)
                kept.append([[n] for _ in range(2_000)])
                asked[0] = time.monotonic()
                await trio.sleep(0)
            during = full() - before
            assert gc.get_stats()[1]["collections"] > young + 10  # (the young ones, as ever)
            gc.disable()  # quiet from now on, but a parse holds the collector paused
            try:
                await trio.sleep(20 * collector.QUIET)
                paused = full() - before - during
            finally:
                gc.enable()
            while full() == before + during:  # quiet, and no parse: a pass comes
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
            return during + paused, gc.get_count()[2]

    during, passes = trio.run(walk)
    assert during == 0 and passes == 0
    assert gc.get_threshold() == was
    now = time.monotonic()  # and past the ceiling, at once, however busy the mount
    assert collector.due(now, now, (0, 0, collector.CEILING))
    assert not collector.due(now, now, (0, 0, collector.CEILING - 1))
    assert not collector.due(0.0, now, (0, 0, 0))  # (nothing to collect: quiet or not)
