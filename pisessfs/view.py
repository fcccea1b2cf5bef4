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
import re
import stat
import threading
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypeGuard

import msgspec

from . import onefile, render, summary, writer
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
from .handles import ConvSnapshot, FileSnapshot, Later, OnDisk, Snapshot, Unshelved
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
from .names import VIEW_SUFFIX, id_name, name_id, utf8
from .scratch import Node, Overlay
from .sessions import (
    INLINE_BYTES,
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
    no_gc,
)
from .shelf import Packed
from .store import DiskStore, File, Stored, text_in, text_out

__all__ = [
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

ROOT_INO = 1
INO_MASK = (1 << 63) - 1
#: Numbers named but not (yet) handed to the kernel are dropped once this many more were
#: named after them, twice over (a listing's names are in its handle's attributes, with
#: their keys, until the kernel takes them: see ``hold``).
UNHELD_KEPT = 1 << 17
#: An invalidation's "name" that asks the kernel to drop an inode's cached bytes as well as
#: its attributes (no name has a NUL in it).
PAGES = "\0pages"
#: The kinds of node a session has one of that its file's growth changes, and how
_GROWING = [(k, node.grows) for k, node in KINDS.items() if node.grows is not Growth.NOTHING]
#: The kinds of node of a fork that a session file coming or going changes
_FOLLOWING = [k for k, node in KINDS.items() if node.follows_parent]
LISTINGS_KEPT = 16  # entry folders' listings kept per session (each is its whole path)
_NUMBER = re.compile(r"([0-9]{4,})-")  # ASCII only: int() would take any script's digits
#: Seconds a stat of a session's file vouches for its kept answers: a walk asks
#: each session six times within a millisecond or so; a change the watcher has not told of
#: yet shows after this at most (DESIGN's aim for an append: 100 ms).
KEPT_FRESH = 0.1
RENDER_LOCKS = 64  # stripes of the lock that makes one render of a file at a time
CALL_SEARCH = 256  # entries looked at above a tool result for its call (results of one
# assistant message follow each other; a hostile file gets no further)


class Key(NamedTuple):
    kind: Kind  # what it is: layout.KINDS has its class
    path: str = ""  # project folder or session file
    epoch: int = 0
    eid: str = ""
    k: int = 0  # 0: the message file, n: its n-th image; a scratch node's serial


NO_KEY = Key(Kind.NONE)


class Attr(NamedTuple):
    """What ``stat`` shows; ``immutable`` nodes may be cached by the kernel for long.
    (A named tuple: a cold walk makes one per name it meets, four times as fast as a frozen
    dataclass.)"""

    ino: int
    mode: int
    size: int
    mtime_ns: int
    nlink: int
    immutable: bool
    scratch: bool = False  # a scratch name: the kernel asks again at every use
    uid: int = 0
    gid: int = 0
    key: Key = NO_KEY  # what the number names (``hold`` names it again after a sweep)


Rendered = tuple[bytes, list[tuple[str, bytes]]]  # a message file's text and its images


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
        self._ino: dict[Key, int] = {Key(Kind.ROOT): ROOT_INO}
        self._keys: dict[int, Key] = {ROOT_INO: Key(Kind.ROOT)}
        self._held: dict[int, int] = {ROOT_INO: 1}  # inode -> the kernel's lookup count
        self._young: list[int] = []  # named since the last sweep, held or not
        self._old: list[int] = []  # named before it: the next sweep drops the unheld
        # The five above change together under this lock: ``--warm`` names nodes from a
        # worker thread (``_keep_links``) while the loop names, sweeps and scans them.
        self._naming = threading.Lock()
        self._cache: OrderedDict[Key, Rendered] = OrderedDict()
        self._cache_bytes = 0
        self._cache_cap = render_cache_bytes
        self._cache_lock = threading.Lock()  # render threads keep renders while the loop reads
        # The index each session's renders were made with (epoch, rebuilds): a rebuilt index
        # may give an id another line (a later one took it) or an entry another number.
        self._cache_index: dict[str, tuple[int, int]] = {}
        self._kept = Kept()  # what sessions' nodes answered, per file identity (``kept``)
        self._hot: _Hot | None = None  # the session ``kept`` answered for last
        self.disk: DiskStore | None = None  # the same, and their files, across mounts
        self._evicting: Loaded | None = None  # the session being dropped (``_evicted``)
        self.overlays: dict[Key, Overlay] = {}  # entry folder -> its scratch layer
        self.nodes: dict[int, Node] = {}  # scratch inode -> node
        self._serial = 0
        self.made = 0  # whole-session files rendered (the mount trims the heap after them)
        # One render of a whole-session file at a time (striped: bounded however many)
        self._render_locks = [threading.Lock() for _ in range(RENDER_LOCKS)]
        # Kernel caches to drop, drained by the adapter: (inode, None) or (parent, name).
        # (a deque: render threads add to it while the loop drains it)
        self.invalidations: deque[tuple[int, str | None]] = deque()
        self.forks: set[str] = set()  # sessions whose header names a parent session
        self.moved = -math.inf  # when a session file last came or went (time.monotonic)
        store.on_evict = self._evicted

    # -- inodes -----------------------------------------------------------------------------

    def ino(self, key: Key) -> int:
        n = self._ino.get(key)
        if n is not None:
            return n  # (the common case: one dict read, no lock)
        with self._naming:
            n = self._ino.get(key)  # (named by another thread meanwhile)
            if n is None:
                if len(self._young) >= UNHELD_KEPT:
                    self._sweep()  # before naming: never the number about to be returned
                n = self._number(key)
                self._ino[key], self._keys[n] = n, key
                self._young.append(n)
            return n

    def _number(self, key: Key) -> int:
        """``key``'s number: its hash, unless another named key has that (then the next of a
        fixed sequence: still the same number for the same key while that one is named)."""
        n = hash(key) & INO_MASK
        while n <= ROOT_INO or n in self._keys:
            n = (n * 6364136223846793005 + 1442695040888963407) & INO_MASK
        return n

    def key(self, ino: int) -> Key:
        key = self._keys.get(ino)
        if key is None:
            raise NotFound(ino)
        return key

    def hold(self, a: Attr) -> None:
        """The kernel took a reply naming ``a`` (a lookup, an entry of a listing, a create):
        it holds the number until it forgets it. A number swept meanwhile is named again."""
        n = a.ino
        with self._naming:
            if n not in self._keys:
                self._keys[n] = a.key
                self._ino.setdefault(a.key, n)
            self._held[n] = self._held.get(n, 0) + 1

    def forget(self, ino: int, count: int) -> None:
        """The kernel dropped ``count`` of its references to ``ino``: a number it no longer
        holds leaves the table (a scratch node's stays while the node lives)."""
        with self._naming:
            left = self._held.get(ino, 0) - count
            if left > 0:
                self._held[ino] = left
                return
            self._held.pop(ino, None)
            if ino != ROOT_INO and ino not in self.nodes:
                self._unname(ino)

    @contextlib.contextmanager
    def pinned(self, ino: int) -> Iterator[None]:
        """Keep ``ino`` named while a request waits on work for it (a sweep could drop it)."""
        with self._naming:
            self._held[ino] = self._held.get(ino, 0) + 1
        try:
            yield
        finally:
            with self._naming:
                left = self._held.get(ino, 0) - 1
                if left > 0:
                    self._held[ino] = left
                else:
                    self._held.pop(ino, None)
                    self._young.append(ino)  # unheld again: a later sweep may drop it

    def named(self) -> tuple[int, int]:
        """How many numbers the table has, and how many of them the kernel holds (the
        ``--debug`` line of a forget says)."""
        return len(self._keys), len(self._held)

    def _sweep(self) -> None:
        """Drop the numbers named before the last sweep that the kernel does not hold
        (under ``_naming``)."""
        for n in self._old:
            if n not in self._held and n not in self.nodes:
                self._unname(n)
        self._old, self._young = self._young, []

    def _unname(self, ino: int) -> None:  # (under ``_naming``)
        key = self._keys.pop(ino, None)
        if key is not None and self._ino.get(key) == ino:
            del self._ino[key]

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

    def render_step(
        self,
        sf: SessionFile,
        s: Loaded,
        kind: Kind,
        waited: set[tuple[str, str, int]] | None = None,
    ) -> Work | None:
        """Render a whole-session file of ``s`` unless the rendering of its file as it is
        now exists: every answer about it (a lookup's size, a listing's, ``stat``'s, the
        bytes of an open) is of the file as it is, so ``stat``, ``tail`` and ``cat`` agree.
        ``waited``: the renderings this request already waited for (one per request: a
        session that grows meanwhile does not make it wait for another). conversation.md
        is rendered for its new entries only (cheap).
        """
        hit = s.memo.get(kind)
        if hit is not None and (
            hit[0] == s.version or (s.path, kind, hit[0]) in (waited or ())  # one per request
        ):
            return None
        if s.size < INLINE_BYTES:
            self._render(s, kind)  # a small session: cheaper here than a thread hop
            return None
        KINDS[kind].before_copy(self, s)
        asked = s.version

        def work() -> None:
            # One render of a file at a time: requests that come while it runs (a lookup, a
            # stat, an open of one growing session) take its rendering, not one each.
            with self._render_locks[hash((s.path, kind)) % len(self._render_locks)]:
                hit = s.memo.get(kind)
                if hit is not None and hit[0] >= asked:
                    if waited is not None:
                        waited.add((s.path, kind, hit[0]))
                    return
                make()

        def make() -> None:
            with no_gc():
                with sf.lock:  # a copy no append changes, made while none runs
                    if sf.loaded is not s:
                        return
                    frozen = s.frozen()
                    sf.working += 1  # not evicted while rendered
                rendered = False
                try:
                    self._render(frozen, kind)
                    rendered = True
                finally:
                    with sf.lock:  # kept in the same step: a drop then shelves the render
                        sf.working -= 1
                        if rendered:
                            s.adopt(frozen)
            if waited is not None:
                waited.add((s.path, kind, frozen.version))
            known = self._ino.get(Key(kind, s.path))
            if known is not None:
                # Its size changed. Its pages, if a handle from kept answers left any, are of
                # the same file (they were checked): a change of the file drops them.
                self.invalidations.append((known, None))

        return work

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

    def entry(self, s: Loaded, eid: str) -> Entry:
        e = s.index.by_id.get(eid)
        if e is None:
            raise NotFound(eid)
        return e

    def entry_ns(self, s: Loaded, eid: str) -> int:
        """An entry's time, as a node's mtime."""
        return (self.entry(s, eid).ts_ms or 0) * 1_000_000

    # -- names ------------------------------------------------------------------------------

    def folder_name(self, s: Loaded, leaf: str) -> str:
        """``<id>-<slug of the branch's last user message>`` (just ``<id>`` without one)."""
        memo: dict[str, str] = s.memo.setdefault("folder", {})
        name = memo.get(leaf)
        if name is None:
            text = ""
            e = s.index.last_of_kind(leaf, "user")
            if e is not None:
                text = render.content_text(render.message_of(s.parsed(e)).get("content"))
            slug = render.slug(text)
            base = id_name(leaf)
            name = memo[leaf] = f"{base}-{slug}" if slug else base
        return name

    def folder_of(self, s: Loaded, eid: str) -> str:
        if s.index.is_leaf(eid):
            return "leaves/" + self.folder_name(s, eid)
        return "nodes/" + id_name(eid)

    def id_named(self, s: Loaded, name: str) -> str | None:
        """The entry id a name of ``nodes/`` or ``leaves/`` stands for, if it is one: its
        escaped name (``id_name``, what listings show), or the id itself when it is a name
        as it is (``-rf``, ``.7``, ``..12``) and no id's escaped name."""
        eid = name_id(name, s.index.by_id)
        if eid is not None and eid in s.index.by_id:
            return eid
        return name if name in s.index.by_id and name not in (".", "..") else None

    def leaf_by_name(self, s: Loaded, name: str) -> str:
        """The entry of a ``leaves/`` name: ``<id>`` or ``<id>-<slug>``.

        A former leaf (one that has children now) still resolves by its old name, so a path
        a shell or an editor holds keeps working after a commit below it.
        """
        eid = self.id_named(s, name)
        if eid is not None:
            return eid
        cut = name.find("-")
        while cut > 0:  # ids may contain "-" themselves (UUIDs): try each cut
            cand = self.id_named(s, name[:cut])
            if cand is not None and self.folder_name(s, cand) == name:
                return cand
            cut = name.find("-", cut + 1)
        raise NotFound(name)

    def file_named(self, s: Loaded, key: Key, name: str) -> Key:
        """A numbered file (or image) of entry folder ``key`` by its name, found from the
        number it starts with: never the whole listing, which renders every entry of the
        path (sed and editors look up names that are not there, in folders of 50,000 files
        whose leaf moves with every append)."""
        m = _NUMBER.match(name)
        last = s.index.files_on_path(key.eid)
        num = int(m.group(1)) if m else 0
        nid = s.index.numbered_at(key.eid, num) if 1 <= num <= last else None
        # A path that grows past 9,999 files numbers them with more digits (00001-user.md),
        # and the narrower names it had still lead there, unlisted: ``current/0001-user.md``
        # keeps resolving while the session Pi writes grows.
        width = len(m.group(1)) if m else 0
        if nid is None or width > render.number_width(last):
            raise NotFound(name)
        e = s.index.by_id[nid]
        kind = e.kind or "message"
        found = Key(Kind.MESSAGE, key.path, s.epoch, nid)
        if name == render.file_name(num, width, kind):
            return found
        for k, ext in enumerate(render.image_exts(s.parsed(e)), start=1):
            if name == render.image_name(num, width, kind, k, ext):
                return found._replace(k=k)
        raise NotFound(name)

    def files(self, s: Loaded, key: Key) -> list[tuple[str, Key]]:
        """The numbered files (and images) of entry folder ``key``, in path order (the last
        few listings kept: a folder's names never change)."""
        memo: OrderedDict[str, list[tuple[str, Key]]] = s.memo.setdefault("files", OrderedDict())
        out = memo.get(key.eid)
        if out is not None:
            with contextlib.suppress(KeyError):  # a render thread may have dropped it
                memo.move_to_end(key.eid)
            return out
        ids = s.index.numbered_path(key.eid)
        width = render.number_width(len(ids))
        out = []
        for nid in ids:
            e = s.index.by_id[nid]
            num, kind = s.index.num[nid], e.kind or "message"
            msg_key = Key(Kind.MESSAGE, key.path, s.epoch, nid)
            out.append((render.file_name(num, width, kind), msg_key))
            for k, (ext, _) in enumerate(self.rendered(s, msg_key)[1], start=1):
                out.append((render.image_name(num, width, kind, k, ext), msg_key._replace(k=k)))
        memo[key.eid] = out
        while len(memo) > LISTINGS_KEPT:
            with contextlib.suppress(KeyError):
                memo.popitem(last=False)
        return out

    # -- lookup and listing -----------------------------------------------------------------

    def lookup(self, parent: int, name: str) -> Attr:
        return self.getattr(self.resolve(parent, name))

    def never(self, parent: int, name: str) -> bool:
        """Whether folder ``parent`` can never have ``name`` (see ``NodeKind.never``)."""
        return KINDS[self.key(parent).kind].never(name)

    def resolve(self, parent: int, name: str) -> int:
        """The inode ``name`` stands for in folder ``parent`` (scratch names first)."""
        key = self.key(parent)
        ov = self.overlays.get(key)
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
        ov = self.overlays.get(key)
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
        ov = self.overlays.get(key)
        return names if ov is None else (names - ov.whiteouts) | ov.names.keys()

    def listed(self, s: Loaded) -> list[str]:
        memo = s.memo
        if "listed" not in memo:
            memo["listed"] = s.index.listed_leaves()
        listed: list[str] = memo["listed"]
        return listed

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

    def rendered(
        self, s: Loaded, key: Key, d: dict[str, Any] | None = None, keep: bool = True
    ) -> Rendered:
        """An entry's message file and its images, from one parse (``d``, when the caller
        has it), kept in a byte-capped LRU. ``keep`` False: a render for conversation.md,
        neither looked up nor kept (a walk reads the text there, not in the message files:
        keeping each entry of a year of sessions cost a twentieth of a first walk, and
        pushed out what was read)."""
        hit = self._cached(key, s) if keep else None
        if hit is not None:
            return hit
        e = self.entry(s, key.eid)
        d = s.parsed(e) if d is None else d
        done = (render.render(d, self.context(s, e, d)), render.images(d))
        return self._keep(key, done, s) if keep else done

    def context(self, s: Loaded, e: Entry, d: dict[str, Any]) -> render.Context:
        """What entry ``e``'s file shows of other entries: the call a tool result answers
        (in the nearest assistant message above it) and the file names of the entries a
        compaction or branch summary names. Only ancestors and ids: fixed forever."""
        msg = render.message_of(d)
        call_id = msg.get("toolCallId")
        if e.kind == "assistant":  # its results come next: their calls, without a parse
            s.memo["calls"] = (e, render.tool_calls(d))
        if msg.get("role") == "toolResult" and isinstance(call_id, str):
            return render.Context(call=self._call_above(s, e, call_id))
        named = d.get("firstKeptEntryId") if e.type == "compaction" else d.get("fromId")
        if e.type not in ("compaction", "branch_summary") or not isinstance(named, str):
            return render.NO_CONTEXT
        name = self.file_of(s, named, e)
        return render.Context(names={named: name} if name else {})

    def _call_above(self, s: Loaded, e: Entry, call_id: str) -> dict[str, Any] | None:
        cur = e.parent_id
        for _ in range(CALL_SEARCH):
            above = s.index.by_id.get(cur) if cur is not None else None
            if above is None:
                return None
            if above.kind == "assistant":
                return self._calls_of(s, above).get(call_id)
            cur = above.parent_id
        return None

    def _calls_of(self, s: Loaded, e: Entry) -> dict[str, dict[str, Any]]:
        """The tool calls of assistant entry ``e`` by id; the last one's are kept, as the
        results of one message follow it (a render parses the message once, not per result)."""
        last = s.memo.get("calls")
        if last is not None and last[0] is e:
            return last[1]  # type: ignore[no-any-return]
        calls = render.tool_calls(s.parsed(e))
        s.memo["calls"] = (e, calls)
        return calls

    def file_of(self, s: Loaded, eid: str, above: Entry) -> str | None:
        """The file name of entry ``eid`` in the folder of its own node, when it comes
        before ``above`` in the file: what ``above`` shows must not change when a later
        line brings the entry it names (its file is cached, conversation.md made again)."""
        e = s.index.by_id.get(eid)
        num = s.index.num.get(eid, 0)
        if e is None or e.kind is None or not num or e.line >= above.line:
            return None
        return render.file_name(num, render.number_width(num), e.kind)

    def _keep(self, key: Key, done: Rendered, s: Loaded) -> Rendered:
        with self._cache_lock:
            if self._cache_index.get(s.path) != (s.epoch, s.rebuilds):
                return done  # (made with an index built again meanwhile: not kept)
            old = self._cache.pop(key, None)  # (a render made twice: counted once)
            if old is not None:
                self._cache_bytes -= _weight(old)
            self._cache[key] = done
            self._cache_bytes += _weight(done)
            while self._cache_bytes > self._cache_cap and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= _weight(old)
        return done

    def _cached(self, key: Key, s: Loaded) -> Rendered | None:
        """A render kept, made the most recently used (none of ``s``'s, when its index was
        built again since they were made: they were of the old one)."""
        with self._cache_lock:
            made_with = (s.epoch, s.rebuilds)
            if self._cache_index.get(s.path, made_with) != made_with:
                for old in [k for k in self._cache if k.path == s.path]:
                    self._cache_bytes -= _weight(self._cache.pop(old))
            self._cache_index[s.path] = made_with
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    # -- one-file views ---------------------------------------------------------------------

    def piece(
        self, s: Loaded, e: Entry, d: dict[str, Any] | None = None, keep: bool = True
    ) -> onefile.Piece:
        """What a one-file view shows of entry ``e`` (parsed as ``d``, when the caller has
        it; ``keep``: see :meth:`rendered`)."""
        if not e.numbered:
            d = s.parsed(e) if d is None else d
            if e.type == "context_edit":  # what the model stops seeing, said in full
                target = d.get("targetId")
                name = self.file_of(s, target, e) if isinstance(target, str) else None
                return onefile.Piece(e, 0, b"", (), *render.context_edit(d, name))
            return onefile.Piece(e, 0, b"", (), render.preview(d), render.note_detail(d))
        num = s.index.num.get(e.id, 0)
        key = Key(Kind.MESSAGE, s.path, s.epoch, e.id)
        # (a line whose id a later line took renders as the winner, as the entry folders do)
        body, images = self.rendered(s, key, d if s.index.by_id.get(e.id) is e else None, keep)
        width = render.number_width(num)  # its folder's: the entry is the last file there
        kind = e.kind or "message"
        names = [
            render.image_name(num, width, kind, k, ext) for k, (ext, _) in enumerate(images, 1)
        ]
        return onefile.Piece(e, num, body, names, "")

    def branch_text(self, s: Loaded, eid: str) -> bytes:
        """``nodes/<id>.md``: every entry of the path root→``eid``, in order."""
        key = Key(Kind.BRANCH, s.path, s.epoch, eid)
        hit = self._cached(key, s)
        if hit is not None:
            return hit[0]
        self.entry(s, eid)
        data = b"".join(self._branch_block(s, i) for i in s.index.path(eid))
        return self._keep(key, (data, []), s)[0]

    def _branch_block(self, s: Loaded, eid: str) -> bytes:
        return onefile.block(self.piece(s, s.index.by_id[eid]), "../nodes/" + id_name(eid))

    def branch_size(self, s: Loaded, eid: str) -> int:
        """The size of ``nodes/<id>.md`` without making it: the size of its parent's view
        plus its own block, kept per entry (``stat`` of every branch link, as ``rg`` does
        while it walks, costs one block per entry, not one path per leaf)."""
        sizes: dict[str, int] = s.memo.setdefault("branch_sizes", {})
        self.entry(s, eid)
        todo: list[str] = []
        cur: str | None = eid
        while cur is not None and cur not in sizes:
            todo.append(cur)
            cur = s.index.parent[cur]
        total = sizes[cur] if cur is not None else 0
        for i in reversed(todo):
            total += len(self._branch_block(s, i))
            sizes[i] = total
        return sizes[eid]

    def branch_step(self, s: Loaded, eid: str, whole: bool) -> Work | None:
        """A long path's size (``whole``: its text) is made off the loop, then kept."""
        if s.size < INLINE_BYTES:
            return None
        if whole:
            if Key(Kind.BRANCH, s.path, s.epoch, eid) in self._cache:
                return None
            return lambda: self.branch_text(s, eid)
        if eid in s.memo.get("branch_sizes", ()):
            return None
        return lambda: self.branch_size(s, eid)

    def _conversation(self, s: Loaded) -> int:
        """``conversation.md``: the entries not shown yet are added at its end; its size."""
        conv = self.conversation(s)
        with conv.lock:
            entries = s.parser.entries  # complete lines only: a torn tail may still change
            problems = s.lasting_problems()
            # (new problems alone too: a malformed line appended after the last entry is
            # noted now, not once another entry comes)
            if conv.done < len(entries) or not conv.noted(problems):
                pieces = self._first_pieces(s)
                conv.add(entries, problems, self._numbers(s), pieces, self._sizer(s))
            return conv.size

    def _first_pieces(self, s: Loaded) -> Callable[[Entry], onefile.Piece]:
        """Pieces for entries conversation.md shows for the first time: each line is parsed
        once for them and for tree.txt's previews and session.json's stats (the listing that
        renders one renders the others)."""
        made = summary.previews_of(s)
        return lambda e: self.piece(s, e, made.offer(s, e), keep=False)

    @staticmethod
    def _sizer(s: Loaded) -> Callable[[Entry, int], None]:
        """What keeps the size of ``nodes/<id>.md`` of each entry conversation.md shows
        (from its block's size there), when its parent's is known (file order: nearly
        always). ``rg`` stats where every link of a walk leads: without these, each
        branch's entries were rendered again for it."""
        sizes: dict[str, int] = s.memo.setdefault("branch_sizes", {})

        def sized(e: Entry, size: int) -> None:
            if e.id in sizes or s.index.by_id.get(e.id) is not e:
                return  # (a line whose id a later line took: its branch is the winner's)
            parent = s.index.parent.get(e.id)
            if parent is None or parent in sizes:
                sizes[e.id] = (sizes[parent] if parent is not None else 0) + size

        return sized

    @staticmethod
    def conversation(s: Loaded) -> onefile.Conversation:
        conv: onefile.Conversation = s.memo.setdefault("conversation", onefile.Conversation())
        return conv

    @staticmethod
    def _numbers(s: Loaded) -> Callable[[str], int]:
        return lambda eid: s.index.num.get(eid, 0)

    def _pieces(self, s: Loaded) -> Callable[[Entry], onefile.Piece]:
        """Pieces for conversation.md's groups made again (each is held as a whole)."""
        return lambda e: self.piece(s, e, keep=False)

    def conv_size(self, s: Loaded) -> int:
        """conversation.md's size as :meth:`ready` rendered it."""
        size: int = self._rendering(s, Kind.CONVERSATION)
        return size

    def conv_snapshot(self, s: Loaded, defer: bool | None = None) -> ConvSnapshot:
        """An open conversation.md: its size now, its bytes made again where not held."""
        conv = self.conversation(s)
        remade = functools.partial(self._remade, s, conv)
        return ConvSnapshot(conv, self.conv_size(s), remade, self.defer if defer is None else defer)

    def conv_text(self, s: Loaded) -> bytes:
        """conversation.md whole (tests and scripts: the mount reads it by range)."""
        snap = self.conv_snapshot(s, defer=False)
        return snap.read(0, snap.size)

    def _remade(self, s: Loaded, conv: onefile.Conversation, index: int) -> bytes:
        """Group ``index`` of conversation.md made again. It must come out as it was (an
        entry renders the same while the index keeps its meaning; a rebuilt index may not):
        else the read is answered ESTALE."""
        g, items = conv.items(index)
        data = onefile.remake(g, items, s.parser.entries, self._numbers(s), self._pieces(s))
        if len(data) != g.size or zlib.crc32(data) != g.crc:
            log.warning("%s: conversation.md came out different: answered ESTALE", s.path)
            raise Changed(s.path)
        return data

    def session_text(self, s: Loaded, kind: Kind) -> bytes:
        """tree.txt or session.json as :meth:`ready` rendered it (an older rendering, all of
        one version, rather than a render here when the file moved on meanwhile)."""
        data: bytes = self._rendering(s, kind)
        return data

    def _rendering(self, s: Loaded, kind: Kind) -> Any:
        """What the memo of whole-session file ``kind`` holds (rendered here if none)."""
        if kind not in s.memo:
            self._render(s, kind)
        return s.memo[kind][1]

    def _render(self, s: Loaded, kind: Kind) -> None:
        """Render a whole-session file of ``s`` (blocking in proportion to the session) and
        keep it in its memo with ``s``'s version: tree.txt's and session.json's bytes,
        conversation.md's size (its text is its :class:`~pisessfs.onefile.Conversation`'s).
        A frozen copy's rendering reaches the live state through ``Loaded.adopt``."""
        self.made += 1
        version = s.version
        folder_of = lambda eid: self.folder_of(s, eid)  # noqa: E731
        data: bytes | int
        if kind == Kind.TREE:
            data = summary.tree_txt(s, folder_of)
        elif kind == Kind.CONVERSATION:
            data = self._conversation(s)
        else:
            data = summary.session_json(s, folder_of, set(self.listed(s)))
        s.memo[kind] = (version, data)

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
        leaves = set(self.listed(s))
        if s.index.resume is not None:
            leaves.add(s.index.resume)
        for leaf in leaves & sizes.keys():
            name = id_name(leaf)
            for kind, shown in ((Kind.BRANCH, name + VIEW_SUFFIX), (Kind.ENTRY, name)):
                wanted.append((Key(Kind.NODES, s.path), shown, Key(kind, s.path, s.epoch, leaf)))
        for folder, shown, key in wanted:
            n = self._ino.get(folder)
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
                return functools.partial(self._remade, copies[0], conv, index)

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
            return key(self._keys.get(ino))

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

    # -- the scratch layer ----------------------------------------------------------------

    def _node(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise NotFound(f"scratch inode {ino} is gone")
        return node

    def scratch(self, key: Key) -> Node:
        """The scratch node of ``key``."""
        return self._node(self._ino.get(key, 0))

    def scratch_attr(self, ino: int) -> Attr:
        node = self._node(ino)
        size = len(node.target if node.is_link else node.data)
        key = self.key(ino)
        return Attr(ino, node.mode, size, node.mtime_ns, 1, False, True, node.uid, node.gid, key)

    def new_node(self, mode: int) -> Node:
        self._serial += 1
        node = Node(self.ino(Key(Kind.SCRATCH, k=self._serial)), mode)
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
            with self._naming:
                if node.ino not in self._held:
                    self._unname(node.ino)

    def unlink_everywhere(self, node: Node) -> None:
        for folder, name in list(node.links):
            self.unlink(node, folder, name)

    def whiteout(self, folder: Key, name: str, on: bool) -> None:
        self._relisted(folder)
        ov = self.overlays.setdefault(folder, Overlay())
        (ov.whiteouts.add if on else ov.whiteouts.discard)(name)
        if ov.empty():
            del self.overlays[folder]

    def known(self, key: Key) -> int | None:
        """The inode of ``key`` if the kernel may have seen it (None: nothing to invalidate)."""
        return self._ino.get(key)

    def _relisted(self, folder: Key) -> None:
        """What ``folder`` lists is about to change (a save, a whiteout): the kernel keeps a
        folder's listing until told (fuse_ops.NO_OPENDIR), and a save at ``flush`` is no
        change of the folder it would see itself."""
        n = self._ino.get(folder)
        if n is not None:
            self.changed_contents(n)

    def _named(self) -> list[tuple[Key, int]]:
        """Every name and its number, as of now (a scan must not see another thread name)."""
        with self._naming:
            return list(self._ino.items())

    def known_of(self, kind: str) -> list[tuple[Key, int]]:
        """The nodes of ``kind`` the kernel may have seen (a scan: for an inotify overflow)."""
        return [(key, n) for key, n in self._named() if key.kind == kind]

    def came_or_went(self) -> None:
        """A session file came or went: a fork's ``parent`` link may have too, and the
        kernel keeps the fork's listing."""
        self.moved = time.monotonic()
        for path in list(self.forks):  # (a thread may add one meanwhile)
            for kind in _FOLLOWING:
                n = self._ino.get(Key(kind, path))
                if n is not None:
                    self.changed_contents(n)

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
            n = self._ino.get(Key(kind, path))
            if n is not None:
                self.invalidations.append((n, PAGES if grows is Growth.PAGES else None))

    def changed_everything_of(self, path: str) -> None:
        """The session file's owner or mode changed: every node of it shows other bits.
        A scan of every inode: chmod and chown are rare."""
        self.store.changed(path)
        sf = self.store.known(path)
        if sf is not None:
            sf.recheck = True  # entry nodes look at the file again, once
        for key, n in self._named():
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

    def entry_xattrs(self, key: Key) -> dict[str, bytes]:
        """An entry node's: its id, and its label if it has one."""
        out = {"user.pi.id": utf8(key.eid)}
        s = self.session(key)
        label = self._labels(s).get(self.label_target(s, key))
        if isinstance(label, str):
            out["user.pi.label"] = utf8(label)
        return out

    def session_name(self, s: Loaded) -> str | None:
        """The name Pi shows for the session (Pi's harness storage: its name fact)."""
        if s.parser.harness is not None:
            name = s.parser.harness_info.get("name")
            return name if isinstance(name, str) and name else None
        return writer.pi_name(s)

    def label_target(self, s: Loaded, key: Key) -> str:
        """The entry a label on this node is about: a message file's entry; for an entry
        folder, the entry its files end with (its own, or, when it takes no number, like a
        label or a name ending a branch, its nearest numbered ancestor), so a folder and its
        last file carry one label, and ``current`` keeps showing it after a label moved it."""
        if key.kind == Kind.ENTRY:
            e = s.index.by_id.get(key.eid)
            if e is not None and e.kind is None:
                return s.index.anchor.get(key.eid) or key.eid
        return key.eid

    def _labels(self, s: Loaded) -> Mapping[str, object]:
        if s.parser.harness is not None:
            labels = s.parser.harness_info.get("labels")
            return labels if isinstance(labels, dict) else {}
        return s.index.labels


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


def _weight(r: Rendered) -> int:
    return len(r[0]) + sum(len(data) for _, data in r[1])


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
