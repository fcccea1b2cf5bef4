"""Every kind of node of the mount, one class each: its lookup, listing, attributes, bytes.

DESIGN.md "Layout" node by node. A kind is one place to read and change: what names it
resolves (``child``), what it lists (``listing``), what ``stat`` shows (``attr``), its bytes
(``content``) or its link target (``target``), and what must be done before it can answer
(``step``: parsing and rendering, which the view runs off the event loop). The view looks the
kind up in :data:`KINDS` by the kind name of a node's key and does the rest (inodes, the
scratch layer, invalidation, permissions).

Links keep a walk to one copy of the text (``conversation.md``): branch folders and branch
files are links into ``nodes/``, which lists nothing, and ``session.jsonl`` is a link to a name
no listing shows.
"""

from __future__ import annotations

import contextlib
import math
import os
import posixpath
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from . import finds, writer
from .errors import NotALink, NotFound
from .handles import FileSnapshot, Snapshot
from .kind import Kind
from .names import VIEW_SUFFIX, id_name, utf8
from .newest import shown_path
from .nodekind import SESSION_NAMES, Growth, NodeKind, Request
from .render import message_of
from .sessions import Loaded, Work

if TYPE_CHECKING:
    from .view import Attr, Key, View

RAW = ".session.jsonl"  # the real file's bytes: session.jsonl links here; never listed


HEADS_INLINE = 8  # new session files of the root read on the loop; more: in a thread


# -- folders --------------------------------------------------------------------------------


def _heads_first(v: View, missing: list[str], listed: list[str]) -> Work | None:
    """Before a folder's listing is made: the kernel reads the store's entries of its
    sessions ``listed`` ahead (a walk reads them next, whether or not their heads were read
    already), and the heads of ``missing`` are read, a few on the loop (by the listing), more
    in a thread."""
    v.store.prefetch(listed)
    return None if len(missing) <= HEADS_INLINE else lambda: v.store.read_heads(missing)


class Root(NodeKind):
    """The sessions root: project folders, and flat session files as sessions."""

    name = Kind.ROOT
    fmt = stat.S_IFDIR
    sessionless = True

    def child(self, v: View, key: Key, name: str) -> Key:
        try:
            return v.listed_item(key.path or v.store.root, name)  # a folder named so wins
        except NotFound:
            kind = ROOT_KINDS.get(name)
            if kind is None:
                raise
            return key._replace(kind=kind, path=v.store.root)  # (latest: ENOENT when none is)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        items = v.store.top()
        out = [(i.name, v.item_key(i)) for i in items]
        taken = {i.name for i in items}
        for name, kind in ROOT_KINDS.items():
            if name not in taken and (items or kind != Kind.LATEST):
                out.append((name, key._replace(kind=kind, path=v.store.root)))
        return out

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        # Naming its sessions reads the head of each new file: for a folder of a thousand
        # new sessions, seconds of reads, made off the loop. The root's ``latest`` names the
        # newest session: the heads of its folder too (once the root's own are read), for a
        # listing only: a lookup at the root is answered at once. On a later mount the
        # root's first listing takes every kept name in one pass (Store.kept_heads_work).
        listed, missing = v.store.unlisted(v.store.root)
        if listing and len(missing) <= HEADS_INLINE:
            # (the newest's folder: its heads; its entries are read ahead when it is listed)
            return (
                v.store.newest.work()
                or v.store.kept_heads_work()
                or _heads_first(v, missing + v.store.newest.unnamed(), listed)
            )
        return _heads_first(v, missing, listed)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        # From stat alone: listing a project parses nothing. Who may move a session file out
        # of the folder may trash the session (rmdir): the folder's own bits.
        return v.folder_attr(ino, key.path or v.store.root)


class Project(Root):
    """A project: its sessions, named for people (one ``latest`` is at the root: a glob
    over sessions, ``*/*/session.json``, meets each once)."""

    name = Kind.PROJECT

    def child(self, v: View, key: Key, name: str) -> Key:
        try:
            return v.listed_item(key.path, name)  # (a session's stem "search" wins)
        except NotFound:
            if name != SEARCH:
                raise
            return key._replace(kind=Kind.SEARCH)

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        # Its listing is made in a thread (the folder scanned, its new heads read, its
        # sessions' store entries read ahead): after drop_caches, one project's scan on the
        # loop held every other request for 121 ms while the render workers read and wrote.
        return None if v.store.listing_made(key.path) else lambda: v.store.make_listings([key.path])

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        cwd = v.store.cwd_of(key.path)
        return {"user.pi.cwd": utf8(cwd)} if cwd is not None else {}

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        # (its search/ is not listed: a glob or a loop over a project's folders, */*/, meets
        # sessions only)
        return [(i.name, v.item_key(i)) for i in v.store.sessions_in(key.path)]


LATEST, SEARCH = "latest", "search"
#: The root's own names (a folder of the sessions root named so wins: ``ROOT_NAMES``).
ROOT_KINDS = {LATEST: Kind.LATEST, SEARCH: Kind.SEARCH, "usage": Kind.USAGE}


_NEEDS_RESUME = frozenset({Kind.CURRENT, Kind.CURRENT_VIEW})


class Session(NodeKind):
    name = Kind.SESSION
    fmt = stat.S_IFDIR
    unparsed = True  # its attributes: the file's stat
    kept = True
    grows = Growth.PAGES  # its listing shows tree.txt's and session.json's sizes
    follows_parent = True  # a fork's lists ``parent`` while its parent is in the mount

    def never(self, name: str) -> bool:
        return name.startswith(".") and name != RAW

    def child(self, v: View, key: Key, name: str) -> Key:
        kind = SESSION_NAMES.get(name) or (Kind.RAW if name == RAW else None)
        if kind is None:
            raise NotFound(name)
        if not self._shown(v, v.session(key), kind):
            raise NotFound(name)
        return key._replace(kind=kind)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        s = v.session(key)
        return [
            (name, key._replace(kind=kind))
            for name, kind in SESSION_NAMES.items()
            if self._shown(v, s, kind)
        ]

    def _shown(self, v: View, s: Loaded, kind: str) -> bool:
        if kind in _NEEDS_RESUME:
            return s.index.resume is not None
        return kind != Kind.PARENT or parent_of(v, s) is not None

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        # From the file's stat alone, and one unreadable session fails only when entered.
        # Writable where the file is: who may change it may empty its folder (rm -r, a walk
        # that ends in the trash) and set its name.
        st = v.file_stat(key.path)
        return v.bounded(ino, stat.S_IFDIR | 0o777, st, 0, st.mtime_ns, 2)

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        s = v.session(key)
        header = s.parser.header
        out = {
            "user.pi.session": utf8(header.session_id if header else ""),
            "user.pi.file": os.fsencode(key.path),
        }
        name = session_name(s)
        if name is not None:
            out["user.pi.name"] = utf8(name)
        return out

    def step(self, v: View, r: Request) -> Work | None:
        # A listing shows the sizes of the whole-session files: rendered first.
        if r.listing:
            for k in WHOLE_KINDS:
                work = v.wholes.render_step(r.sf, r.s, k, r.waited)
                if work is not None:
                    return work
        return None


#: What rg, fd, git and friends look up in every folder they enter (ignore files, VCS
#: folders): an id folder answers them without its session.
WALKER_NAMES = frozenset(
    {".git", ".gitignore", ".ignore", ".rgignore", ".fdignore", ".hg", ".svn", ".bzr", ".jj"}
)


class _IdFolder(NodeKind):
    """A folder whose names are entries' names (and their ``.md`` views)."""

    def never(self, name: str) -> bool:
        # Entry ids may start with "." (``nodes/.7`` resolves), so only the names walkers
        # look for in every folder they enter are never asked of the session: an entry whose
        # id is one of these resolves by its escaped name (``%2Egit``) alone.
        return name in WALKER_NAMES


class Leaves(_IdFolder):
    """One folder link and one file link per listed leaf; every entry id resolves."""

    name = Kind.LEAVES
    fmt = stat.S_IFDIR
    kept = True
    grows = Growth.PAGES  # a new leaf, or one that is no longer

    def child(self, v: View, key: Key, name: str) -> Key:
        s = v.session(key)
        if name.endswith(VIEW_SUFFIX):
            with contextlib.suppress(NotFound):  # (else an id ending in .md itself)
                eid = v.texts.leaf_by_name(s, name[: -len(VIEW_SUFFIX)])
                return key._replace(kind=Kind.LEAF_VIEW, epoch=s.epoch, eid=eid)
        return key._replace(kind=Kind.LEAF, epoch=s.epoch, eid=v.texts.leaf_by_name(s, name))

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        s = v.session(key)
        out: list[tuple[str, Key]] = []
        for leaf in v.texts.listed(s):
            name = v.texts.folder_name(s, leaf)
            link = key._replace(kind=Kind.LEAF, epoch=s.epoch, eid=leaf)
            out += [(name, link), (name + VIEW_SUFFIX, link._replace(kind=Kind.LEAF_VIEW))]
        return out


class Nodes(_IdFolder):
    """Lists nothing; ``<id>`` is the entry's folder, ``<id>.md`` its path as one file."""

    name = Kind.NODES
    fmt = stat.S_IFDIR
    kept = True
    grows = Growth.ATTRS  # it lists nothing; its times follow the file

    def child(self, v: View, key: Key, name: str) -> Key:
        s = v.session(key)
        kind, eid = Kind.ENTRY, None
        if name.endswith(VIEW_SUFFIX):
            kind, eid = Kind.BRANCH, v.texts.id_named(s, name[: -len(VIEW_SUFFIX)])
        if eid is None:  # (an id ending in .md itself: its folder, when no view is)
            kind, eid = Kind.ENTRY, v.texts.id_named(s, name)
        if eid is None:
            raise NotFound(name)
        return key._replace(kind=kind, epoch=s.epoch, eid=eid)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        return []


class EntryFolder(NodeKind):
    """The numbered message files (and images) of the path root→entry."""

    name = Kind.ENTRY
    fmt = stat.S_IFDIR
    immutable = True

    def child(self, v: View, key: Key, name: str) -> Key:
        return v.texts.file_named(v.session(key), key, name)

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        return entry_xattrs(v, key)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        return v.texts.files(v.session(key), key)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        s = v.session(key)
        assert s.ident is not None
        ns = v.texts.entry_ns(s, key.eid)
        return v.bounded(ino, stat.S_IFDIR | 0o777, s.ident, 0, ns, 2, True)


# -- files ------------------------------------------------------------------------------------


class Message(NodeKind):
    """A numbered message file (``k`` = 0) or its k-th image."""

    name = Kind.MESSAGE
    immutable = True

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        s = v.session(key)
        assert s.ident is not None
        e = v.texts.entry(s, key.eid)
        mode = 0o666 if e.kind == "user" and key.k == 0 else 0o444
        size = len(self.content(v, key))
        return v.bounded(
            ino, stat.S_IFREG | mode, s.ident, size, v.texts.entry_ns(s, key.eid), 1, True
        )

    def content(self, v: View, key: Key) -> bytes:
        text, images = v.texts.rendered(v.session(key), key._replace(k=0))
        if not key.k:
            return text
        return images[key.k - 1][1] if key.k <= len(images) else b""

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        out = entry_xattrs(v, key)
        s = v.session(key)
        msg = message_of(s.parsed(v.texts.entry(s, key.eid)))
        call = msg.get("toolCallId")
        if msg.get("role") == "toolResult" and isinstance(call, str):
            out["user.pi.call"] = utf8(call)  # the id the text leaves out
        return out


class Branch(NodeKind):
    """``nodes/<id>.md``: the path root→entry as one file (never changes)."""

    name = Kind.BRANCH
    immutable = True

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        s = v.session(key)
        assert s.ident is not None
        size = v.texts.branch_size(s, key.eid)  # without making the text: rg stats every link
        ns = v.texts.entry_ns(s, key.eid)
        return v.bounded(ino, stat.S_IFREG | 0o444, s.ident, size, ns, 1, True)

    def content(self, v: View, key: Key) -> bytes:
        return v.texts.branch_text(v.session(key), key.eid)

    def xattrs(self, v: View, key: Key) -> dict[str, bytes]:
        return entry_xattrs(v, key)

    def step(self, v: View, r: Request) -> Work | None:
        return v.texts.branch_step(r.s, r.key.eid, whole=not r.attr_only)


class Whole(NodeKind):
    """A file made from the whole session, rendered off the loop once per change."""

    kept = True
    # tree.txt and session.json change in the middle; opened from kept answers, their bytes
    # are in the page cache
    grows = Growth.PAGES

    def holds(self, v: View, s: Loaded, key: Key) -> bool:
        hit = s.memo.renders.get(self.name)  # (a rendering of an older version, while one is made)
        return hit is not None and hit[0] == s.version

    def content(self, v: View, key: Key) -> bytes:
        return v.wholes.session_text(v.session(key), self.name)

    def step(self, v: View, r: Request) -> Work | None:
        # A lookup waits for the rendering too: the size the kernel keeps must be exact.
        return v.wholes.render_step(r.sf, r.s, self.name, r.waited)


class Tree(Whole):
    name = Kind.TREE


class Json(Whole):
    name = Kind.JSON


class ConversationFile(Whole):
    """conversation.md: read by range, never made whole (a 100 MB session's is 80 MB)."""

    name = Kind.CONVERSATION
    append_only = True
    grows = Growth.ATTRS  # what the page cache holds of it stays right

    def size(self, v: View, key: Key) -> int:
        return v.wholes.conv_size(v.session(key))

    def content(self, v: View, key: Key) -> bytes:
        return v.wholes.conv_text(v.session(key))

    def opened(self, v: View, key: Key) -> Snapshot:
        return v.wholes.conv_snapshot(v.session(key))


WHOLE_KINDS = (Kind.CONVERSATION, Kind.TREE, Kind.JSON)


class Raw(NodeKind):
    """The real file's bytes, as Pi wrote them (``.session.jsonl``, reached by the link)."""

    name = Kind.RAW
    kept = True  # (rg stats it through session.jsonl)
    grows = Growth.ATTRS  # (read around the page cache)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        s = v.session(key)
        ident = s.ident
        assert ident is not None
        return v.bounded(ino, stat.S_IFREG | 0o444, ident, s.size, ident.mtime_ns, 1)

    def content(self, v: View, key: Key) -> bytes:
        return v.session(key).read_all()

    def opened(self, v: View, key: Key) -> Snapshot:
        """The session file itself: a descriptor of its own (one per open handle, not per
        session), so that ``tail -f`` reads what is appended while it is open, and a file
        replaced or deleted meanwhile is still read as it was."""
        s = v.session(key)
        ident = s.ident
        assert ident is not None
        fd = v.store.files.open(key.path)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (ident.dev, ident.ino):
            os.close(fd)
            raise NotFound(f"{key.path}: replaced since it was read")
        return FileSnapshot(fd, s.size, s.window)


# -- links ------------------------------------------------------------------------------------


class _Link(NodeKind):
    fmt = stat.S_IFLNK
    kept = True

    def target(self, v: View, key: Key) -> bytes:
        return self.path(v, v.session(key), key).encode("utf-8", "surrogateescape")

    def path(self, v: View, s: Loaded, key: Key) -> str:
        raise NotImplementedError


class Current(_Link):
    """Pi's resume leaf: ``leaves/<leaf>`` (``nodes/<id>`` when it is no leaf)."""

    name = Kind.CURRENT
    grows = Growth.PAGES  # the kernel keeps link targets; the resume leaf moves

    def path(self, v: View, s: Loaded, key: Key) -> str:
        resume = s.index.resume
        if resume is None:
            raise NotFound(key)
        return v.texts.folder_of(s, resume)


class CurrentView(Current):
    name = Kind.CURRENT_VIEW

    def path(self, v: View, s: Loaded, key: Key) -> str:
        return super().path(v, s, key) + VIEW_SUFFIX


class LeafLink(_Link):
    """``leaves/<leaf>`` -> ``../nodes/<id>``: never changes."""

    name = Kind.LEAF
    immutable = True
    suffix: ClassVar[str] = ""

    def path(self, v: View, s: Loaded, key: Key) -> str:
        return "../nodes/" + id_name(key.eid) + self.suffix


class LeafViewLink(LeafLink):
    name = Kind.LEAF_VIEW
    suffix = VIEW_SUFFIX


class _FreeLink(_Link):
    """A link of no session to parse: its attributes from the real file or folder's stat."""

    sessionless = True
    kept = False  # answered without a parse anyway

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        size = len(self.target(v, key))
        return v.plain_attr(ino, stat.S_IFLNK | 0o777, v.file_stat(key.path), size, self.immutable)


class Alias(_FreeLink):
    """A session's stem or id in its folder: a link to its name (``eid`` holds the name)."""

    name = Kind.ALIAS
    immutable = True  # names are fixed while mounted

    def target(self, v: View, key: Key) -> bytes:
        return key.eid.encode("utf-8", "surrogateescape")


class Latest(_FreeLink):
    """``latest`` at the root: the session whose file changed last, of the whole mount
    (``<project>/<session>``, or a session lying in the root itself)."""

    name = Kind.LATEST

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        # (the newest found and its folder named off the loop)
        return v.store.newest.work() or _heads_first(v, v.store.newest.unnamed(), [])

    def target(self, v: View, key: Key) -> bytes:
        target = v.store.newest.latest()
        if target is None:
            raise NotFound(key)
        return target.encode("utf-8", "surrogateescape")


class Parent(_Link):
    """``parent``: the session this one was forked from, when it is a session of the mount."""

    name = Kind.PARENT  # (a dropped fork's answers hold with the link they gave: ``Fork``)
    follows_parent = True

    def path(self, v: View, s: Loaded, key: Key) -> str:
        target = parent_of(v, s)
        if target is None:
            raise NotFound(key)
        return target


def parent_of(v: View, s: Loaded) -> str | None:
    """The relative link from session ``s``'s folder to its parent session's folder.

    Pi writes the parent's absolute path. A sessions folder that was moved or copied (the
    demo's) keeps its layout, so the parent is also looked for by its project folder and file
    name below this root; nothing outside the root is ever looked at."""
    fork = _fork(v, s)
    return None if fork is None else fork.link


@dataclass(slots=True)
class Fork:
    """A fork's ``parent`` link, which the mount decides, not the file: the parent file its
    header names, the link its folder answers (None: none shown), and when that was looked
    for last (``time.monotonic``). A live fork's is in its memo; a dropped fork's answers
    keep a copy of the one they were given with, and answers read back from the disk cache
    one that was never looked for here (``checked`` -inf: it is, at its first use)."""

    named: str
    link: str | None
    checked: float


def _fork(v: View, s: Loaded) -> Fork | None:
    named = named_parent(s)
    if named is None:
        return None
    v.changes.forks.add(
        s.path
    )  # its listing changes when sessions come and go (Changes.came_or_went)
    fork = s.memo.parent
    if fork is None:
        fork = s.memo.parent = Fork(named, None, -math.inf)
    return _looked_for(v, s.path, fork)


def _looked_for(v: View, path: str, fork: Fork) -> Fork:
    """``fork`` with its link looked for again (in the store's listings, not in the fork)
    once it is ``PARENT_TTL`` old, or older than the last session file that came or went:
    every lookup in the folder asks, and walks no listing."""
    now = time.monotonic()
    if now - fork.checked >= PARENT_TTL or fork.checked < v.changes.moved:
        fork.link, fork.checked = _find_parent(v, path, fork.named), now
    return fork


def fork_of(v: View, s: Loaded) -> Fork | None:
    """What a fork's folder answers of its parent now, to keep with its other answers."""
    fork = _fork(v, s)
    return None if fork is None else replace(fork)


def fork_holds(v: View, path: str, fork: Fork) -> bool:
    """Whether the parent link kept for dropped fork ``path`` is still the mount's answer,
    as a live fork's link would be. ``fork`` is looked for again on a copy: its link is what
    the answers kept with it were made with (a save in a thread may be writing them)."""
    now = _looked_for(v, path, replace(fork))
    if now.link != fork.link:
        return False
    fork.checked = now.checked
    return True


def named_parent(s: Loaded) -> str | None:
    """The parent session file the header names, when it names one."""
    header = s.parser.header
    parent = header.fields.get("parentSession") if header is not None else None
    if not isinstance(parent, str) or not parent.endswith(".jsonl") or "\0" in parent:
        return None
    return parent


PARENT_TTL = 10.0  # seconds a parent link (or its absence) is trusted: the parent may come


def _find_parent(v: View, path: str, parent: str) -> str | None:
    root = v.store.root
    parent = posixpath.normpath(parent)
    tail = parent.split("/")[-2:]
    candidates = [posixpath.join(root, *tail), posixpath.join(root, tail[-1])]
    if parent.startswith(root + "/"):
        candidates.insert(0, parent)
    here = shown_path(v.store, path)
    if here is None:
        return None
    for candidate in candidates:
        there = shown_path(v.store, candidate) if candidate != path else None
        if there is not None:
            return posixpath.relpath(there, here)
    return None


class Scratch(NodeKind):
    """An editor's file or link in the scratch layer of an entry folder (``ScratchLayer.nodes``):
    in memory only, never a session's."""

    name = Kind.SCRATCH
    sessionless = True

    def holds(self, v: View, s: Loaded, key: Key) -> bool:
        return False  # in memory only, and short-lived

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        return v.scratch.attr(ino)

    def content(self, v: View, key: Key) -> bytes:
        return bytes(v.scratch.node_of(key).data)

    def target(self, v: View, key: Key) -> bytes:
        node = v.scratch.node_of(key)
        if not node.is_link:
            raise NotALink(key)
        return node.target


class RawLink(_Link):
    name = Kind.RAW_LINK

    def path(self, v: View, s: Loaded, key: Key) -> str:
        return RAW


KINDS: dict[Kind, NodeKind] = {
    k.name: k
    for k in (
        Root(), Project(), Session(), Leaves(), Nodes(), EntryFolder(), Message(), Branch(),
        Tree(), Json(), ConversationFile(), Raw(), Current(), CurrentView(), LeafLink(),
        LeafViewLink(), RawLink(), Alias(), Latest(), Parent(), Scratch(), *finds.KINDS,
    )
}  # fmt: skip


def entry_xattrs(v: View, key: Key) -> dict[str, bytes]:
    """An entry node's: its id, and its label if it has one."""
    out = {"user.pi.id": utf8(key.eid)}
    s = v.session(key)
    label = _labels(s).get(label_target(s, key))
    if isinstance(label, str):
        out["user.pi.label"] = utf8(label)
    return out


def session_name(s: Loaded) -> str | None:
    """The name Pi shows for the session (Pi's harness storage: its name fact)."""
    if s.parser.harness is not None:
        name = s.parser.harness_info.get("name")
        return name if isinstance(name, str) and name else None
    return writer.pi_name(s)


def label_target(s: Loaded, key: Key) -> str:
    """The entry a label on this node is about: a message file's entry; for an entry
    folder, the entry its files end with (its own, or, when it takes no number, like a
    label or a name ending a branch, its nearest numbered ancestor), so a folder and its
    last file carry one label, and ``current`` keeps showing it after a label moved it."""
    if key.kind == Kind.ENTRY:
        e = s.index.by_id.get(key.eid)
        if e is not None and e.kind is None:
            return s.index.anchor.get(key.eid) or key.eid
    return key.eid


def _labels(s: Loaded) -> Mapping[str, object]:
    if s.parser.harness is not None:
        labels = s.parser.harness_info.get("labels")
        return labels if isinstance(labels, dict) else {}
    return s.index.labels
