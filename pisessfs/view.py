"""The mount's namespace: each request's inode turned into its key and handed to the kind
of node it is (``layout.KINDS``), with what the view's parts keep on the way.

The parts, each one module: inode numbers (``inodes``), the editors' scratch layer
(``scratch``), what a parsed session shows entry by entry and its whole-session files
(``texts``, ``wholes``), the answers kept past the parse cache and the handles opened from
them (``keeping``), the disk cache's side (``carry``), what the kernel must drop
(``changes``). What each kind of node resolves, lists, shows and holds is its class in
``layout`` (one per kind, DESIGN.md "Layout").

It is synchronous and FUSE-free: it raises the exceptions of ``errors``, and ``fuse_ops``
turns them into errno. Nothing here blocks for long: :meth:`View.ready` brings a node's
session (and, for the whole-session files, their rendering) up to date in steps, and when a
step needs blocking work it raises :class:`Busy` with that work for the adapter to run off
the event loop. There is one mode: tests and scripts drive it the same way, running the
work inline (``errors.settled``). Every other method reads the session as the last
``ready`` left it.

What a node shows is bounded by its real file: owner, group and permission bits of a session
file bound everything under its folder, a project folder's bound its listing (DESIGN.md,
"Security").
"""

from __future__ import annotations

import functools
import logging
import stat
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .carry import Carry
from .changes import PAGES, Changes
from .errors import (
    Busy,
    Changed,
    CrossFolder,
    Denied,
    Exists,
    Invalid,
    IsADir,
    NotADir,
    NotALink,
    NotFound,
    NotPermitted,
    ViewError,
)
from .finds import parsed_docs
from .handles import Later, Snapshot
from .inodes import ROOT_INO, Attr, Inodes, Key
from .keeping import Keeping
from .kind import Kind
from .layout import KINDS, WHOLE_KINDS
from .nodekind import Request
from .scratch import Node, ScratchLayer
from .search import SearchIndex
from .sessions import (
    Identity,
    Listing,
    Loaded,
    Store,
    Work,
)
from .store import DiskStore
from .sums import UsageTable
from .texts import Texts
from .usage import Seen, Sums, Usage
from .wholes import Wholes

if TYPE_CHECKING:
    from .workers import Pool

__all__ = [
    "PAGES",
    "ROOT_INO",
    "Attr",
    "Busy",
    "Changed",
    "CrossFolder",
    "Denied",
    "Exists",
    "Invalid",
    "IsADir",
    "Key",
    "Later",
    "NotADir",
    "NotALink",
    "NotFound",
    "NotPermitted",
    "Snapshot",
    "View",
    "ViewError",
]

log = logging.getLogger(__name__)


class View:
    """The mount's namespace over a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        nodes: dict[int, Node] = {}  # scratch inode -> node: named while they live
        self.inodes = Inodes(lasting=nodes)
        self.keeping = Keeping(self)
        self.changes = Changes(self.inodes, store, self.keeping.answers.drop)
        self.scratch = ScratchLayer(self.inodes, self.changes.contents, nodes)
        # (bound once: the hottest calls of every request)
        self.ino: Callable[[Key], int] = self.inodes.ino
        self.key: Callable[[int], Key] = self.inodes.key
        self.known: Callable[[Key], int | None] = self.inodes.known
        self.hold, self.forget = self.inodes.hold, self.inodes.forget
        self.pinned, self.named = self.inodes.pinned, self.inodes.named
        self.known_of = self.inodes.known_of
        self.texts = Texts(store.grew)
        self.wholes = Wholes(self.texts, self.changes.resized)
        self.disk: DiskStore | None = None  # the same, and their files, across mounts
        self.carry = Carry(self, self.keeping)
        self._usage: Usage | None = None
        self._search: SearchIndex | None = None
        # Whether the watcher sees every folder (the mount's says so): then the index looks
        # only at the files it named, not at every file
        self.watched: Callable[[], bool] = lambda: False
        self._made_lock = threading.Lock()  # usage() and search() are made once
        self.workers: Pool | None = None  # the render workers (the mount's: ``workers``)
        store.on_evict = self.keeping.evicted
        store.on_parsed = self._parsed

    # -- sessions ---------------------------------------------------------------------------

    def ready(
        self,
        ino: int,
        attr_only: bool = False,
        listing: bool = False,
        waited: set[tuple[str, str, int]] | None = None,
    ) -> None:
        """Bring what ``ino`` shows up to date; raises :class:`Busy` when that needs
        blocking work or a pause first. Idempotent: call it again after the work.

        ``attr_only``: only the attributes are wanted, which a session folder has without
        parsing (so ``ls -l`` of a project parses nothing). ``listing``: the folder's
        children with their attributes are wanted (a session folder's listing shows the sizes
        of tree.txt and session.json: rendered first unless a rendering exists). ``waited``:
        the renderings this request already waited for, kept by the caller across calls (a
        session that grows meanwhile does not make it wait for another one).
        """
        key = self.key(ino)
        node = KINDS[key.kind]
        if node.sessionless:
            self._settle(lambda: node.prepare(self, key, listing))
            return
        if attr_only and node.unparsed:
            return
        sf = self.store.session(key.path)
        seen = waited if waited is not None else set()
        # Marked used: --warm lets go of no session used since it chose it. One not counted
        # against the cap yet (parsed again by a thread) takes the step below, which counts it.
        if node.immutable and not sf.recheck and self.store.used(sf):
            s = sf.loaded
            if s is not None and s.epoch == key.epoch:
                r = Request(sf, s, key, attr_only, listing, seen)
                if node.step(self, r) is None:
                    return  # what an entry shows never changes: the hot path of grep -r
        workers = self.workers
        if sf.loaded is None and workers is not None:
            # a first parse: none while a render worker makes it (then the store answers)
            self._settle(lambda: workers.claim(key.path))
        self._settle(sf.step)
        assert sf.loaded is not None
        r = Request(sf, sf.loaded, key, attr_only, listing, seen)
        self._settle(lambda: node.step(self, r))

    def _settle(self, step: Callable[[], Work | None]) -> None:
        work = step()
        if work is not None:
            raise Busy(work)

    def up_to_date(self, path: str) -> Loaded:
        """Session ``path`` brought up to date (raises :class:`Busy` like :meth:`ready`)."""
        sf = self.store.session(path)
        self._settle(sf.step)
        assert sf.loaded is not None
        return sf.loaded

    def state(self, path: str) -> Loaded:
        """Session ``path`` as the last :meth:`up_to_date` left it (what writes work on: the
        adapter brings it up to date right before)."""
        sf = self.store.session(path)
        if sf.loaded is None:
            self._settle(sf.step)
        assert sf.loaded is not None
        return sf.loaded

    def usage(self) -> Usage:
        """The sums of ``usage/``, kept in the store (made at their first use)."""
        with self._made_lock:  # (a parsing thread may offer the first counts)
            if self._usage is None:
                self._usage = self._new_usage()
            return self._usage

    def _new_usage(self) -> Usage:
        files, store = self.store.files, self.store
        table = UsageTable(self._a_store())
        return Usage(
            store.sessions_by_project, files.lstat, files.open, table,
            project_of=store.project_of, parse=self._counted_by_parse,
        )  # fmt: skip

    def _counted_by_parse(self, path: str) -> tuple[Seen, Sums] | None:
        """(Blocking.) The usage of session ``path`` as its parse counts it; None when the
        store holds it (a walk reads it from there without a parse: its lines are scanned)."""
        sf = self.store.known(path)
        if (sf is None or sf.loaded is None) and self.disk is not None and self.disk.has(path):
            return None
        if self.workers is not None and self.workers.covers(path):
            return None  # (a worker parses it, and counts it)
        return self.store.session(path).load().counted()

    def _a_store(self) -> DiskStore:
        if self.disk is None:  # (the mount always has a store; a test of the core may not)
            self.disk = self.store.disk = self.store.in_memory_store()
            self.disk.open()
        return self.disk

    def search(self) -> SearchIndex:
        """The index of ``search/``, kept in the store (made at its first use), told by the
        watcher which session files changed."""
        with self._made_lock:
            if self._search is None:
                store = self.store
                docs = functools.partial(parsed_docs, self)
                index = SearchIndex(
                    self._a_store(), store.sessions_by_project, store.files.lstat, docs,
                    lambda: self.watched(),  # noqa: PLW0108 (the mount sets it later)
                )  # fmt: skip
                store.watchers.append(index.note)
                self._search = index
            return self._search

    def _parsed(self, path: str, cur: Loaded) -> None:
        """(A parsing thread's.) Keep what the parse of ``path`` counted of its usage, when
        there is a store to keep it in."""
        counted = cur.counted() if self.disk is not None else None
        if counted is not None:
            try:
                self.usage().offer(path, *counted)
            except Exception:  # (a bug: the parse is still good; usage/ counts for itself)
                log.exception("%s: its usage was not kept", path)

    def session_path(self, ino: int) -> str | None:
        """The session file a node of an entry folder belongs to (None for others)."""
        key = self.key(ino)
        return key.path if key.kind in (Kind.ENTRY, Kind.MESSAGE) else None

    def cacheable(self, ino: int, size: int) -> bool:
        """Whether the kernel may keep the node's bytes (``size`` of them, as just read) in its
        page cache across opens: they never change, or only grow at their end
        (conversation.md), or they are tree.txt or session.json of the file as it is, of
        the size the kernel was told (so that a later walk, after the session was dropped
        from the parse cache, reads them from there). A change of the session file drops
        those (``PAGES``); for the others the kernel drops its pages when a ``stat`` shows
        a new mtime (``auto_inval_data``), without a request of ours waiting on them."""
        key = self.key(ino)
        kind = KINDS[key.kind]
        if kind.immutable or kind.append_only:
            return True
        if key.kind not in WHOLE_KINDS:
            return False
        sf = self.store.known(key.path)
        s = sf.loaded if sf is not None else None
        if s is None or s.ident is None or not kind.holds(self, s, key):
            return False
        held = self.keeping.answers.get(key.path, s.ident)
        told = held.attrs.get(ino) if held is not None else None
        return told is not None and told.size == size

    def session(self, key: Key) -> Loaded:
        """The parsed session a node belongs to, as :meth:`ready` left it."""
        sf = self.store.session(key.path)
        s = sf.loaded
        fixed = KINDS[key.kind].immutable
        if s is not None and s is self.keeping.evicting:
            pass  # it answers as it is while it is dropped (its lock is held: no step)
        elif s is None:  # (dropped since ready(): parsed again first)
            self._settle(sf.step)
            s = sf.loaded
            assert s is not None
        if fixed and key.epoch != s.epoch:
            raise NotFound(f"{key.path}: rewritten since this node was looked up")
        return s

    # -- lookup and listing -----------------------------------------------------------------

    def lookup(self, parent: int, name: str) -> Attr:
        return self.getattr(self.resolve(parent, name))

    def never(self, parent: int, name: str) -> bool:
        """Whether folder ``parent`` can never have ``name`` (see ``NodeKind.never``)."""
        return KINDS[self.key(parent).kind].never(name)

    def resolve(self, parent: int, name: str) -> int:
        """The inode ``name`` stands for in folder ``parent`` (scratch names first)."""
        key = self.key(parent)
        ov = self.scratch.overlays.get(key)
        if ov is not None:
            node = ov.names.get(name)
            if node is not None:
                return node.ino
            if name in ov.whiteouts:
                raise NotFound(name)
        return self.ino(self._child(key, name))

    def child_key(self, parent: int, name: str) -> Key:
        """The key a name resolves to below the scratch layer (for rename and unlink)."""
        return self._child(self.key(parent), name)

    def _child(self, key: Key, name: str) -> Key:
        if name in (".", ".."):
            raise NotFound(name)  # the kernel resolves these itself
        return KINDS[key.kind].child(self, key, name)

    def listed_item(self, folder: str, name: str) -> Key:
        """The session or project shown as ``name`` in ``folder`` (the root or a project)."""
        item = self.store.find(folder, name)
        if item is None:
            raise NotFound(name)
        return self.item_key(item)

    def item_key(self, item: Listing) -> Key:
        if item.alias_of is not None:
            return Key(Kind.ALIAS, item.path, eid=item.alias_of)
        return Key(Kind.SESSION if item.is_session else Kind.PROJECT, item.path)

    def children(self, ino: int) -> list[tuple[str, Attr]]:
        """A snapshot of a folder's entries with their attributes (readdirplus)."""
        key = self.key(ino)
        listing = KINDS[key.kind].listing(self, key)
        ov = self.scratch.overlays.get(key)
        if ov is None:
            out = [(name, self.getattr(self.ino(k))) for name, k in listing]
            held = self.keeping.holding(key, [k for _, k in listing])
            if held is not None and ino not in held.listings and held.room(len(out)):
                held.listings[ino] = dict(out)
            return out
        hidden = ov.whiteouts | ov.names.keys()
        out = [(n, self.getattr(self.ino(k))) for n, k in listing if n not in hidden]
        return out + [(n, self.getattr(node.ino)) for n, node in ov.names.items()]

    def names(self, ino: int) -> set[str]:
        """The names a listing of folder ``ino`` shows, without their attributes (nothing is
        rendered for them)."""
        key = self.key(ino)
        names = {name for name, _ in KINDS[key.kind].listing(self, key)}
        ov = self.scratch.overlays.get(key)
        return names if ov is None else (names - ov.whiteouts) | ov.names.keys()

    # -- attributes -------------------------------------------------------------------------

    def getattr(self, ino: int) -> Attr:
        key = self.key(ino)
        a = KINDS[key.kind].attr(self, ino, key)
        held = self.keeping.holding(key) if KINDS[key.kind].kept else None
        if held is not None and (ino in held.attrs or held.room()):
            held.attrs[ino] = a
        return a

    def plain_attr(self, ino: int, mode: int, real: Identity, size: int, fixed: bool) -> Attr:
        """Attributes with the real file's owner and ``mode`` as it is (a link's)."""
        key = self.key(ino)
        return Attr(ino, mode, size, real.mtime_ns, 1, fixed, False, real.uid, real.gid, key)

    def file_stat(self, path: str) -> Identity:
        try:
            return Identity.of(self.store.files.lstat(path))
        except OSError:
            raise NotFound(path) from None

    def folder_attr(self, ino: int, path: str) -> Attr:
        """A project folder (or the root) with its own bits: who may move a session file
        out of it may trash the session (``rmdir``)."""
        st = self.file_stat(path)
        return self.bounded(ino, stat.S_IFDIR | 0o777, st, 0, st.mtime_ns, 2)

    def bounded(  # noqa: PLR0917
        self,
        ino: int,
        mode: int,
        real: Identity,
        size: int,
        mtime_ns: int,
        nlink: int,
        immutable: bool = False,
    ) -> Attr:
        """Attributes whose owner, group and permission bits are the real file's, never
        looser: each class (owner, group, others) keeps the bits of ``mode`` that its bits on
        the real file allow (a folder: reading it lets you list and enter it)."""
        perm = stat.S_IMODE(real.mode) & 0o777
        if stat.S_ISDIR(mode):
            perm = _as_folder(perm)
        bits = stat.S_IMODE(mode) & perm & self.store.files.reach
        kind = stat.S_IFMT(mode)
        key = self.key(ino)
        uid, gid = real.uid, real.gid
        return Attr(ino, kind | bits, size, mtime_ns, nlink, immutable, False, uid, gid, key)

    # -- contents ---------------------------------------------------------------------------

    def content(self, ino: int) -> bytes:
        """The whole bytes of a file node."""
        key = self.key(ino)
        return KINDS[key.kind].content(self, key)

    def snapshot(self, ino: int) -> Snapshot:
        """The bytes an open file reads until it is closed, whatever happens to its session."""
        key = self.key(ino)
        return KINDS[key.kind].opened(self, key)

    def readlink(self, ino: int) -> bytes:
        key = self.key(ino)
        target = KINDS[key.kind].target(self, key)
        held = self.keeping.holding(key) if KINDS[key.kind].kept else None
        if held is not None and (ino in held.links or held.room()):
            held.links[ino] = target
        return target

    def looked_up(self, parent: int, name: str, a: Attr | None) -> None:
        """Keep what a lookup in a session's folder answered: a name no listing shows, or
        (``a`` None) that there is no such name. (The folders kept have no scratch names:
        those are only in entry folders, which are not kept.)"""
        pkey = self.key(parent)
        if not KINDS[pkey.kind].kept:
            return
        held = self.keeping.holding(pkey, [self.key(a.ino)] if a is not None else None)
        if held is None or held.child(parent, name) is not None or held.lacks(parent, name):
            return
        if held.room():
            if a is None:
                held.absent.add((parent, name))
            else:
                held.found[(parent, name)] = a

    # -- extended attributes ----------------------------------------------------------------

    def xattrs(self, ino: int) -> dict[str, bytes]:
        """``user.pi.*`` attributes (each kind says which): entry id (and label, if any) on
        entry nodes, session id, file (and name, if any) on sessions, cwd on projects. Name
        and label are what Pi shows."""
        key = self.key(ino)
        return KINDS[key.kind].xattrs(self, key)


def _as_folder(perm: int) -> int:
    """A file's bits as a folder's: read lets a class list and enter, write lets it add."""
    out = 0
    for shift in (6, 3, 0):
        bits = (perm >> shift) & 7
        if bits & 4:
            out |= 5 << shift
            if bits & 2:
                out |= 2 << shift
    return out
