"""The core driven as the mount drives it, without FUSE: the tier of s3ql's handlers tested
with a fake context.

A :class:`Driven` view answers each request kind as ``reads.Reads`` does: the node brought up
to date first (``View.ready``), then the view's answer; the blocking work the core hands back
(``Busy``) runs inline (``errors.settled``) where the adapter runs it off its event loop.
There is one core mode: what these tests see is what the mount's requests see.
"""

from __future__ import annotations

from typing import Any

from pisessfs.errors import settled
from pisessfs.handles import Snapshot
from pisessfs.inodes import Attr
from pisessfs.loaded import Loaded
from pisessfs.sessions import Store
from pisessfs.view import View


class Driven:
    """A :class:`View` whose answers are the mount's (everything else is the view's own)."""

    def __init__(self, store: Store | View) -> None:
        self.view = store if isinstance(store, View) else View(store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    def ready(self, ino: int, attr_only: bool = False, listing: bool = False) -> None:
        settled(self.view.ready, ino, attr_only, listing, set())

    def resolve(self, parent: int, name: str) -> int:
        self.ready(parent)
        return settled(self.view.resolve, parent, name)

    def lookup(self, parent: int, name: str) -> Attr:
        child = self.resolve(parent, name)
        self.ready(child, attr_only=True)
        return settled(self.view.getattr, child)

    def getattr(self, ino: int) -> Attr:
        self.ready(ino, attr_only=True)
        return settled(self.view.getattr, ino)

    def readlink(self, ino: int) -> bytes:
        self.ready(ino)
        return settled(self.view.readlink, ino)

    def children(self, ino: int) -> list[tuple[str, Attr]]:
        self.ready(ino, listing=True)
        return settled(self.view.children, ino)

    def names(self, ino: int) -> set[str]:
        self.ready(ino, listing=True)
        return settled(self.view.names, ino)

    def snapshot(self, ino: int) -> Snapshot:
        self.ready(ino)
        return settled(self.view.snapshot, ino)

    def content(self, ino: int) -> bytes:
        self.ready(ino)
        return settled(self.view.content, ino)

    def xattrs(self, ino: int) -> dict[str, bytes]:
        self.ready(ino)
        return settled(self.view.xattrs, ino)

    def up_to_date(self, path: str) -> Loaded:
        return settled(self.view.up_to_date, path)

    def state(self, path: str) -> Loaded:
        return settled(self.view.up_to_date, path)
