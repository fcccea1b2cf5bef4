"""The pyfuse3 adapter: a protocol translation and nothing else.

This is the only module that speaks errno and builds ``EntryAttributes``. Each handler is a
short shell over :class:`~pisessfs.view.View`: it runs a blocking session parse off the trio
thread when the view says one is due, calls the synchronous core, and maps the core's
exceptions through the one table below. Every handler is wrapped, because any exception
other than ``FUSEError`` escaping into ``pyfuse3.main`` kills the mount.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio

from . import actions as act
from . import view as v
from . import writer
from .actions import Actions
from .appender import write_whole
from .edits import Editor
from .errors import MAX_STEPS
from .invalidator import Invalidator
from .reads import NO_OPENDIR, Reads
from .saves import Saves
from .sessions import YIELD, Unreadable

log = logging.getLogger(__name__)

#: Core exception -> errno. The one place errno is chosen (ARCHITECTURE.md).
ERRNO: dict[type[Exception], int] = {
    v.NotFound: errno.ENOENT,
    v.NotADir: errno.ENOTDIR,
    v.IsADir: errno.EISDIR,
    v.Denied: errno.EACCES,
    v.NotALink: errno.EINVAL,
    v.NotPermitted: errno.EPERM,
    v.Exists: errno.EEXIST,
    v.CrossFolder: errno.EXDEV,
    v.Invalid: errno.EINVAL,
    v.Changed: errno.ESTALE,
    Unreadable: errno.EACCES,
    writer.ReadOnlySession: errno.EROFS,
    writer.NotUtf8: errno.EILSEQ,
    writer.TooBig: errno.EFBIG,
    writer.Emptied: errno.EPERM,
    writer.Locked: errno.EBUSY,
    writer.Stale: errno.ESTALE,
    act.BadValue: errno.EINVAL,
    act.InUse: errno.EBUSY,
    act.Unsupported: errno.ENOTSUP,
    act.NoAttr: pyfuse3.ENOATTR,
    act.NotEmpty: errno.ENOTEMPTY,
    act.TrashFailed: errno.EIO,  # its own errno, see _errno_of
}


P = ParamSpec("P")
R = TypeVar("R")


class Asked:
    """When a request last came (``Operations.warm`` waits for a quiet moment), and how
    many came, of which how many were answered at once (``now``; ``pisessfs status``)."""

    last = 0.0
    requests = 0
    at_once = 0


def handler(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Answer core errors with their errno and anything unexpected with EIO, never crash."""

    @functools.wraps(fn)
    async def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        Asked.last = time.monotonic()
        _counted(fn.__name__, args[1:], at_once=False)
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:
            raise _fuse_error(exc, fn.__name__, args[1:]) from None

    return wrapped


def _fuse_error(exc: Exception, name: str, args: tuple[object, ...]) -> pyfuse3.FUSEError:
    """The errno a request is answered for an exception of the core (the table), of the
    real file system (its own), or anything else (EIO, and the traceback in the log)."""
    if isinstance(exc, tuple(ERRNO)):
        code = _errno_of(exc)
        log.debug("%s%r: %s (%s)", name, args, errno.errorcode[code], exc)
    elif isinstance(exc, OSError):  # the real file system said no (a full disk, say)
        code = exc.errno or errno.EIO
        log.warning("%s%r: %s", name, args, exc)
    else:
        code = errno.EIO
        log.error("unexpected error in %s%r: answered EIO", name, args, exc_info=exc)
    return pyfuse3.FUSEError(code)


def now(fn: Callable[P, R | None]) -> Callable[P, R | None]:
    """A synchronous answer, which the patched pyfuse3 asks before the coroutine handler of
    the same request (``Operations.lookup_now`` and the rest; a stock pyfuse3 never calls
    these). Both call the same answer (``Operations._lookup`` and the rest): here once, and
    when it has blocking work to run first (:class:`~pisessfs.view.Busy`), None (False for
    ``release_now`` and ``readdir_now``) passes the request on to the handler, which runs
    the work off the loop and asks again. Errors are answered here as the handler answers
    them (its errno); anything unexpected is left to the handler (EIO and a log line).
    Logged and counted as the handler logs and counts."""
    name = fn.__name__.removesuffix("_now")

    @functools.wraps(fn)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R | None:
        Asked.last = time.monotonic()
        try:
            answer = fn(*args, **kwargs)
        except v.Busy:
            return None
        except pyfuse3.FUSEError:
            _counted(name, args[1:])
            raise
        except _ANSWERED as exc:
            _counted(name, args[1:])
            raise _fuse_error(exc, name, args[1:]) from None
        except Exception:
            return None
        if answer is None or answer is False:
            return answer
        _counted(name, args[1:])
        return answer

    return wrapped


#: What a synchronous answer answers itself: the core's errors and the file system's.
_ANSWERED: tuple[type[Exception], ...] = (*ERRNO, OSError)


def _counted(name: str, args: tuple[object, ...], at_once: bool = True) -> None:
    """A request answered, counted for ``status`` (``--debug``: logged, every one)."""
    Asked.requests += 1
    Asked.at_once += at_once
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s%r", name, args)


def _errno_of(exc: Exception) -> int:
    if isinstance(exc, Unreadable | act.TrashFailed) and exc.errno:
        return exc.errno  # the file's own answer: EACCES, ENOENT when gone, EXDEV, ...
    for cls in type(exc).__mro__:  # the most specific class in the table wins
        if cls in ERRNO:
            return ERRNO[cls]
    return errno.EIO


class Operations(pyfuse3.Operations):
    """pyfuse3 handlers over a view; state lives in the view, handles in two small maps."""

    #: The kernel keeps link targets until the view drops them (``PAGES``: ``current`` on
    #: an append, ``latest`` when a session file changes, a fork's ``parent``): ``rg``, which
    #: stats every link it meets, asked for each target at every walk. (The patched pyfuse3
    #: reads this; a stock one ignores it.)
    enable_symlink_cache = True

    def __init__(
        self,
        view: v.View,
        read_only: bool = False,
        cap: int = writer.DEFAULT_CAP,
        put: writer.Put = write_whole,
    ) -> None:
        super().__init__()
        self.view = view
        self.editor = Editor(view, cap)
        self.actions = Actions(view)
        self.read_only = read_only
        self.reads = Reads(view, self.editor, read_only)
        #: what the kernel is told to drop (``drain``), and saves wait for (``settled``)
        self.invalidator = Invalidator(view, self.reads.dropped)
        #: saves and session actions, written one at a time per session file
        self.saves = Saves(view, self.editor, put, self._core, self.invalidator)

    async def _ready(self, ino: int, attr_only: bool = False, listing: bool = False) -> None:
        """Bring what ``ino`` shows up to date without holding up other requests."""
        await self._core(self.view.ready, ino, attr_only, listing, set())

    async def _core(self, fn: Callable[..., R], *args: Any) -> R:
        """Call the core; when it is busy, run its blocking work off the loop (or let other
        requests pass) and call it again."""
        for _ in range(MAX_STEPS):
            try:
                return fn(*args)
            except v.Busy as busy:
                if busy.work is YIELD:
                    await trio.sleep(0)
                else:
                    # A parse or render holds nothing of the loop's: an unmount need not wait
                    # for it (the thread ends with the process).
                    await trio.to_thread.run_sync(busy.work, abandon_on_cancel=True)
                    self.drain()  # what the work changed (a new rendering's size)
        log.warning("%s%r: the session kept changing; answered EAGAIN", fn.__name__, args)
        raise pyfuse3.FUSEError(errno.EAGAIN)

    @now
    def lookup_now(self, parent_inode: int, name: bytes) -> pyfuse3.EntryAttributes | None:
        return self.reads.lookup(parent_inode, os.fsdecode(name), set())

    @now
    def getattr_now(self, inode: int) -> pyfuse3.EntryAttributes | None:
        return self.reads.getattr(inode, set())

    @now
    def readlink_now(self, inode: int) -> bytes | None:
        return self.reads.readlink(inode, set())

    @now
    def open_now(self, inode: int, flags: int) -> pyfuse3.FileInfo | None:
        return self.reads.open(inode, flags, set())

    @now
    def read_now(self, fh: int, off: int, size: int) -> bytes | None:
        return self.reads.read(fh, off, size, set())

    @now
    def release_now(self, fh: int) -> bool:
        return self.reads.released(fh)

    @now
    def readdir_now(self, fh: int, start_id: int, token: Any) -> bool:
        return self.reads.readdir(fh, start_id, token, set())

    @handler
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        return await self._core(self.reads.lookup, parent_inode, os.fsdecode(name), set())

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return await self._core(self.reads.getattr, inode, set())

    @handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        return await self._core(self.reads.readlink, inode, set())

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        if NO_OPENDIR:
            # The first opendir, and the last: the kernel then opens every folder itself,
            # and keeps each listing readdir answered until the view drops it (PAGES).
            log.debug("opendir: ENOSYS, the kernel lists folders from its cache from now on")
            raise pyfuse3.FUSEError(errno.ENOSYS)
        fh = next(self.reads.fh)
        self.reads.dirs[fh] = await self.listing(inode)
        return fh

    async def listing(self, inode: int) -> list[tuple[str, v.Attr]]:
        return await self._core(self.reads.listing, inode, set())

    @handler
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        await self._core(self.reads.readdir, fh, start_id, token, set())

    @handler
    async def releasedir(self, fh: int) -> None:
        self.reads.dirs.pop(fh, None)

    @handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        return await self._core(self.reads.open, inode, flags, set())

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        return await self._core(self.reads.read, fh, off, size, set())

    @handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return self.editor.write(fh, off, buf)

    @handler
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        await self._ready(parent_inode)
        fh = next(self.reads.fh)
        attr = self.editor.create(fh, parent_inode, os.fsdecode(name), mode, ctx.uid, ctx.gid)
        self.drain()
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False), self.reads.taken(attr)

    @handler
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        await self._ready(parent_inode)
        attr = self.editor.symlink(parent_inode, os.fsdecode(name), target, ctx.uid, ctx.gid)
        self.drain()
        return self.reads.taken(attr)

    @handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        log.warning("mkdir %r refused (EACCES): folders are the sessions' own", name)
        raise pyfuse3.FUSEError(errno.EACCES)

    @handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self._ready(parent_inode)
        n = os.fsdecode(name)
        if self.actions.in_removal(parent_inode, ctx.pid):
            self.actions.keep(parent_inode, n, ctx.pid)  # the session goes (or stays) whole
            return
        self.editor.unlink(parent_inode, n)
        self.drain()

    @handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self._ready(parent_inode)
        n = os.fsdecode(name)
        path = self.actions.session_named(parent_inode, n)
        if path is not None:  # rmdir SESSION, or the last step of rm -r SESSION
            self.actions.may_trash(parent_inode, n, ctx.pid, path)
            await self._trash(path, ctx.uid, ctx.gid)
            return
        if self.actions.in_removal(parent_inode, ctx.pid):
            ino = self.actions.keep_folder(parent_inode, n, ctx.pid)
            self.reads.generation[ino] = self.reads.generation.get(ino, 0) + 1
            return
        log.warning("rmdir %s refused (EPERM): sessions are append-only", n)
        raise pyfuse3.FUSEError(errno.EPERM)

    async def _trash(self, path: str, uid: int, gid: int) -> None:
        """Move session ``path`` to user ``uid``'s trash (DESIGN.md, "Session actions")."""
        if self.read_only:
            log.warning("trash of %s refused (EROFS): the mount is read-only", path)
            raise pyfuse3.FUSEError(errno.EROFS)
        async with self.saves.lock(path):
            try:
                s = await self._core(self.view.up_to_date, path)
                self.actions.check_trash(s, self.editor.holds(path))
                done = await trio.to_thread.run_sync(act.trash, s, uid, gid)
            except act.TrashFailed as err:
                log.warning("trash refused (%s): %s", errno.errorcode.get(err.errno, "?"), err)
                raise
            finally:
                self.actions.walks.forget(path)  # a walk that reached its end is over
        self.actions.trashed(path, done)
        self.drain()
        # (no ``settled``: the kernel holds the project folder while rmdir waits, and what
        # the watcher queued meanwhile, a name of that folder, would wait for it: a stall)

    @handler
    async def rename(  # noqa: PLR0917 (pyfuse3 signature)
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        await self._ready(parent_inode_old)
        await self._ready(parent_inode_new)
        path = self.view.session_path(parent_inode_new)
        if path is not None:
            await self._core(self.view.up_to_date, path)  # a rename over a message saves
        args = (parent_inode_old, os.fsdecode(name_old), parent_inode_new, os.fsdecode(name_new))
        job = self.editor.rename(*args, flags)
        if job is None:
            self.drain()  # a rename without a commit still changed names
            return
        async with self.saves.lock(job.binding.path):
            await self.saves.write(job)
        await self.settled()  # vim's save: it reads the file back through current at once

    @handler
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        await self._ready(inode)
        a = self.editor.setattr(
            inode,
            fh,
            attr.st_size if fields.update_size else None,
            attr.st_mode if fields.update_mode else None,
            attr.st_mtime_ns if fields.update_mtime else None,
            attr.st_uid if fields.update_uid else None,
            attr.st_gid if fields.update_gid else None,
        )
        return self.reads.entry(a)

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.saves.commit(fh)

    @handler
    async def flush(self, fh: int) -> None:
        # The commit point: errors here reach the program's close() (release's are lost).
        await self.saves.commit(fh)

    @handler
    async def release(self, fh: int) -> None:
        if self.reads.released(fh):
            return
        try:
            await self.saves.commit(fh, last=True)
        except (v.ViewError, Unreadable, writer.Refused, OSError) as err:  # expected: one line
            log.warning("release: the last save was not made: %s", err)
        except Exception:
            log.exception("release: the last commit failed")
        finally:
            self.editor.close(fh)
            self.drain()

    def drain(self) -> None:
        """Queue the kernel invalidations the core asked for (``Invalidator.drain``)."""
        self.invalidator.drain()

    def init(self) -> None:
        """The kernel's hello: from now on it has a page cache to give bytes to."""
        self.reads.init()

    async def settled(self) -> None:
        """Wait until the kernel dropped what was queued so far (``Invalidator.settled``)."""
        await self.invalidator.settled()

    @handler
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if not name.startswith(b"user.pi."):
            # ls -l asks two of these per file: answer without touching anything
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        await self._ready(inode)
        value = self.view.xattrs(inode).get(os.fsdecode(name))
        if value is None:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return value

    @handler
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        await self._ready(inode)
        return [os.fsencode(n) for n in self.view.xattrs(inode)]

    @handler
    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        # Editors copy ACLs after a save; "not supported" makes them fall back to chmod.
        # user.pi.name and user.pi.label are session actions: one appended line each.
        attr = self._action_attr(name)
        await self._ready(inode)
        await self.saves.apply(self.actions.set_xattr(inode, attr, value))

    @handler
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        attr = self._action_attr(name)
        await self._ready(inode)
        await self.saves.apply(self.actions.remove_xattr(inode, attr))

    def _action_attr(self, name: bytes) -> str:
        """The name of an attribute that names or labels; ENOTSUP for every other one (no
        log line: editors copy ACLs), EROFS for these on a read-only mount."""
        attr = os.fsdecode(name)
        if attr not in (act.NAME, act.LABEL):
            raise pyfuse3.FUSEError(errno.ENOTSUP)
        if self.read_only:
            log.warning("%s refused (EROFS): the mount is read-only", attr)
            raise pyfuse3.FUSEError(errno.EROFS)
        return attr

    @handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # The kernel no longer holds these: their numbers leave the view's table, and scratch
        # nodes nobody names any more are freed. Must not raise.
        try:
            for ino, count in inode_list:
                self.view.forget(ino, count)
                self.reads.listings.pop(ino, None)
                self.reads.dropped(ino)
                self.editor.forget(ino)
            log.debug("forget %d inodes: %d named, %d held", len(inode_list), *self.view.named())
        except Exception:
            log.exception("forget failed (ignored)")
