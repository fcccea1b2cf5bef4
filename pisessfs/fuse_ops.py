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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio

from . import view as v
from .sessions import Unreadable

log = logging.getLogger(__name__)

#: Core exception -> errno. The one place errno is chosen (ARCHITECTURE.md).
ERRNO: dict[type[Exception], int] = {
    v.NotFound: errno.ENOENT,
    v.NotADir: errno.ENOTDIR,
    v.IsADir: errno.EISDIR,
    v.Denied: errno.EACCES,
    v.NotALink: errno.EINVAL,
    Unreadable: errno.EACCES,
}

#: Kernel cache lifetimes: immutable nodes (entry folders, message files) for an hour;
#: everything that changes when a session grows is looked at again after a second.
IMMUTABLE_TIMEOUT = 3600.0
MUTABLE_TIMEOUT = 1.0

P = ParamSpec("P")
R = TypeVar("R")


def handler(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Answer core errors with their errno and anything unexpected with EIO, never crash."""

    @functools.wraps(fn)
    async def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except tuple(ERRNO) as exc:
            code = _errno_of(exc)
            log.debug("%s%r: %s (%s)", fn.__name__, args[1:], errno.errorcode[code], exc)
            raise pyfuse3.FUSEError(code) from None
        except Exception:
            log.exception("unexpected error in %s%r: answered EIO", fn.__name__, args[1:])
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapped


def _errno_of(exc: Exception) -> int:
    for cls, code in ERRNO.items():
        if isinstance(exc, cls):
            return code
    return errno.EIO


class Operations(pyfuse3.Operations):
    """pyfuse3 handlers over a view; state lives in the view, handles in two small maps."""

    def __init__(self, view: v.View, read_only: bool = True) -> None:
        super().__init__()
        self.view = view
        self.read_only = read_only
        self.uid = os.getuid()
        self.gid = os.getgid()
        self._fh = itertools.count(1)
        self._dirs: dict[int, list[tuple[str, v.Attr]]] = {}
        self._files: dict[int, tuple[int, bytes | None]] = {}  # fh -> (ino, snapshot)

    async def _ready(self, ino: int, attr_only: bool = False) -> None:
        load = self.view.loader(ino, attr_only)
        if load is not None:
            await trio.to_thread.run_sync(load)

    def _entry(self, a: v.Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.st_mode = a.mode
        e.st_size = a.size
        e.st_nlink = a.nlink
        e.st_uid = self.uid
        e.st_gid = self.gid
        e.st_blksize = 4096
        e.st_blocks = (a.size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = a.mtime_ns
        timeout = IMMUTABLE_TIMEOUT if a.immutable else MUTABLE_TIMEOUT
        e.entry_timeout = e.attr_timeout = timeout
        return e

    @handler
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        await self._ready(parent_inode)
        return self._entry(self.view.lookup(parent_inode, os.fsdecode(name)))

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        await self._ready(inode, attr_only=True)
        return self._entry(self.view.getattr(inode))

    @handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        await self._ready(inode)
        return self.view.readlink(inode)

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        await self._ready(inode)
        fh = next(self._fh)
        self._dirs[fh] = self.view.children(inode)
        return fh

    @handler
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        listing = self._dirs.get(fh, [])
        for i in range(start_id, len(listing)):
            name, attr = listing[i]
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(attr), i + 1):
                break

    @handler
    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    @handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        await self._ready(inode)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise pyfuse3.FUSEError(self._refuse_write(inode))
        attr = self.view.getattr(inode)
        # Files that change as the session grows are read from a snapshot taken here, so a
        # reader holding them open sees one consistent version.
        snapshot = None if attr.immutable else self.view.content(inode)
        fh = next(self._fh)
        self._files[fh] = (inode, snapshot)
        return pyfuse3.FileInfo(fh=fh, keep_cache=attr.immutable)

    def _refuse_write(self, inode: int) -> int:
        if self.read_only:
            log.info("write to inode %d refused: the mount is read-only (-o ro)", inode)
            return errno.EROFS
        log.info("write to inode %d refused: this file is not writable", inode)
        return errno.EACCES

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        inode, snapshot = self._files[fh]
        if snapshot is not None:
            return snapshot[off : off + size]
        await self._ready(inode)
        return self.view.read(inode, off, size)

    @handler
    async def flush(self, fh: int) -> None:
        return None

    @handler
    async def release(self, fh: int) -> None:
        self._files.pop(fh, None)

    @handler
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
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
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    @handler
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    @handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Inode numbers are kept for the life of the mount (stable keys), nothing to free.
        return None
