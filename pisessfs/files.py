"""Every access to the sessions folder on disk, confined to it: the only module that opens files.

This module owns the security rule of DESIGN.md ("Reading damaged or hostile input"): nothing
outside the sessions root is ever opened, listed or written. Every path is walked from a
descriptor of the root, one component at a time, with ``O_NOFOLLOW`` on each: a symlink
anywhere on the way (a project folder, a session file, swapped in at any moment) fails the
open instead of leading out, and what is opened is checked to be a regular file (a FIFO never
blocks the mount). Callers hold no descriptors of their own: lines are read through a small
pool of descriptors, each tied to the identity (device, inode) of the file that was parsed, so
the number of open descriptors stays bounded however many sessions are parsed.

It knows nothing of sessions, only of paths under the root.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

POOL_SIZE = 16  # descriptors kept open for reading lines, whatever the number of sessions
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unreadable(Exception):
    """A file under the root cannot be read (permissions, gone, replaced, not a file)."""

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(f"{path}: {err.strerror or err}")
        self.path = path
        self.errno = err.errno


@dataclass(frozen=True, slots=True)
class Entry:
    """A name in a folder of the root, as the folder itself says (no link followed)."""

    name: str
    path: str
    is_file: bool
    is_dir: bool


_reported: set[tuple[str, int]] = set()
_reported_lock = threading.Lock()


def report_once(what: str, err: OSError) -> None:
    """Log a resource or permission failure once per kind, not once per request."""
    key = (what, err.errno or 0)
    with _reported_lock:
        if key in _reported:
            return
        _reported.add(key)
    if err.errno in (errno.EMFILE, errno.ENFILE):
        log.error(
            "%s: %s: the descriptor limit is reached; requests that need a file fail with "
            "this error until descriptors are free (raise `ulimit -n`)",
            what,
            err.strerror,
        )
    else:
        log.warning("%s: %s", what, err.strerror or err)


def reach(root: str) -> int:
    """The permission bits the folders above ``root`` let through to it.

    Another user reads what is in the sessions folder only if every folder above it lets
    them pass: a class (group, others) that some ancestor does not let search is stripped
    from everything the mount shows. Conservative: a group allowed by an ancestor's group
    bit is still stripped, as the mount cannot tell which groups a caller has.
    """
    mask = 0o777
    cur = os.path.dirname(root)
    while True:
        try:
            mode = os.stat(cur).st_mode
        except OSError:
            return mask & 0o700
        if not mode & stat.S_IXOTH:
            mask &= ~0o007
        if not mode & stat.S_IXGRP or not mode & stat.S_IXOTH:
            mask &= ~0o070
        parent = os.path.dirname(cur)
        if parent == cur:
            return mask
        cur = parent


class Files:
    """The sessions root as a directory descriptor, and the descriptor pool below it."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._pool: OrderedDict[str, _Pooled] = OrderedDict()
        self._lock = threading.Lock()
        self.reach = reach(self.root)

    def close(self) -> None:
        with self._lock:
            for p in self._pool.values():
                p.retire()
            self._pool.clear()
        os.close(self.fd)

    # -- paths -----------------------------------------------------------------------------

    def parts(self, path: str) -> list[str]:
        """The components of ``path`` below the root (ValueError when it is not below it)."""
        if path == self.root:
            return []
        prefix = self.root.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise ValueError(f"{path} is not under {self.root}")
        parts = path[len(prefix) :].split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{path}: not a plain path under the root")
        return parts

    @contextlib.contextmanager
    def parent(self, path: str) -> Iterator[tuple[int, str]]:
        """A descriptor of ``path``'s folder, walked from the root without following links,
        and the last component. The root's own descriptor is not closed."""
        parts = self.parts(path)
        if not parts:
            raise ValueError("the root has no parent here")
        fd = self._folder(parts[:-1])
        try:
            yield fd, parts[-1]
        finally:
            if fd != self.fd:
                os.close(fd)

    def _folder(self, folders: list[str]) -> int:
        """A descriptor of the folder ``folders`` lead to from the root, each reached without
        following links (the root's own when there are none: close any other)."""
        fd = self.fd
        try:
            for part in folders:
                below = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if fd != self.fd:
                    os.close(fd)
                fd = below
        except BaseException:
            if fd != self.fd:
                os.close(fd)
            raise
        return fd

    def lstat(self, path: str) -> os.stat_result:
        """``stat`` of ``path`` itself (a link is a link), reached without following links.
        (Not through :meth:`parent`: a cold walk asks this once or twice a session, and its
        context manager cost as much as the calls.)"""
        try:
            if path == self.root:
                return os.fstat(self.fd)
            *folders, name = self.parts(path)
            fd = self._folder(folders)
            try:
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
            finally:
                if fd != self.fd:
                    os.close(fd)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                report_once(f"stat {path}", err)
            raise Unreadable(path, err) from None

    def lstats(self, folder: str, names: list[str]) -> dict[str, os.stat_result]:
        """``lstat`` of each of ``names`` in ``folder`` (the root or a folder below it),
        through one descriptor of the folder reached without following links (``lstat`` of
        each path walks it again: three calls a name). A name that cannot be looked at is
        left out."""
        try:
            if folder == self.root:
                fd = os.dup(self.fd)
            else:
                with self.parent(folder) as (dfd, name):
                    fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except OSError as err:
            raise Unreadable(folder, err) from None
        try:
            out: dict[str, os.stat_result] = {}
            for name in names:
                with contextlib.suppress(OSError):
                    out[name] = os.stat(name, dir_fd=fd, follow_symlinks=False)
            return out
        finally:
            os.close(fd)

    def open(self, path: str, flags: int = os.O_RDONLY) -> int:
        """A descriptor of the regular file ``path``; raises :class:`Unreadable`.

        ``O_NONBLOCK``: a FIFO swapped in opens at once and is refused, instead of blocking.
        """
        try:
            with self.parent(path) as (dfd, name):
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                report_once(f"open {path}", err)
            if err.errno == errno.ELOOP:
                err = OSError(errno.ELOOP, "a symbolic link, not followed")
            raise Unreadable(path, err) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Unreadable(path, OSError(errno.EACCES, "not a regular file"))
        return fd

    def scandir(self, folder: str) -> list[Entry]:
        """The names in ``folder`` (the root or one below it), hidden ones left out.

        Raises :class:`Unreadable`: a folder that cannot be listed fails its listing (never
        a silent half-listing).
        """
        try:
            if folder == self.root:  # a descriptor of its own: a dup would share the offset
                fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
            else:
                with self.parent(folder) as (dfd, name):
                    fd = os.open(
                        name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=dfd,
                    )
            try:
                with os.scandir(fd) as it:
                    out = [
                        Entry(
                            d.name,
                            os.path.join(folder, d.name),
                            d.is_file(follow_symlinks=False),
                            d.is_dir(follow_symlinks=False),
                        )
                        for d in it
                        if not d.name.startswith(".")
                    ]
            finally:
                os.close(fd)
        except OSError as err:
            report_once(f"list {folder}", err)
            raise Unreadable(folder, err) from None
        out.sort(key=lambda e: e.name)
        return out

    # -- the descriptor pool ---------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self, path: str, dev: int, ino: int) -> Iterator[int]:
        """A descriptor of the file at ``path`` that is the file (``dev``, ``ino``) parsed.

        Raises :class:`Unreadable` (ENOENT) when ``path`` is now another file or none.
        """
        p = self._borrow(path, dev, ino)
        try:
            yield p.fd
        finally:
            with self._lock:
                p.refs -= 1
                if p.retired and p.refs == 0:
                    os.close(p.fd)

    def _borrow(self, path: str, dev: int, ino: int) -> _Pooled:
        with self._lock:
            p = self._pool.get(path)
            if p is not None and (p.dev, p.ino) == (dev, ino):
                self._pool.move_to_end(path)
                p.refs += 1
                return p
        fd = self.open(path)  # outside the lock: opens may be slow
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            os.close(fd)
            raise Unreadable(path, OSError(errno.ENOENT, "replaced since it was read"))
        fresh = _Pooled(fd, dev, ino)
        fresh.refs = 1
        with self._lock:
            old = self._pool.pop(path, None)
            if old is not None:
                old.retire()
            self._pool[path] = fresh
            while len(self._pool) > POOL_SIZE:
                _, victim = self._pool.popitem(last=False)
                victim.retire()
        return fresh


class _Pooled:
    """One pooled descriptor; closed when retired from the pool and no reader holds it."""

    __slots__ = ("dev", "fd", "ino", "refs", "retired")

    def __init__(self, fd: int, dev: int, ino: int) -> None:
        self.fd = fd
        self.dev = dev
        self.ino = ino
        self.refs = 0
        self.retired = False

    def retire(self) -> None:  # under the pool's lock
        self.retired = True
        if self.refs == 0:
            os.close(self.fd)


def whole_lines(
    read: Callable[[int, int], bytes], start: int, end: int, block: int, first: int = 0
) -> Iterator[tuple[bytes, int]]:
    """The whole lines of a file between ``start`` and ``end`` (``read(size, offset)``: its
    ``os.pread``), read ``block`` bytes at a time (``first`` bytes the first time), each
    with the offset just after its newline; a line cut short at ``end`` is not one."""
    rest, at, size = b"", start, first or block
    done = start  # (the offset after the last line handed out)
    while at < end:
        chunk = read(min(size, end - at), at)
        if not chunk:
            return
        at, size = at + len(chunk), block
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            done += len(line) + 1
            yield line, done
