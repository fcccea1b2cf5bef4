"""The mount's namespace: inodes, bringing a node up to date, the caches, the scratch layer.

This module owns inode numbers, the render caches, the editors' scratch layer, extended
attributes and the helpers every kind of node uses; what each kind of node resolves, lists,
shows and holds is in ``layout`` (one class per kind, DESIGN.md "Layout"), which the view
hands each request to. It is synchronous and FUSE-free: it raises the exceptions of
``errors``, and ``fuse_ops`` turns them into errno. Nothing here blocks for long:
:meth:`View.ready` brings a node's session (and, for the whole-session files, their
rendering) up to date in steps, and when a step needs blocking work it raises :class:`Busy`
with that work for the adapter to run off the event loop (with ``defer=False``, for tests
and scripts, the work is simply done). Every other method reads the session as the last
``ready`` left it.

What a node shows is bounded by its real file: owner, group and permission bits of a session
file bound everything under its folder, a project folder's bound its listing (DESIGN.md,
"Security").

Inode numbers are stable for the life of the mount: a node's number is derived from its key
(kind, file, epoch, entry id, ...), so a name looked up again after the kernel forgot it gets
the number it had (``tail -F`` and ``find`` compare them). Only the numbers the kernel holds
are in the table, with its lookup counts, plus those named in the last moments: the
kernel's ``forget`` frees the rest (a year of sessions walked once would otherwise leave a
key per node ever seen). Keys of entry-derived nodes carry the session's epoch, so a
rewritten file never serves old bytes under an old inode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import stat
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

import msgspec

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
from .handles import FileSnapshot, Later, OnDisk, Snapshot, Unshelved
from .inodes import ROOT_INO, Attr, Inodes, Key
from .kept import Answers, Kept
from .kind import Kind
from .layout import (
    KINDS,
    RAW,
    WHOLE_KINDS,
    Fork,
    Growth,
    Request,
    fork_holds,
    fork_of,
)
from .model import Entry
from .names import VIEW_SUFFIX, id_name
from .scratch import ScratchLayer
from .sessions import (
    RENDERED,
    YIELD,
    Identity,
    Listing,
    Loaded,
    SessionFile,
    Store,
    Unreadable,
    Work,
    file_ident,
)
from .shelf import Packed
from .store import DiskStore, File, Stored, text_in, text_out
from .texts import Texts
from .wholes import Wholes

__all__ = [
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

#: An invalidation's "name" that asks the kernel to drop an inode's cached bytes as well as
#: its attributes (no name has a NUL in it).
PAGES = "\0pages"
#: The kinds of node a session has one of that its file's growth changes, and how
_GROWING = [(k, node.grows) for k, node in KINDS.items() if node.grows is not Growth.NOTHING]
#: The kinds of node of a fork that a session file coming or going changes
_FOLLOWING = [k for k, node in KINDS.items() if node.follows_parent]
#: Seconds a stat of a session's file vouches for its kept answers: a walk asks
#: each session six times within a millisecond or so; a change the watcher has not told of
#: yet shows after this at most (DESIGN's aim for an append: 100 ms).
KEPT_FRESH = 0.1


class _Hot(NamedTuple):
    """The session :meth:`View.kept` found answers for last. A walk asks each session's
    nodes about twenty times in a row; finding its answers again (a ``stat`` within
    :data:`KEPT_FRESH`, its identity, the kept answers under their lock) was an eighth of
    the instructions of a later mount's cold walk. They are the same while the ``stat`` that
    vouched for them still does and no answers were dropped or put in since."""

    sf: SessionFile
    seen: tuple[os.stat_result, float]
    version: int  # ``Kept.version`` when they were found
    held: Answers

    def holds(self, view: View) -> bool:
        sf = self.sf
        return (
            sf.seen is self.seen
            and not sf.recheck
            and view._kept.version == self.version
            and view.store.known(sf.path) is sf
            and time.monotonic() - self.seen[1] < KEPT_FRESH
        )


class View:
    """The mount's namespace over a :class:`Store`."""

    def __init__(self, store: Store, render_cache_bytes: int = 64 << 20) -> None:
        self.store = store
        self.defer = False  # raise Busy for blocking work (the mount) instead of doing it
        self.inodes = Inodes(lasting=set())
        self.scratch = ScratchLayer(self.inodes, self.changed_contents)
        self.inodes.lasting = self.scratch.nodes
        # (bound once: the hottest calls of every request)
        self.ino: Callable[[Key], int] = self.inodes.ino
        self.key: Callable[[int], Key] = self.inodes.key
        self.known: Callable[[Key], int | None] = self.inodes.known
        self.hold, self.forget = self.inodes.hold, self.inodes.forget
        self.pinned, self.named = self.inodes.pinned, self.inodes.named
        self.known_of = self.inodes.known_of
        self.texts = Texts(render_cache_bytes)
        self.wholes = Wholes(self.texts, lambda: self.defer, self._resized)
        self._kept = Kept()  # what sessions' nodes answered, per file identity (``kept``)
        self._hot: _Hot | None = None  # the session ``kept`` answered for last
        self.disk: DiskStore | None = None  # the same, and their files, across mounts
        self._evicting: Loaded | None = None  # the session being dropped (``_evicted``)
        # Kernel caches to drop, drained by the adapter: (inode, None) or (parent, name).
        # (a deque: render threads add to it while the loop drains it)
        self.invalidations: deque[tuple[int, str | None]] = deque()
        self.forks: set[str] = set()  # sessions whose header names a parent session
        self.moved = -math.inf  # when a session file last came or went (time.monotonic)
        store.on_evict = self._evicted

    # -- sessions ---------------------------------------------------------------------------

    def ready(
        self,
        ino: int,
        attr_only: bool = False,
        listing: bool = False,
        waited: set[tuple[str, str, int]] | None = None,
    ) -> None:
        """Bring what ``ino`` shows up to date; raises :class:`Busy` (``defer``) when that
        needs blocking work or a pause first. Idempotent: call it again after the work.

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
            self._settle(lambda: node.prepare(self, key))
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
        self._settle(sf.step)
        assert sf.loaded is not None
        r = Request(sf, sf.loaded, key, attr_only, listing, seen)
        self._settle(lambda: node.step(self, r))

    def _settle(self, step: Callable[[], Work | None]) -> None:
        while (work := step()) is not None:
            if self.defer:
                raise Busy(work)
            if work is not YIELD:
                work()

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
        if sf.loaded is None or not self.defer:  # tests and scripts: always the file as it is
            self._settle(sf.step)
        assert sf.loaded is not None
        return sf.loaded

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
        held = self._kept.get(key.path, s.ident)
        told = held.attrs.get(ino) if held is not None else None
        return told is not None and told.size == size

    def session(self, key: Key) -> Loaded:
        """The parsed session a node belongs to, as :meth:`ready` left it."""
        sf = self.store.session(key.path)
        s = sf.loaded
        fixed = KINDS[key.kind].immutable
        if s is not None and s is self._evicting:
            pass  # it answers as it is while it is dropped (its lock is held: no step)
        elif s is None or not (self.defer or (fixed and s.epoch == key.epoch)):
            self._settle(sf.step)  # the adapter asks ready() first; tests and scripts do not
            s = sf.loaded
            assert s is not None
        if fixed and key.epoch != s.epoch:
            raise NotFound(f"{key.path}: rewritten since this node was looked up")
        return s

    # -- names ------------------------------------------------------------------------------

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
            held = self._holding(key, [k for _, k in listing])
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
        held = self._holding(key) if KINDS[key.kind].kept else None
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

    # -- one-file views ---------------------------------------------------------------------

    def snapshot(self, ino: int) -> Snapshot:
        """The bytes an open file reads until it is closed, whatever happens to its session."""
        key = self.key(ino)
        return KINDS[key.kind].opened(self, key)

    def file_snapshot(self, key: Key) -> FileSnapshot:
        """The session file itself, as an open handle reads it."""
        s = self.session(key)
        ident = s.ident
        assert ident is not None
        # A descriptor of its own (one per open handle, not per session): append-only bytes
        # stay put, and a file replaced or deleted meanwhile is still read as it was.
        fd = self.store.files.open(key.path)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (ident.dev, ident.ino):
            os.close(fd)
            raise NotFound(f"{key.path}: replaced since it was read")
        return FileSnapshot(fd, s.size, s.window)

    def readlink(self, ino: int) -> bytes:
        key = self.key(ino)
        target = KINDS[key.kind].target(self, key)
        held = self._holding(key) if KINDS[key.kind].kept else None
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
        held = self._holding(pkey, [self.key(a.ino)] if a is not None else None)
        if held is None or held.child(parent, name) is not None or held.lacks(parent, name):
            return
        if held.room():
            if a is None:
                held.absent.add((parent, name))
            else:
                held.found[(parent, name)] = a

    # -- answers kept past eviction (``kept``) -----------------------------------------------

    def _holding(self, key: Key, children: list[Key] | None = None) -> Answers | None:
        """Where to keep what node ``key`` (and ``children``, its listing) answered just
        now, when every one of them answered what the file as it was read gives."""
        sf = self.store.known(key.path)
        s = sf.loaded if sf is not None else None
        if s is None or s.ident is None:
            return None
        for k in [key, *(children or ())]:
            if k.path != key.path or not KINDS[k.kind].holds(self, s, k):
                return None
        return self._kept.of(key.path, s.ident, fork_of(self, s))

    def kept(self, ino: int) -> Answers | None:
        """What a node of a session answered, when its file is still the file they were
        made from (one ``stat``, or one made in the last :data:`KEPT_FRESH` seconds); None:
        ask the session. A session the parse cache dropped answers a walk from these alone;
        a parsed one too, while its file is unchanged: a warm walk's listing of a session
        folder was two fifths of the daemon's own time, made again at every ``opendir``."""
        key = self.key(ino)
        if not KINDS[key.kind].kept:
            return None
        hot = self._hot
        if hot is not None and hot.sf.path == key.path and hot.holds(self):
            return hot.held
        sf = self.store.known(key.path)
        on_disk = self.disk is not None and self.disk.has(key.path)
        if sf is None and on_disk:
            sf = self.store.session(key.path)  # (a fresh mount: the disk cache may answer)
        if sf is None or sf.recheck:
            return None
        try:
            st = sf.recent(KEPT_FRESH)
        except Unreadable:
            return None  # the session answers that itself
        seen, version = sf.seen, self._kept.version
        ident = Identity.of(st)
        held = self._kept.get(key.path, ident)
        if held is None and on_disk:
            held = self._from_disk(sf, st)  # (put in: the next call finds them kept, and hot)
        if held is not None and held.fork is not None and not fork_holds(self, key.path, held.fork):
            self._kept.drop(key.path)  # its parent came or went: the fork answers again
            if held.stored is not None and self.disk is not None:
                self.disk.drop(key.path)  # (else each request would load the entry again)
            return None
        if held is not None and held.fork is None and seen is not None and seen[0] is st:
            self._hot = _Hot(sf, seen, version, held)
        return held

    def kept_attr(self, ino: int) -> Attr | None:
        held = self.kept(ino)
        return held.attrs.get(ino) if held is not None else None

    def kept_child(self, parent: int, name: str) -> Attr | None:
        """What a lookup answered for a session whose file is unchanged (None: ask it;
        NotFound: it has no such name)."""
        held = self.kept(parent)
        if held is None:
            return None
        if held.lacks(parent, name):
            raise NotFound(name)
        return held.child(parent, name)

    def kept_listing(self, ino: int) -> list[tuple[str, Attr]] | None:
        held = self.kept(ino)
        names = held.listings.get(ino) if held is not None else None
        return list(names.items()) if names is not None else None

    def kept_link(self, ino: int) -> bytes | None:
        held = self.kept(ino)
        return held.links.get(ino) if held is not None else None

    def later(self, ino: int) -> Later | None:
        """A handle for a whole-session file of a session whose file is unchanged since the
        kernel was told its size: its bytes are made only when a read comes (the page cache
        usually has them: a repeated walk then parses nothing)."""
        if self.key(ino).kind not in WHOLE_KINDS:
            return None
        held = self.kept(ino)
        a = held.attrs.get(ino) if held is not None else None
        if held is None or a is None:
            return None
        key = self.key(ino)
        later = Later(ino, held.ident, a.size, KINDS[key.kind].append_only)
        return later if later.grows or self._fillable(later, key, held) else None

    def _fillable(self, later: Later, key: Key, held: Answers) -> bool:
        """Whether tree.txt or session.json opened from kept answers can be read as the
        file it was opened for, whatever the session file does meanwhile (they change in
        the middle: a read of a newer version past the size the kernel was told would be
        another file cut short). Filled here from the rendering of that file when its
        session holds one; else from the shelf or the disk cache at the first read. False:
        the open renders the file as it is now."""
        sf = self.store.known(key.path)
        s = sf.loaded if sf is not None else None
        if s is not None and s.ident == later.ident:
            hit = s.memo.get(key.kind)
            if hit is None or hit[0] != s.version or len(hit[1]) != later.size:
                return False
            later.inner = Snapshot(hit[1])
            return True
        return self._shelved(later, key) is not None or held.stored is not None

    def _evicted(self, s: Loaded) -> None:
        """Session ``s`` is about to be dropped from the parse cache (it is still its
        state, under its lock): what a walk will ask of it again is kept without it. Its
        files go to the shelf only when they do not go to the disk cache: a read the page
        cache cannot answer reads the entry (compressing them for the shelf as well cost a
        drop CPU and the shelf memory, for nothing)."""
        self._evicting = s
        try:
            self._keep_links(s)
            if not self.save(s):
                self._shelve(s)
        finally:
            self._evicting = None

    def _keep_links(self, s: Loaded) -> None:
        """Keep, with the session's answers, what ``rg`` asks of its links and of where
        they lead, which ``grep -r`` never asks (the first rg after a grep parsed every
        dropped session again, and rendered every branch): the target of each link its
        folders listed (a fork's ``parent`` is checked at each use, as ever),
        ``.session.jsonl``, and the folder and one-file view in ``nodes/`` of each listed
        leaf and of the resume leaf, of the sizes conversation.md's render gave (nothing
        is rendered here)."""
        held = self._kept.get(s.path, s.ident) if s.ident is not None else None
        if held is None:
            return
        for names in list(held.listings.values()):
            for a in names.values():
                if stat.S_ISLNK(a.mode) and a.ino not in held.links and held.room():
                    with contextlib.suppress(ViewError):  # (a parent gone meanwhile)
                        held.links[a.ino] = KINDS[a.key.kind].target(self, a.key)
        wanted = [(Key(Kind.SESSION, s.path), RAW, Key(Kind.RAW, s.path))]
        sizes = s.memo.get("branch_sizes") or {}
        leaves = set(self.texts.listed(s))
        if s.index.resume is not None:
            leaves.add(s.index.resume)
        for leaf in leaves & sizes.keys():
            name = id_name(leaf)
            for kind, shown in ((Kind.BRANCH, name + VIEW_SUFFIX), (Kind.ENTRY, name)):
                wanted.append((Key(Kind.NODES, s.path), shown, Key(kind, s.path, s.epoch, leaf)))
        for folder, shown, key in wanted:
            n = self.inodes.known(folder)
            if n is not None and held.child(n, shown) is None and held.room():
                with contextlib.suppress(ViewError):
                    held.found[(n, shown)] = self.getattr(self.ino(key))
        if held.fork is not None:
            now = fork_of(self, s)
            if now is None or now.link != held.fork.link:
                self._kept.drop(s.path)  # its parent came or went: ``parent`` led elsewhere

    def _shelve(self, s: Loaded) -> None:
        """Offer the whole-session files of ``s`` to the shelf as the kernel was told them,
        so that a read its page cache cannot answer is not a parse (what is not made whole
        is not offered: a big session's old groups of conversation.md)."""
        ident, shelf = s.ident, self.store.shelf
        if ident is None:
            return
        offered = [
            shelf.offer(s.path, ident, kind, parts, size)  # type: ignore[arg-type]  # (bytes alone)
            for kind, (parts, size) in self._whole_files(s).items()
        ]
        if len(offered) < 3 or not all(offered):
            said = (s.path, len(offered), offered.count(False))
            log.debug("%s: not all shelved (offered %d, refused %d)", *said)

    def _whole_files(self, s: Loaded, again: bool = False) -> dict[str, File]:
        """The whole-session files of ``s`` as the kernel was told them, in parts (some
        compressed), by kind (under its lock). A big session's old groups of conversation.md
        that are held in no way are not there, or (``again``) are what making them again
        from a copy of ``s`` gives, when whoever takes the parts asks (a thread)."""
        out: dict[str, File] = {}
        conv = s.memo.get("conversation")
        if conv is not None and conv.done == len(s.parser.entries):
            copies: list[Loaded] = []

            def made_again(index: int) -> Callable[[], bytes]:
                if not copies:
                    copies.append(s.frozen())  # (appends do not change it meanwhile)
                return functools.partial(self.wholes.remade, copies[0], conv, index)

            parts = conv.parts(made_again if again else None)
            if parts is not None:
                out[Kind.CONVERSATION.value] = (parts, conv.size)
        for kind in RENDERED:  # tree.txt and session.json, when of the file as it is
            hit = s.memo.get(kind)
            if hit is not None and hit[0] == s.version:
                out[kind.value] = ([(0, hit[1], False)], len(hit[1]))  # (JSON keys: str)
        return out

    def _shelved(self, later: Later, key: Key) -> Packed | None:
        """File ``key`` on the shelf as the kernel was told it for ``later``, if it is."""
        packed = self.store.shelf.get(key.path, later.ident, key.kind)
        return packed if packed is not None and packed.size == later.size else None

    def unshelve(self, later: Later) -> bool:
        """Make the bytes of ``later`` from the shelf, when its file is there as the kernel
        was told it (then its session is not parsed). False: :meth:`fill` must."""
        key = self.key(later.ino)
        packed = self._shelved(later, key)
        if packed is None:
            return self._from_disk_file(later, key)
        log.debug("%s of %s: read from the shelf", key.kind, key.path)
        later.inner = Unshelved(packed, later.size)
        return True

    # -- answers and files kept across mounts (``disk``) ----------------------------------

    def save(self, s: Loaded) -> bool:
        """Write what session ``s`` answered, and its whole-session files, to the disk cache
        (in its thread), when they are what a render of its file as it is now gives: not a
        ``conversation.md`` whose text is not (see ``Conversation.exact``), not of a
        file that changed since it was read (its ctime moved: a rewrite that kept size and
        mtime too). A fork's ``parent`` link, which follows other files, is saved with what
        it led to, and checked again at its first use (``kept``)."""
        sf = self.store.known(s.path)
        if self.disk is None or sf is None or s.ident is None:
            return False
        held = self._kept.get(s.path, s.ident)
        conv = s.memo.get("conversation")
        if held is None or (conv is not None and not conv.exact(s.lasting_problems())):
            return False
        try:
            st = sf.stat()
        except Unreadable:
            return False
        if Identity.of(st) != s.ident or st.st_ctime_ns != s.ctime_ns:
            return False  # it moved on: what s answered is not what it answers now
        files = self._whole_files(s, again=True)
        old = held.stored  # the entry these answers came from: of this very file
        if old is not None:
            for kind, (_, size) in old.files.items():
                if kind not in files:  # (not rendered in this mount: rg asked for links)
                    copied = functools.partial(self.disk.copy, old, kind, size)
                    files[kind] = ([(0, copied, False)], size)
        made = (held.count, frozenset(files))
        if held.saved == made:
            return True  # (on disk as it is)
        saved = functools.partial(self._saved, s.path, s.ident, held)
        answers = self._answers_out(s, held)
        done = self.disk.save(s.path, file_ident(st), answers, files, saved)
        if done:
            held.saved = made
        return done

    def _saved(self, path: str, ident: Identity, held: Answers, stored: Stored) -> None:
        """The writer saved the entry of ``held``: a read the kernel's page cache cannot
        answer (the shelf's budget let the files go) is read from there, not parsed."""
        if self._kept.peek(path, ident) is held:
            held.stored = stored

    def save_all(self, until: float = math.inf) -> int:
        """Save every parsed session (at unmount), until ``until`` (``time.monotonic``); how
        many were offered."""
        saved = 0
        for path in self.store.loaded_paths():
            if time.monotonic() > until:
                break
            saved += self.save_one(path, until)
        return saved

    def save_one(self, path: str, until: float = math.inf) -> bool:
        """Save session ``path`` if it is parsed (blocking: at unmount, or ``--warm`` once it
        rendered it), with what ``rg`` will ask of its links, as a drop keeps them."""
        sf = self.store.known(path)
        s = sf.loaded if sf is not None else None
        if s is None or sf is None or not sf.lock.acquire(timeout=1):
            return False  # (a thread abandoned at unmount may hold it)
        try:
            self._keep_links(s)
            done = self.save(s)
            if not done and self.disk is not None and self.disk.busy():
                # the writer was behind: wait for it, once
                done = self.disk.settle(until - time.monotonic()) and self.save(s)
            return done
        except Exception:  # (a bug: the other sessions are still saved)
            log.exception("%s: not saved to the disk cache", path)
            return False
        finally:
            sf.lock.release()

    def on_disk(self, path: str) -> bool:
        """Whether the disk cache holds session ``path`` as its file is now (blocking)."""
        if self.disk is None:
            return False
        try:
            st = self.store.files.lstat(path)
        except Unreadable:
            return False
        return self.disk.holds(path, file_ident(st))

    def _answers_out(self, s: Loaded, held: Answers) -> dict[str, Any]:
        """``held`` as JSON: keys instead of inode numbers (another mount numbers them
        anew), an entry's epoch as "the session's", a fork's parent as the file its header
        names and where its link led (``_fork_in``), and each stat once, in a table the
        rest name by its row (reading them back is much of a cold walk of the cache: a
        listing's rows repeat what ``getattr`` answered)."""

        def key(k: Key | None) -> list[Any] | None:
            if k is None or k.path != s.path or k.kind not in KINDS:
                return None
            return [k.kind, text_out(k.eid), k.k, bool(k.eid) and k.epoch == s.epoch]

        table: list[list[Any]] = []
        rows: dict[Attr, int | None] = {}

        def row(a: Attr) -> int | None:
            if a not in rows:
                k = key(a.key)
                rows[a] = None if k is None else len(table)
                if k is not None:
                    table.append([k, a.mode, a.size, a.mtime_ns, a.nlink, a.immutable,
                                  a.scratch, a.uid, a.gid])  # fmt: skip
            return rows[a]

        def at(ino: int) -> list[Any] | None:
            return key(self.inodes.key_of(ino))

        out = text_out
        listings = []
        for folder, names in held.listings.items():
            named = [[out(n), row(a)] for n, a in names.items()]
            where = at(folder)
            if where is not None and all(r[1] is not None for r in named):
                listings.append([where, named])
        links = [[at(i), target.decode("latin-1")] for i, target in held.links.items()]
        found = [[at(f), out(n), row(a)] for (f, n), a in held.found.items()]
        fork = held.fork
        link = None if fork is None or fork.link is None else out(fork.link)
        return {
            "fork": None if fork is None else [out(fork.named), link],
            "attrs": [i for i in map(row, held.attrs.values()) if i is not None],
            "listings": listings,
            "links": [r for r in links if r[0] is not None],
            "found": [r for r in found if r[0] is not None and r[2] is not None],
            "absent": [[at(f), out(n)] for f, n in held.absent if at(f) is not None],
            "table": table,
        }

    def _from_disk(self, sf: SessionFile, st: os.stat_result) -> Answers | None:
        """The answers the disk cache holds for ``sf``'s file as ``st`` says it is now (a
        fresh mount's first walk of a session it has not parsed)."""
        assert self.disk is not None
        stored = self.disk.load(sf.path, file_ident(st))
        if stored is None:
            return None
        try:
            held = self._answers_in(sf, Identity.of(st), stored.answers)
        except Exception as err:  # (whatever it holds: the session answers for itself)
            log.warning("%s: its disk cache entry is not sound (%r): removed", sf.path, err)
            self.disk.drop(sf.path)
            return None
        held.stored = dataclasses.replace(stored, answers=msgspec.Raw())  # (not them twice)
        log.debug("%s: answers from the disk cache", sf.path)
        return self._kept.put(sf.path, held)

    def _answers_in(self, sf: SessionFile, ident: Identity, raw: msgspec.Raw) -> Answers:
        """What :meth:`_answers_out` wrote, numbered in this mount (anything else in it
        raises: the entry is then not used). Decoding checks every type; what is left is
        making nodes of it, once per key (a listing names the keys of the table's rows):
        once per session in a later mount's cold walk, about a quarter of the handlers' time."""
        saved = _SAVED.decode(raw)
        path, epoch, name, ino = sf.path, sf.epoch, text_in, self.ino
        nodes: dict[_SavedKey, tuple[Key, int]] = {}

        def node(v: _SavedKey) -> tuple[Key, int]:
            got = nodes.get(v)
            if got is None:
                saved_kind, eid, n, of_entry = v
                kind = Kind(saved_kind)  # (ValueError for one that is not)
                k = _new(Key, (kind, path, epoch if of_entry else 0, name(eid), n))
                got = nodes[v] = (k, ino(k))
            return got

        table = [_new(Attr, (i, *r[1:], k)) for r in saved.table for k, i in [node(r[0])]]
        row = dict(enumerate(table)).__getitem__  # (a KeyError for a row it has not)
        held = Answers(ident, fork=self._fork_in(path, saved.fork))
        held.attrs = {a.ino: a for a in map(row, saved.attrs)}
        for folder, rows in saved.listings:
            held.listings[node(folder)[1]] = {name(n): row(i) for n, i in rows}
        for at, target in saved.links:
            held.links[node(at)[1]] = target.encode("latin-1")
        for at, n, i in saved.found:
            held.found[(node(at)[1], name(n))] = row(i)
        for at, n in saved.absent:
            held.absent.add((node(at)[1], name(n)))
        held.count = len(held.attrs) + sum(map(len, held.listings.values())) + len(held.found)
        return held

    def _fork_in(self, path: str, raw: tuple[str, str | None] | None) -> Fork | None:
        """A saved fork's parent link, to be looked for again at its first use (``kept``);
        the fork is one whose listing a session file coming or going changes."""
        if raw is None:
            return None
        named, link = raw
        self.forks.add(path)
        return Fork(text_in(named), None if link is None else text_in(link), -math.inf)

    def _from_disk_file(self, later: Later, key: Key) -> bool:
        """Serve ``later`` from the disk cache entry its answers came from, if any."""
        held = self._kept.peek(key.path, later.ident)
        stored = held.stored if held is not None else None
        if stored is None or self.disk is None:
            return False
        text = self.disk.reader(stored, key.kind, later.size)
        if text is None:
            return False
        log.debug("%s of %s: read from the disk cache", key.kind, key.path)
        later.inner = OnDisk(self.disk, text, later.size)
        return True

    def fill(self, later: Later) -> None:
        """Make the bytes of ``later`` (its session brought up to date by ``ready``).
        conversation.md only grows; the other files must be of the very file the kernel was
        told the size of."""
        key = self.key(later.ino)
        s = self.session(key)
        inner = self.snapshot(later.ino)
        same = s.ident == later.ident and inner.size == later.size
        grown = KINDS[key.kind].append_only and inner.size >= later.size
        if not (same or grown):
            inner.close()
            log.warning("%s: changed between open and read: answered ESTALE", key.path)
            raise Changed(key.path)
        later.inner = inner

    def grew(self, snap: Snapshot, off: int, size: int) -> TypeGuard[Later]:
        """Whether a read of ``snap`` is one of a handle from kept answers past the end of
        what it holds (``Later.behind``), of a session file that grew since it was opened
        (``tail -f``), rather than the last page of the file as it was (the kernel reads
        whole pages)."""
        if not isinstance(snap, Later) or not snap.behind(off, size):
            return False
        sf = self.store.known(self.key(snap.ino).path)
        try:
            return sf is not None and Identity.of(sf.recent(KEPT_FRESH)) != snap.ident
        except (Unreadable, OSError):
            return False  # (gone: the reader keeps what it has)

    def catch_up(self, later: Later) -> None:
        """``later`` (conversation.md, made from the shelf or the disk cache) read past its
        end: from now on it reads the session's own, which has what was added since (its
        session brought up to date by ``ready``). Its first bytes are the same: the file only
        grows, and an entry renders the same forever."""
        key = self.key(later.ino)
        inner = KINDS[key.kind].opened(self, key)
        old = later.inner
        if old is None or inner.size < old.size:
            inner.close()  # (rewritten smaller since: the reader keeps the version it has)
            return
        later.inner = inner
        old.close()

    def came_or_went(self) -> None:
        """A session file came or went: a fork's ``parent`` link may have too, and the
        kernel keeps the fork's listing."""
        self.moved = time.monotonic()
        for path in list(self.forks):  # (a thread may add one meanwhile)
            for kind in _FOLLOWING:
                n = self.inodes.known(Key(kind, path))
                if n is not None:
                    self.changed_contents(n)

    def _resized(self, key: Key) -> None:
        """A whole-session file was rendered anew: the kernel drops the size it keeps."""
        known = self.inodes.known(key)
        if known is not None:
            self.invalidations.append((known, None))

    def changed_entry(self, parent: int, name: str) -> None:
        self.invalidations.append((parent, name))

    def changed_contents(self, ino: int) -> None:
        """Folder ``ino`` lists other names, or link ``ino`` leads elsewhere: the kernel
        drops the listing or target it keeps (and the attributes)."""
        self.invalidations.append((ino, PAGES))

    def changed_session(self, path: str) -> None:
        """The session file changed: drop the kernel's view of what depends on the whole."""
        self._kept.drop(path)
        self.store.changed(path)
        for kind, grows in _GROWING:
            n = self.inodes.known(Key(kind, path))
            if n is not None:
                self.invalidations.append((n, PAGES if grows is Growth.PAGES else None))

    def changed_everything_of(self, path: str) -> None:
        """The session file's owner or mode changed: every node of it shows other bits.
        A scan of every inode: chmod and chown are rare."""
        self.store.changed(path)
        sf = self.store.known(path)
        if sf is not None:
            sf.recheck = True  # entry nodes look at the file again, once
        for key, n in self.inodes.all_named():
            if key.path == path:
                self.invalidations.append((n, None))

    def changed_inode(self, ino: int) -> None:
        self.invalidations.append((ino, None))

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


def _ns(e: Entry) -> int:
    return (e.ts_ms or 0) * 1_000_000


#: A node as :meth:`View._answers_out` saves it: kind, entry id, k, whether of an entry.
_SavedKey = tuple[str, str, int, bool]


class _Saved(msgspec.Struct, frozen=True):
    """What :meth:`View._answers_out` saves, as a later mount reads it back (msgspec checks
    each type as it decodes: an int is never a bool here, nor a bool an int)."""

    fork: tuple[str, str | None] | None = None
    attrs: list[int] = []
    listings: list[tuple[_SavedKey, list[tuple[str, int]]]] = []
    links: list[tuple[_SavedKey, str]] = []
    found: list[tuple[_SavedKey, str, int]] = []
    absent: list[tuple[_SavedKey, str]] = []
    table: list[tuple[_SavedKey, int, int, int, int, bool, bool, int, int]] = []


_SAVED = msgspec.json.Decoder(_Saved)
#: Makes a named tuple of its fields without the Python-level ``__new__`` (which checks
#: nothing more: the fields are the decoder's checked values)
_new = tuple.__new__
