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
import itertools
import logging
import os
import stat
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeGuard, TypeVar

import pyfuse3
import trio

from . import actions as act
from . import view as v
from . import writer
from .actions import Actions
from .appender import write_whole
from .edits import Editor
from .handles import OpenFiles
from .invalidator import Invalidator
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

#: Kernel cache lifetimes: immutable nodes (entry folders, message files) for an hour;
#: what changes when a session grows is invalidated by the live view when it changes, and
#: looked at again after 10 minutes in any case, or after 10 s while a folder of the
#: sessions could not be watched. (A walk of a year of sessions takes longer than 10 s: with
#: 10 s, every walk asked a lookup per name of every folder again.)
IMMUTABLE_TIMEOUT = 3600.0
WATCHED_TIMEOUT = 600.0
MUTABLE_TIMEOUT = 10.0


def _open_flags() -> bool:
    """Whether this pyfuse3 passes the kernel's FOPEN_NOFLUSH: the build ``scripts/setup``
    makes with ``patches/pyfuse3-3.5.0-walks.patch``. A stock pyfuse3 works as well, with a
    request more per file a walk closes (and, see ``NO_OPENDIR``, four per folder)."""
    try:
        pyfuse3.FileInfo(noflush=True)  # type: ignore[call-arg,unused-ignore]
    except TypeError:
        return False
    return True


#: Read-only opens skip ``flush``: a walk pays open and release only.
OPEN_FLAGS = _open_flags()


def _no_opendir() -> bool:
    """Whether folders go without ``opendir``: this pyfuse3 passes ``readdir`` the folder's
    inode once ``opendir`` answered ENOSYS (the same patch), and this kernel (5.1+,
    FUSE_NO_OPENDIR_SUPPORT) then sends no opendir or releasedir for any folder again."""
    if not getattr(pyfuse3, "NO_OPENDIR_SUPPORT", False):
        return False
    try:
        release = tuple(int(n) for n in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return release >= (5, 1)


#: The kernel lists every folder it listed before from its cache, until the view says the
#: listing changed (``Changes.invalidations``, ``PAGES``): a walk pays nothing for a folder.
NO_OPENDIR = _no_opendir()
#: How much of a file the kernel is given at its open (``Operations._push``): all of most
#: (conversation.md averages 170 KiB in the 1 GB bench corpus), the start of a big one.
PUSH_BYTES = 1 << 20
#: Open flags that may change a file (an open without them only reads).
WRITES = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND
#: How many times a request lets blocking work run (or other requests pass) before it is
#: answered EAGAIN: a session that never stops changing does not hold a request forever.
MAX_STEPS = 100_000

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
        Asked.requests += 1
        if log.isEnabledFor(logging.DEBUG):  # --debug: every request
            log.debug("%s%r", fn.__name__, args[1:])
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except tuple(ERRNO) as exc:
            code = _errno_of(exc)
            log.debug("%s%r: %s (%s)", fn.__name__, args[1:], errno.errorcode[code], exc)
            raise pyfuse3.FUSEError(code) from None
        except OSError as exc:  # the real file system said no (a full disk, say): pass it on
            log.warning("%s%r: %s", fn.__name__, args[1:], exc)
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        except Exception:
            log.exception("unexpected error in %s%r: answered EIO", fn.__name__, args[1:])
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapped


def now(fn: Callable[P, R | None]) -> Callable[P, R | None]:
    """A synchronous answer, which the patched pyfuse3 asks before the coroutine handler of
    the same request (``Operations.lookup_now`` and the rest; a stock pyfuse3 never calls
    these, and each handler tries the same answer first itself). None passes the request
    on to the handler (False for ``release_now`` and ``readdir_now``), also when the core
    raised: the handler then answers with the errno (or EIO and a log line), as for any
    other request. Logged and counted as the handler logs and counts."""
    name = fn.__name__.removesuffix("_now")

    @functools.wraps(fn)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R | None:
        Asked.last = time.monotonic()
        try:
            answer = fn(*args, **kwargs)
        except Exception:
            return None
        if answer is None or answer is False:
            return answer
        Asked.requests += 1
        Asked.at_once += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s%r", name, args[1:])
        return answer

    return wrapped


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
        view.defer = True  # blocking work comes back as Busy, run off the event loop here
        self.editor = Editor(view, cap)
        self.actions = Actions(view)
        self.read_only = read_only
        #: whether the live view sees every change (then the kernel keeps answers longer)
        self.watched: Callable[[], bool] = lambda: False
        self._fh = itertools.count(1)
        #: what the kernel is told to drop (``drain``), and saves wait for (``settled``)
        self.invalidator = Invalidator(view, self._dropped)
        #: saves and session actions, written one at a time per session file
        self.saves = Saves(view, self.editor, put, self._core, self.invalidator)
        self._dirs: dict[int, list[tuple[str, v.Attr]]] = {}  # handle -> listing
        self._listings: dict[int, list[tuple[str, v.Attr]]] = {}  # (NO_OPENDIR) inode -> one
        self._files = OpenFiles()  # read handles: what each one reads
        #: Files whose first bytes the kernel was given (``_push``) since their pages were
        #: last dropped; None until the kernel's ``init`` (no page cache to give them to).
        self._pushed: set[int] | None = None
        # Folders a recursive removal was told it removed (they stay): the kernel marked its
        # inode dead, so the folder comes back under a new generation, as a new inode.
        self._generation: dict[int, int] = {}

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

    def _entry(self, a: v.Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.generation = self._generation.get(a.ino, 0)
        e.st_mode = a.mode
        e.st_size = a.size
        e.st_nlink = a.nlink
        e.st_uid = a.uid
        e.st_gid = a.gid
        e.st_blksize = 4096
        e.st_blocks = (a.size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = a.mtime_ns
        mutable = WATCHED_TIMEOUT if self.watched() else MUTABLE_TIMEOUT
        e.attr_timeout = IMMUTABLE_TIMEOUT if a.immutable else mutable
        # An entry folder never changes, but its name may come to mean a newer version of
        # the file (a rewrite, a new epoch): names of folders are looked up again sooner.
        dir_name = a.immutable and stat.S_ISDIR(a.mode)
        e.entry_timeout = MUTABLE_TIMEOUT if dir_name else e.attr_timeout
        if a.scratch:
            # Scratch names change under the kernel (a save lifts a whiteout, a rename over a
            # message consumes a temp file): rather than invalidate names in folders where
            # editors hold the lock (a daemon killed then leaves an unkillable thread and a
            # dead mount), the kernel asks again at every use. They are few and short-lived.
            e.entry_timeout = e.attr_timeout = 0
        return e

    @staticmethod
    def _none() -> pyfuse3.EntryAttributes:
        """No such name, and there never will be: the kernel keeps the answer (inode 0)."""
        e = pyfuse3.EntryAttributes()
        e.st_ino = 0
        e.entry_timeout = IMMUTABLE_TIMEOUT
        return e

    def _taken(self, a: v.Attr) -> pyfuse3.EntryAttributes:
        """An entry the kernel takes a reference to (until its ``forget``)."""
        self.view.hold(a)
        return self._entry(a)

    # Synchronous answers (see ``now``): what a walk asks is mostly a name that is never
    # there, or a kept answer of a session whose file is unchanged since it answered. A
    # cold rg sends 26 requests a session; each answered here costs no coroutine (three
    # with the handler's wrapper), no request context and no await.

    @now
    def lookup_now(self, parent_inode: int, name: bytes) -> pyfuse3.EntryAttributes | None:
        return self._kept_entry(parent_inode, os.fsdecode(name))

    @now
    def getattr_now(self, inode: int) -> pyfuse3.EntryAttributes | None:
        kept = self.view.keeping.kept_attr(inode)
        return None if kept is None else self._entry(kept)

    @now
    def readlink_now(self, inode: int) -> bytes | None:
        return self.view.keeping.kept_link(inode)

    @now
    def open_now(self, inode: int, flags: int) -> pyfuse3.FileInfo | None:
        return self._open_later(inode, flags)

    @now
    def read_now(self, fh: int, off: int, size: int) -> bytes | None:
        snap = self._files.get(fh)
        if snap is None or self.view.keeping.grew(snap, off, size):
            return None  # (being written; or it grew since it was kept: see ``read``)
        try:
            self._filled(snap)
            return snap.read(off, size)
        except v.Busy:
            return None  # (a parse, or a big part of conversation.md, to make off the loop)

    @now
    def release_now(self, fh: int) -> bool:
        if self.editor.owns(fh):
            return False  # (the last save may be made)
        self._close_reader(fh)
        return True

    @now
    def readdir_now(self, fh: int, start_id: int, token: Any) -> bool:
        if not NO_OPENDIR:
            return False
        listing = self._kept_continued(fh, start_id)
        if listing is None:
            return False
        self._reply(listing, start_id, token)
        return True

    def _kept_entry(self, parent_inode: int, n: str) -> pyfuse3.EntryAttributes | None:
        if self.view.never(parent_inode, n):
            return self._none()
        kept = self.view.keeping.kept_child(parent_inode, n)
        if kept is not None:  # (a session whose file is unchanged since it answered)
            return self._taken(kept)
        return None

    @handler
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        n = os.fsdecode(name)
        entry = self._kept_entry(parent_inode, n)
        if entry is not None:
            return entry
        await self._ready(parent_inode)
        try:
            child = self.view.resolve(parent_inode, n)
        except v.NotFound:
            self.view.looked_up(parent_inode, n, None)
            raise
        with self.view.pinned(child):
            await self._ready(child, attr_only=True)  # tree.txt's size: rendered off the loop
            a = self.view.getattr(child)
        self.view.looked_up(parent_inode, n, a)
        return self._taken(a)

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        kept = self.view.keeping.kept_attr(inode)
        if kept is not None:
            return self._entry(kept)
        await self._ready(inode, attr_only=True)
        return self._entry(self.view.getattr(inode))

    @handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        kept = self.view.keeping.kept_link(inode)
        if kept is not None:
            return kept
        await self._ready(inode)
        return self.view.readlink(inode)

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        if NO_OPENDIR:
            # The first opendir, and the last: the kernel then opens every folder itself,
            # and keeps each listing readdir answered until the view drops it (PAGES).
            log.debug("opendir: ENOSYS, the kernel lists folders from its cache from now on")
            raise pyfuse3.FUSEError(errno.ENOSYS)
        fh = next(self._fh)
        self._dirs[fh] = await self.listing(inode)
        return fh

    async def listing(self, inode: int) -> list[tuple[str, v.Attr]]:
        listing = self.view.keeping.kept_listing(inode)
        if listing is None:
            await self._ready(inode, listing=True)
            listing = self.view.children(inode)
        return listing

    @handler
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        listing = await self._continued(fh, start_id) if NO_OPENDIR else self._dirs.get(fh, [])
        self._reply(listing, start_id, token)

    def _reply(self, listing: list[tuple[str, v.Attr]], start: int, token: Any) -> None:
        for i in range(start, len(listing)):
            name, attr = listing[i]
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(attr), i + 1):
                break
            self.view.hold(attr)  # each entry taken is a lookup (readdirplus)

    async def _continued(self, ino: int, start: int) -> list[tuple[str, v.Attr]]:
        """The listing of folder ``ino`` (without opendir, readdir is given the inode) that
        a readdir from ``start`` goes on with: made at 0, kept until its end is asked for,
        so one listing's entries and offsets agree."""
        listing = self._kept_continued(ino, start)
        if listing is None:
            listing = self._going_on(ino, start, await self.listing(ino))
        return listing

    def _kept_continued(self, ino: int, start: int) -> list[tuple[str, v.Attr]] | None:
        """``_continued`` from what is kept (the listing begun, a session's kept answers),
        or None when the listing must be made."""
        listing = (self._listings.get(ino) if start else None) or self.view.keeping.kept_listing(
            ino
        )
        return None if listing is None else self._going_on(ino, start, listing)

    def _going_on(
        self, ino: int, start: int, listing: list[tuple[str, v.Attr]]
    ) -> list[tuple[str, v.Attr]]:
        """``listing``, kept for the readdirs of folder ``ino`` after the one from ``start``
        until its end is asked for."""
        if start >= len(listing):
            self._listings.pop(ino, None)
        else:
            self._listings[ino] = listing
        return listing

    @handler
    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    @handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        opened = self._open_later(inode, flags)
        if opened is not None:
            return opened
        fh = next(self._fh)
        writes = flags & WRITES
        await self._ready(inode)
        if writes and self.read_only:
            raise pyfuse3.FUSEError(errno.EROFS)
        if self.editor.open(fh, inode, flags):
            # Written files bypass the page cache: what a reader sees is always our bytes.
            return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)
        # Every open file reads a snapshot taken here, so a reader holding it open sees one
        # consistent version while its session grows, is rewritten or disappears. What can
        # change bypasses the page cache (but tree.txt and session.json of the file as it
        # is, see View.cacheable), so invalidating it seldom waits on page locks.
        snap = self.view.snapshot(inode)
        self._files.add(fh, inode, snap)
        # A message being written: the kernel's size for it follows the writer's bytes, so
        # this reader reads ours (the saved version) past the kernel's size and page cache.
        # conversation.md only grows at its end: a repeated grep -r reads it from the cache.
        cached = self.view.cacheable(inode, snap.size) and not self.editor.writing(inode)
        if cached:
            self._push(fh, inode, snap)
        else:
            self._dropped(inode)  # (the kernel drops the pages at such an open)
        return reading(fh, cached)

    def _open_later(self, inode: int, flags: int) -> pyfuse3.FileInfo | None:
        """A read of a whole-session file of a session whose file is unchanged since it
        answered: the kernel knows its size, and its page cache most likely has the bytes."""
        later = None if flags & WRITES else self.view.keeping.later(inode)
        if later is None:
            return None
        fh = next(self._fh)
        self._files.add(fh, inode, later)
        self._push(fh, inode, later)
        return reading(fh, cached=True)

    def _push(self, fh: int, ino: int, snap: v.Snapshot) -> None:
        """Give the kernel the first :data:`PUSH_BYTES` of file ``ino`` for its page cache
        at the open of read handle ``fh``, before anyone asks (FUSE_NOTIFY_STORE): a walk's
        reads then find them there, with no request each (a cold ``rg`` of a later mount
        sent five a session). Once per file until its pages are dropped; only while no other
        handle of it is open: a read in flight locks the pages the kernel fills, and the
        loop that would answer that read is this one (a stall of the mount). Whatever stops
        it (a parse or a render due first, the file gone) leaves the bytes to the reads."""
        if self._pushed is None or ino in self._pushed or not self._files.alone(ino):
            return
        try:
            self._filled(snap)
            data = snap.read(0, min(snap.size, PUSH_BYTES))
        except (v.Busy, v.ViewError, Unreadable, OSError):
            return
        except Exception:  # (a bug: the open still answers, else its handle would leak)
            log.exception("the first bytes of inode %d were not given to the kernel", ino)
            return
        if not data:
            return
        try:
            pyfuse3.notify_store(ino, 0, data)
        except OSError as err:  # the kernel no longer holds it, or stores nothing
            log.debug("store of %d: %s", ino, err)
            return
        self._pushed.add(ino)

    def _dropped(self, ino: int) -> None:
        if self._pushed is not None:
            self._pushed.discard(ino)

    def init(self) -> None:
        """The kernel's hello: from now on it has a page cache to give bytes to."""
        self._pushed = set()

    def _filled(self, snap: v.Snapshot) -> None:
        """Make the bytes of a handle opened from kept answers, if not yet: from the shelf
        or the disk cache, else from its session, when it is parsed and up to date (else
        :class:`~pisessfs.view.Busy`: the handler's ``_ready`` runs what is due)."""
        if self._unfilled(snap):
            self.view.ready(snap.ino, False, False, set())
            self.view.keeping.fill(snap)

    def _unfilled(self, snap: v.Snapshot) -> TypeGuard[v.Later]:
        """A handle opened from kept answers whose bytes neither the shelf nor the disk
        cache has: its session must make them."""
        return (
            isinstance(snap, v.Later)
            and snap.inner is None
            and not self.view.keeping.unshelve(snap)
        )

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        if self.editor.owns(fh):
            return self.editor.read(fh, off, size)
        snap = self._files[fh]
        if self._unfilled(snap):
            await self._ready(snap.ino)  # not on the shelf either: the session is parsed
            self.view.keeping.fill(snap)
        elif self.view.keeping.grew(snap, off, size):
            await self._ready(snap.ino)  # (tail -f of conversation.md: it grew since)
            self.view.keeping.catch_up(snap)
        return await self._core(snap.read, off, size)  # (conversation.md: Busy to make a part)

    @handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return self.editor.write(fh, off, buf)

    @handler
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        await self._ready(parent_inode)
        fh = next(self._fh)
        attr = self.editor.create(fh, parent_inode, os.fsdecode(name), mode, ctx.uid, ctx.gid)
        self.drain()
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False), self._taken(attr)

    @handler
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        await self._ready(parent_inode)
        attr = self.editor.symlink(parent_inode, os.fsdecode(name), target, ctx.uid, ctx.gid)
        self.drain()
        return self._taken(attr)

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
            self._generation[ino] = self._generation.get(ino, 0) + 1
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
        return self._entry(a)

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.saves.commit(fh)

    @handler
    async def flush(self, fh: int) -> None:
        # The commit point: errors here reach the program's close() (release's are lost).
        await self.saves.commit(fh)

    @handler
    async def release(self, fh: int) -> None:
        self._close_reader(fh)
        if not self.editor.owns(fh):
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

    def _close_reader(self, fh: int) -> None:
        reader = self._files.pop(fh)
        if reader is not None:
            reader.close()

    def drain(self) -> None:
        """Queue the kernel invalidations the core asked for (``Invalidator.drain``)."""
        self.invalidator.drain()

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
                self._listings.pop(ino, None)
                self._dropped(ino)
                self.editor.forget(ino)
            log.debug("forget %d inodes: %d named, %d held", len(inode_list), *self.view.named())
        except Exception:
            log.exception("forget failed (ignored)")


def reading(fh: int, cached: bool) -> pyfuse3.FileInfo:
    """What the kernel is told of a read-only open: through the page cache or around it,
    and (with ``OPEN_FLAGS``) no ``flush`` at its close: a reader has nothing to commit."""
    fi = pyfuse3.FileInfo(fh=fh, keep_cache=cached, direct_io=not cached)
    if OPEN_FLAGS:
        fi.noflush = True
    return fi
