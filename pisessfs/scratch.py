"""The in-memory scratch layer: the names editors create around a save.

This module owns the records only: a :class:`Node` (a scratch file or symlink, possibly
*bound* to a message it will commit), the per-folder :class:`Overlay` of names and
whiteouts, and :class:`Binding` (what a commit appends). Nothing here is ever written to a
session file, and all of it is gone at unmount. Which names bind, when a save commits and
where nodes go after a commit is decided in ``edits``; how overlays show in listings, in
``view``. :class:`ScratchLayer` holds them all: the nodes by inode and the overlays by
folder.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import NotFound
from .inodes import Attr, Inodes, Key
from .kind import Kind


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


class ScratchLayer:
    """The scratch nodes (by inode) and each folder's overlay of names and whiteouts."""

    def __init__(
        self, inodes: Inodes, relisted: Callable[[int], None], nodes: dict[int, Node]
    ) -> None:
        """``relisted(ino)``: folder ``ino`` lists other names now (the kernel is told);
        ``nodes``: scratch inode -> node, the table ``inodes`` keeps named."""
        self.inodes, self.relisted, self.nodes = inodes, relisted, nodes
        self.overlays: dict[Key, Overlay] = {}  # entry folder -> its scratch layer
        self._serial = 0

    def _node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise NotFound(f"scratch inode {ino} is gone")
        return node

    def node_of(self, key: Key) -> Node:
        """The scratch node of ``key``."""
        return self._node(self.inodes.known(key) or 0)

    def attr(self, ino: int) -> Attr:
        node = self._node(ino)
        size = len(node.target if node.is_link else node.data)
        key = self.inodes.key(ino)
        return Attr(ino, node.mode, size, node.mtime_ns, 1, False, True, node.uid, node.gid, key)

    def new_node(self, mode: int) -> Node:
        self._serial += 1
        node = Node(self.inodes.ino(Key(Kind.SCRATCH, k=self._serial)), mode)
        self.nodes[node.ino] = node
        return node

    def link(self, node: Node, folder: Key, name: str) -> None:
        """Show ``node`` as ``name`` in ``folder`` (replacing a scratch node of that name)."""
        self._relisted(folder)
        ov = self.overlays.setdefault(folder, Overlay())
        old = ov.names.get(name)
        if old is not None and old is not node:
            self.unlink(old, folder, name)
        ov.names[name] = node
        node.links.add((folder, name))

    def unlink(self, node: Node, folder: Key, name: str) -> None:
        self._relisted(folder)
        ov = self.overlays.get(folder)
        if ov is not None and ov.names.get(name) is node:
            del ov.names[name]
            if ov.empty():
                del self.overlays[folder]
        node.links.discard((folder, name))

    def drop_if_unused(self, node: Node, open_nodes: set[int]) -> None:
        """Free a scratch node nobody shows, holds open, or may still name: the kernel can
        keep a name for it for a moment after a rename over it, until its forget arrives."""
        if not node.links and node.ino not in open_nodes and node.forgotten:
            self.nodes.pop(node.ino, None)
            self.inodes.release(node.ino)

    def unlink_everywhere(self, node: Node) -> None:
        for folder, name in list(node.links):
            self.unlink(node, folder, name)

    def whiteout(self, folder: Key, name: str, on: bool) -> None:
        self._relisted(folder)
        ov = self.overlays.setdefault(folder, Overlay())
        (ov.whiteouts.add if on else ov.whiteouts.discard)(name)
        if ov.empty():
            del self.overlays[folder]

    def _relisted(self, folder: Key) -> None:
        """What ``folder`` lists is about to change (a save, a whiteout): the kernel keeps a
        folder's listing until told (fuse_ops.NO_OPENDIR), and a save at ``flush`` is no
        change of the folder it would see itself."""
        n = self.inodes.known(folder)
        if n is not None:
            self.relisted(n)
