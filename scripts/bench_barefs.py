#!/usr/bin/env python3
"""A bare pyfuse3 filesystem serving a directory tree from memory: the floor of scripts/bench.

It loads every file, folder and symlink under SOURCE into dicts at start, then serves them
read-only with nothing between the kernel and the bytes: long entry/attr timeouts, readdirplus
replies with attributes, ``keep_cache`` on every open, a no-op ``flush`` and ``release``, and
(with pyfuse3 built with patches/pyfuse3-3.5.0-walks.patch, as pisessfs is) no ``flush``
at a close, no ``opendir`` and listings cached by the kernel: the same as pisessfs's readers,
and ``ENOATTR`` for every extended attribute (pisessfs serves ``user.pi.*`` xattrs, so it cannot
answer ENOSYS and have the kernel stop asking). Mount options match pisessfs's
(``default_permissions``, ``auto_unmount``, ``noatime``).

    .venv/bin/python scripts/bench_barefs.py SOURCE MOUNTPOINT

Runs in the foreground until unmounted (``fusermount3 -u MOUNTPOINT``) or SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import stat
import sys
from collections.abc import Sequence
from types import FrameType

import pyfuse3
import trio

from pisessfs.reads import NO_OPENDIR, reading

#: Everything here is immutable for the life of the mount: cache it as long as pisessfs caches
#: its immutable nodes (pisessfs/reads.py, IMMUTABLE_TIMEOUT).
TIMEOUT = 3600.0
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND


class BareFS(pyfuse3.Operations):
    """Inode table in dicts, loaded once from a directory on disk."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.attrs: dict[int, pyfuse3.EntryAttributes] = {}
        self.listing: dict[int, list[tuple[bytes, int]]] = {}
        self.names: dict[int, dict[bytes, int]] = {}
        self.data: dict[int, bytes] = {}
        self.links: dict[int, bytes] = {}
        self._next = pyfuse3.ROOT_INODE + 1
        self.files = self.dirs = self.symlinks = self.nbytes = 0
        root = os.fsencode(source)
        self.attrs[pyfuse3.ROOT_INODE] = self._attr(pyfuse3.ROOT_INODE, os.lstat(root))
        self._load_dir(pyfuse3.ROOT_INODE, root)

    def _attr(self, ino: int, st: os.stat_result) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.st_mode = st.st_mode
        e.st_nlink = st.st_nlink
        e.st_uid = st.st_uid
        e.st_gid = st.st_gid
        e.st_size = st.st_size
        e.st_blksize = 4096
        e.st_blocks = (st.st_size + 511) // 512
        e.st_atime_ns = st.st_atime_ns
        e.st_mtime_ns = st.st_mtime_ns
        e.st_ctime_ns = st.st_ctime_ns
        e.entry_timeout = e.attr_timeout = TIMEOUT
        return e

    def _load_dir(self, ino: int, path: bytes) -> None:
        self.dirs += 1
        with os.scandir(path) as it:
            children = sorted(it, key=lambda d: d.name)
        listing: list[tuple[bytes, int]] = []
        for d in children:
            child = self._next
            self._next += 1
            st = d.stat(follow_symlinks=False)
            self.attrs[child] = self._attr(child, st)
            listing.append((d.name, child))
            if stat.S_ISDIR(st.st_mode):
                self._load_dir(child, d.path)
            elif stat.S_ISLNK(st.st_mode):
                self.links[child] = os.readlink(d.path)
                self.symlinks += 1
            else:
                with open(d.path, "rb") as f:
                    self.data[child] = f.read()
                self.files += 1
                self.nbytes += st.st_size
        self.listing[ino] = listing
        self.names[ino] = dict(listing)

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        names = self.names.get(parent_inode)
        ino = names.get(name) if names is not None else None
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attrs[ino]

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        try:
            return self.attrs[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        try:
            return self.links[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EINVAL) from None

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        if inode not in self.listing:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if NO_OPENDIR:  # as pisessfs: the kernel opens folders itself, keeps every listing
            raise pyfuse3.FUSEError(errno.ENOSYS)
        return inode  # (readdir is given the handle: the inode, either way)

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        listing = self.listing[fh]
        attrs = self.attrs
        for i in range(start_id, len(listing)):
            name, ino = listing[i]
            if not pyfuse3.readdir_reply(token, name, attrs[ino], i + 1):
                break

    async def releasedir(self, fh: int) -> None:
        return None

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if inode not in self.data:
            raise pyfuse3.FUSEError(errno.EISDIR if inode in self.listing else errno.ENOENT)
        if flags & _WRITE_FLAGS:
            raise pyfuse3.FUSEError(errno.EACCES)
        return reading(inode, cached=True)  # as pisessfs answers a reader

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return self.data[fh][off : off + size]

    async def flush(self, fh: int) -> None:
        return None

    async def release(self, fh: int) -> None:
        return None

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        raise pyfuse3.FUSEError(pyfuse3.ENOATTR)

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        return []

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("source", help="directory whose tree is served")
    p.add_argument("mountpoint")
    args = p.parse_args(argv)
    ops = BareFS(args.source)
    print(
        f"barefs: {ops.files} files, {ops.dirs} dirs, {ops.symlinks} symlinks, {ops.nbytes} bytes",
        file=sys.stderr,
        flush=True,
    )
    options = set(pyfuse3.default_options)
    options |= {"fsname=barefs", "subtype=barefs", "auto_unmount", "noatime"}
    blocked = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    pyfuse3.init(ops, args.mountpoint, options)
    clean = False
    try:
        trio.run(_serve, blocked)
        clean = True
    finally:
        pyfuse3.close(unmount=clean)
    return 0


async def _serve(blocked: set[signal.Signals]) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        pyfuse3.terminate()

    for sig in blocked:
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    await pyfuse3.main()


if __name__ == "__main__":
    sys.exit(main())
