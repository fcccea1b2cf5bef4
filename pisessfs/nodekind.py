"""What every kind of node is (:class:`NodeKind`, the default of each of its answers) and
what one is asked before it answers (:class:`Request`); the kinds themselves are in
``layout`` (a session's nodes) and ``finds`` (``usage/`` and ``search/``)."""

from __future__ import annotations

import enum
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .errors import IsADir, NotADir, NotALink, NotFound
from .handles import Snapshot
from .kind import Kind
from .sessions import Loaded, SessionFile, Work

if TYPE_CHECKING:
    from .view import Attr, Key, View

#: A session folder's listed names and their kinds, in listing order.
SESSION_NAMES = {
    "conversation.md": Kind.CONVERSATION,
    "current": Kind.CURRENT,
    "current.md": Kind.CURRENT_VIEW,
    "leaves": Kind.LEAVES,
    "nodes": Kind.NODES,
    "parent": Kind.PARENT,
    "tree.txt": Kind.TREE,
    "session.json": Kind.JSON,
    "session.jsonl": Kind.RAW_LINK,
}

Waited = set[tuple[str, str, int]]


@dataclass(frozen=True, slots=True)
class Request:
    """What :meth:`NodeKind.step` is asked: a node of session ``sf`` (now ``s``), and what
    of it the request wants (see ``View.ready``)."""

    sf: SessionFile
    s: Loaded
    key: Key
    attr_only: bool
    listing: bool
    waited: Waited


class Growth(enum.Enum):
    """What the kernel drops of a node when its session file grows (``Changes.session``)."""

    NOTHING = enum.auto()  # what an entry shows never changes
    ATTRS = enum.auto()  # its size or times: its bytes only grew, or are read around the cache
    PAGES = enum.auto()  # its listing, link target or cached bytes too: they changed


class NodeKind:
    """Default behaviour: a node with nothing in it. Subclasses set ``fmt`` and override."""

    name: ClassVar[Kind]
    fmt: ClassVar[int] = stat.S_IFREG
    #: its bytes and attributes never change (the kernel may cache them for long)
    immutable: ClassVar[bool] = False
    #: belongs to no session (the root, a project folder)
    sessionless: ClassVar[bool] = False
    #: its attributes come from the file's stat alone (without parsing the session)
    unparsed: ClassVar[bool] = False
    #: its bytes only ever grow at the end: what the page cache holds stays valid
    append_only: ClassVar[bool] = False
    #: what it answers (attributes, listing, link target) follows from the session file
    #: alone: kept past the session's eviction while the file is unchanged (``kept``)
    kept: ClassVar[bool] = False
    #: what the kernel drops of it when its session file grows (one node per session)
    grows: ClassVar[Growth] = Growth.NOTHING
    #: of a fork, it changes when a session file comes or goes: its parent may have
    #: (its listing, its link target; ``Changes.came_or_went``)
    follows_parent: ClassVar[bool] = False

    def child(self, v: View, key: Key, name: str) -> Key:
        raise NotADir(name)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        raise NotADir(key)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        s = v.session(key)
        ident = s.ident
        assert ident is not None
        if self.fmt == stat.S_IFLNK:  # a link's own bits mean nothing; its folder's do
            size = len(self.target(v, key))
            return v.plain_attr(ino, stat.S_IFLNK | 0o777, ident, size, self.immutable)
        if self.fmt == stat.S_IFDIR:
            return v.bounded(ino, stat.S_IFDIR | 0o777, ident, 0, ident.mtime_ns, 2)
        size = self.size(v, key)
        return v.bounded(ino, stat.S_IFREG | 0o444, ident, size, ident.mtime_ns, 1)

    def content(self, v: View, key: Key) -> bytes:
        raise IsADir(key) if self.fmt == stat.S_IFDIR else NotFound(key)

    def size(self, v: View, key: Key) -> int:
        """A file's size (without its bytes, where it can)."""
        return len(self.content(v, key))

    def opened(self, v: View, key: Key) -> Snapshot:
        """What a handle opened on it reads until it is closed."""
        return Snapshot(self.content(v, key))

    def target(self, v: View, key: Key) -> bytes:
        raise NotALink(key)

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        """Its ``user.pi.*`` attributes."""
        return {}

    def never(self, name: str) -> bool:
        """Whether this folder can never have ``name``, whatever its session holds: the
        kernel may remember that it has not (rg asks every folder it enters for .git and
        three ignore files, and without that each walk asked again)."""
        return False

    def holds(self, v: View, s: Loaded, key: Key) -> bool:
        """Whether what it answers now is what the file as ``s`` read it gives (a kind that
        may answer from an older rendering, or from more than the file, says when not)."""
        return True

    def step(self, v: View, r: Request) -> Work | None:
        """Work still to do before this node answers (after its session is up to date)."""
        return None

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        """Work still to do before a node of no session answers (``listing``: its children
        with their attributes are wanted, as in :meth:`View.ready`)."""
        return None
