"""The adapter's read side: the answers to the requests a walk sends (lookup, getattr,
readlink, readdir, open, read, release) over the view, as pyfuse3 takes them, and what the
kernel is told of each file and folder (lifetimes, page cache, the first bytes of a file).

Each of them is one synchronous answer that raises :class:`~pisessfs.view.Busy` when
blocking work is due first; ``fuse_ops`` asks it at once (the patched pyfuse3's ``*_now``)
or from the coroutine handler, which runs the work off the loop and asks again.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import stat
from collections.abc import Callable
from typing import Any, TypeGuard

import pyfuse3

from . import view as v
from .edits import Editor
from .handles import OpenFiles
from .sessions import Unreadable

log = logging.getLogger(__name__)

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
Waited = tuple[str, str, int]  # a rendering a request waited for (``View.ready``)


class Reads:
    """Read requests answered over a view; the read handles and listings they hold."""

    def __init__(self, view: v.View, editor: Editor, read_only: bool) -> None:
        self.view, self.editor, self.read_only = view, editor, read_only
        #: whether the live view sees every change (then the kernel keeps answers longer)
        self.watched: Callable[[], bool] = lambda: False
        self.fh = itertools.count(1)  # handle numbers, of every open (writes too)
        self.dirs: dict[int, list[tuple[str, v.Attr]]] = {}  # handle -> listing (opendir)
        self.listings: dict[int, list[tuple[str, v.Attr]]] = {}  # (NO_OPENDIR) inode -> one
        self._files = OpenFiles()  # read handles: what each one reads
        #: Files whose first bytes the kernel was given (``_push``) since their pages were
        #: last dropped; None until the kernel's ``init`` (no page cache to give them to).
        self._pushed: set[int] | None = None
        # Folders a recursive removal was told it removed (they stay): the kernel marked its
        # inode dead, so the folder comes back under a new generation, as a new inode.
        self.generation: dict[int, int] = {}

    def entry(self, a: v.Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.generation = self.generation.get(a.ino, 0)
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
    def none() -> pyfuse3.EntryAttributes:
        """No such name, and there never will be: the kernel keeps the answer (inode 0)."""
        e = pyfuse3.EntryAttributes()
        e.st_ino = 0
        e.entry_timeout = IMMUTABLE_TIMEOUT
        return e

    def taken(self, a: v.Attr) -> pyfuse3.EntryAttributes:
        """An entry the kernel takes a reference to (until its ``forget``)."""
        self.view.hold(a)
        return self.entry(a)

    # Each read request kind has one answer (``lookup`` and the rest), which raises Busy
    # when blocking work is due first. The patched pyfuse3 asks it at once (``*_now``): what
    # a walk asks is mostly a name that is never there, or a kept answer of a session whose
    # file is unchanged since it answered, and each answered there costs no coroutine (three
    # with the handler's wrapper), no request context and no await. The coroutine handler
    # (the only path of a stock pyfuse3) asks it through ``_core``, which runs the work off
    # the loop and asks again.

    def lookup(self, parent: int, n: str, waited: set[Waited]) -> pyfuse3.EntryAttributes:
        if self.view.never(parent, n):
            return self.none()
        kept = self.view.keeping.kept_child(parent, n)
        if kept is not None:  # (a session whose file is unchanged since it answered)
            return self.taken(kept)
        self.view.ready(parent, False, False, waited)
        try:
            child = self.view.resolve(parent, n)
        except v.NotFound:
            self.view.looked_up(parent, n, None)
            raise
        self.view.ready(child, True, False, waited)  # tree.txt's size: rendered off the loop
        a = self.view.getattr(child)
        self.view.looked_up(parent, n, a)
        return self.taken(a)

    def getattr(self, inode: int, waited: set[Waited]) -> pyfuse3.EntryAttributes:
        kept = self.view.keeping.kept_attr(inode)
        if kept is not None:
            return self.entry(kept)
        self.view.ready(inode, True, False, waited)
        return self.entry(self.view.getattr(inode))

    def readlink(self, inode: int, waited: set[Waited]) -> bytes:
        kept = self.view.keeping.kept_link(inode)
        if kept is not None:
            return kept
        self.view.ready(inode, False, False, waited)
        return self.view.readlink(inode)

    def listing(self, inode: int, waited: set[Waited]) -> list[tuple[str, v.Attr]]:
        listing = self.view.keeping.kept_listing(inode)
        if listing is None:
            self.view.ready(inode, False, True, waited)
            listing = self.view.children(inode)
        return listing

    def readdir(self, fh: int, start: int, token: Any, waited: set[Waited]) -> bool:
        self._reply(self._continued(fh, start, waited), start, token)
        return True

    def _continued(self, fh: int, start: int, waited: set[Waited]) -> list[tuple[str, v.Attr]]:
        """The listing a readdir from ``start`` goes on with: the one opendir made; without
        opendir (readdir is given the folder's inode), one made at 0 and kept until its end
        is asked for, so one listing's entries and offsets agree."""
        if not NO_OPENDIR:
            return self.dirs.get(fh, [])
        kept = self._kept_continued(fh, start)
        if kept is None:
            kept = self._going_on(fh, start, self.listing(fh, waited))
        return kept

    def read(self, fh: int, off: int, size: int, waited: set[Waited]) -> bytes:
        if self.editor.owns(fh):
            return self.editor.read(fh, off, size)
        snap = self._files[fh]
        if self._unfilled(snap):  # not in the store: made from its session
            self.view.ready(snap.ino, False, False, waited)
            self.view.keeping.fill(snap)
        elif self.view.keeping.grew(snap, off, size):  # (tail -f of conversation.md)
            self.view.ready(snap.ino, False, False, waited)
            self.view.keeping.catch_up(snap)
        return snap.read(off, size)  # (conversation.md: Busy to make a part of it)

    def released(self, fh: int) -> bool:
        """Close a read handle (True); a write handle's last save is the handler's."""
        if self.editor.owns(fh):
            return False
        self.close_reader(fh)
        return True

    def _reply(self, listing: list[tuple[str, v.Attr]], start: int, token: Any) -> None:
        for i in range(start, len(listing)):
            name, attr = listing[i]
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self.entry(attr), i + 1):
                break
            self.view.hold(attr)  # each entry taken is a lookup (readdirplus)

    def _kept_continued(self, ino: int, start: int) -> list[tuple[str, v.Attr]] | None:
        """``_continued`` from what is kept (the listing begun, a session's kept answers),
        or None when the listing must be made."""
        begun = self.listings.get(ino) if start else None
        listing = begun or self.view.keeping.kept_listing(ino)
        return None if listing is None else self._going_on(ino, start, listing)

    def _going_on(
        self, ino: int, start: int, listing: list[tuple[str, v.Attr]]
    ) -> list[tuple[str, v.Attr]]:
        """``listing``, kept for the readdirs of folder ``ino`` after the one from ``start``
        until its end is asked for."""
        if start >= len(listing):
            self.listings.pop(ino, None)
        else:
            self.listings[ino] = listing
        return listing

    def open(self, inode: int, flags: int, waited: set[Waited]) -> pyfuse3.FileInfo:
        opened = self._open_later(inode, flags)
        if opened is not None:
            return opened
        writes = flags & WRITES
        self.view.ready(inode, False, False, waited)
        if writes and self.read_only:
            raise pyfuse3.FUSEError(errno.EROFS)
        fh = next(self.fh)
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
            self.dropped(inode)  # (the kernel drops the pages at such an open)
        return reading(fh, cached)

    def _open_later(self, inode: int, flags: int) -> pyfuse3.FileInfo | None:
        """A read of a whole-session file of a session whose file is unchanged since it
        answered: the kernel knows its size, and its page cache most likely has the bytes."""
        later = None if flags & WRITES else self.view.keeping.later(inode)
        if later is None:
            return None
        fh = next(self.fh)
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

    def dropped(self, ino: int) -> None:
        if self._pushed is not None:
            self._pushed.discard(ino)

    def init(self) -> None:
        """The kernel's hello: from now on it has a page cache to give bytes to."""
        self._pushed = set()

    def _filled(self, snap: v.Snapshot) -> None:
        """Make the bytes of a handle opened from kept answers, if not yet: from the store,
        else from its session, when it is parsed and up to date (else
        :class:`~pisessfs.view.Busy`: the handler's ``_ready`` runs what is due)."""
        if self._unfilled(snap):
            self.view.ready(snap.ino, False, False, set())
            self.view.keeping.fill(snap)

    def _unfilled(self, snap: v.Snapshot) -> TypeGuard[v.Later]:
        """A handle opened from kept answers whose bytes the store does not have: its
        session must make them."""
        return (
            isinstance(snap, v.Later)
            and snap.inner is None
            and not self.view.keeping.from_store(snap)
        )

    def close_reader(self, fh: int) -> None:
        reader = self._files.pop(fh)
        if reader is not None:
            reader.close()


def reading(fh: int, cached: bool) -> pyfuse3.FileInfo:
    """What the kernel is told of a read-only open: through the page cache or around it,
    and (with ``OPEN_FLAGS``) no ``flush`` at its close: a reader has nothing to commit."""
    fi = pyfuse3.FileInfo(fh=fh, keep_cache=cached, direct_io=not cached)
    if OPEN_FLAGS:
        fi.noflush = True
    return fi
