"""The in-memory scratch layer: the names editors create around a save.

This module owns the records only: a :class:`Node` (a scratch file or symlink, possibly
*bound* to a message it will commit), the per-folder :class:`Overlay` of names and
whiteouts, and :class:`Binding` (what a commit appends). Nothing here is ever written to a
session file, and all of it is gone at unmount. Which names bind, when a save commits and
where nodes go after a commit is decided in ``edits``; how overlays show in listings, in
``view``.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Binding:
    """What saving a bound file appends: a user message under ``parent_id``.

    ``edit_of`` is the user message being edited (its images are carried over), None for a
    new message. A save commits only when its bytes differ from ``baseline``.
    """

    path: str
    epoch: int  # the version of the file the parent was read from (a rewrite is ESTALE)
    parent_id: str | None
    edit_of: str | None
    baseline: bytes
    alias: bool = False  # a file name (not a numbered one) that stands for its message


@dataclass(eq=False, slots=True)
class Node:
    """A scratch file or symlink; ``links`` are the (folder key, name) pairs that show it."""

    ino: int
    mode: int
    data: bytearray = field(default_factory=bytearray)
    target: bytes = b""
    binding: Binding | None = None
    mtime_ns: int = field(default_factory=time.time_ns)
    uid: int = field(default_factory=os.getuid)  # who created it (shown as its owner)
    gid: int = field(default_factory=os.getgid)
    links: set[tuple[Any, str]] = field(default_factory=set)
    snapshot_of: str | None = None  # message name this copy was renamed away from
    forgotten: bool = False  # the kernel dropped its inode (FUSE forget): free once unlinked

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)

    def truncate(self, size: int) -> None:
        if size < len(self.data):
            del self.data[size:]
        else:
            self.data.extend(bytes(size - len(self.data)))
        self.touch()

    def write(self, off: int, buf: bytes) -> None:
        if off > len(self.data):
            self.data.extend(bytes(off - len(self.data)))
        self.data[off : off + len(buf)] = buf
        self.touch()

    def touch(self) -> None:
        self.mtime_ns = time.time_ns()


@dataclass(slots=True)
class Overlay:
    """The scratch names of one folder and the message names hidden by a rename-away."""

    names: dict[str, Node] = field(default_factory=dict)
    whiteouts: set[str] = field(default_factory=set)
    # A committed file moved aside (vim's second save): re-creating the name edits that
    # message again instead of starting a new one.
    reserved: dict[str, Binding] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.names or self.whiteouts or self.reserved)


def binds_message(name: str) -> bool:
    """Whether a new file of this name becomes a message: ``*.md``, not hidden or ``#``."""
    return name.endswith(".md") and len(name) > 3 and not name.startswith((".", "#"))
