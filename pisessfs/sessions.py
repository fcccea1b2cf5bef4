"""Finding session files and keeping them parsed: the only module that reads the sessions.

This module owns the sessions root as sessions: which project folders and ``*.jsonl`` files it
holds (a link is never followed, see ``files``), and for each file a :class:`Loaded` state
(parser and tree index) brought up to date by reading only appended bytes when the file grew,
and rebuilt whole (a new *epoch*) when it shrank, was replaced or had its prefix rewritten.
Parsed states are evicted least-recently-used past a byte cap.

Bringing a state up to date is done in *steps* (:meth:`SessionFile.step`) so that the event
loop never waits long: a step reads a bounded slice of appended bytes on the calling thread,
or hands back blocking work (a whole parse, an index rebuild, waiting for a thread that holds
the session) for the caller to run off the loop. Whatever changes a state, or reads all of it
at once, holds the session's lock; appends are only ever applied by the loop's thread, so
readers there see a state that does not change under them.

It knows nothing of inodes or FUSE.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import itertools
import logging
import os
import stat
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .files import Entry as FileEntry
from .files import Files, Unreadable
from .heads import Head
from .kept import Kept
from .loaded import (
    INLINE_BYTES,
    WINDOW,
    YIELD,
    Identity,
    Loaded,
    Work,
    freeze_grown,
    no_gc,
)
from .naming import Heads, Seen, stem_of
from .newest import Newest
from .store import DiskStore

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

_RACY_NS = 100_000_000
#: Seconds a parsed session is kept past the cap after its last use (``--cache-idle``).
MIN_IDLE = 5.0
#: The share of the cap a store in memory (``--disk-cache off``) may hold of what the
#: parse cache drops (the parse cache has the rest, at least).
SHARE = 0.5
#: The share of the cap the answers kept past the parse (``kept``) may take at most, and
#: what they may take whatever the cap: a few KiB a session, and without them every walk of
#: a session the cap dropped parses it again (``--cache-mb 0`` parses each once a walk).
ANSWERS_SHARE, ANSWERS_FLOOR = 0.25, 16 << 20
#: ``--warm`` stops when such a store is this full: more would push out what it warmed.
WARM_KEPT = 0.9
#: Sessions ``Store.leave`` tries at most (the oldest: a thread may hold one or render it).
LEAVE_TRIES = 16

__all__ = ["YIELD", "Identity", "Loaded", "SessionFile", "Store", "Unreadable", "Work"]


class SessionFile:
    """One ``*.jsonl`` file under the root, parsed on demand."""

    def __init__(self, store: Store, path: str) -> None:
        self.store = store
        self.path = path
        self.loaded: Loaded | None = None
        self.epoch = 0
        self._fingerprint: tuple[Identity, int] | None = None  # kept across eviction
        self.lock = threading.Lock()  # held while the state changes or is read whole
        self.recheck = False  # the file's owner or mode may have changed: stat it again
        self.working = 0  # threads reading the state without its lock (renders): kept
        self.forgotten = 0  # times the file was gone (forget): a read begun before is void
        self.seen: tuple[os.stat_result, float] | None = None  # the last stat, and when

    def stat(self) -> os.stat_result:
        st = self.store.files.lstat(self.path)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(self.path, OSError(errno.ENOENT, "not a regular file any more"))
        self.seen = (st, time.monotonic())
        return st

    def identity(self, fresh: float) -> Identity:
        """The file's identity, from a ``stat`` made less than ``fresh`` seconds ago if
        there was one: a walk asks a dropped session's folders and files six times in a row,
        and each ``stat`` walks the path from the root without following links (an eighth
        of a warm walk's time)."""
        return Identity.of(self.recent(fresh))

    def recent(self, fresh: float) -> os.stat_result:
        """A ``stat`` of the file made less than ``fresh`` seconds ago (a new one if none)."""
        seen = self.seen
        return seen[0] if seen is not None and time.monotonic() - seen[1] < fresh else self.stat()

    def changed(self) -> None:
        """The file changed (the watcher says so): the next identity is a new ``stat``."""
        self.seen = None

    def step(self) -> Work | None:
        """Bring the state a step closer to the file without blocking; None when it is up to
        date. Otherwise :data:`YIELD` (a slice was parsed: call again) or blocking work for
        another thread (run it, then call again)."""
        if not self.lock.acquire(blocking=False):
            return self.wait
        try:
            return self._step()
        finally:
            self.lock.release()

    def _step(self) -> Work | None:
        self.recheck = False
        ident = Identity.of(self.stat())
        cur = self.loaded
        if cur is not None and cur.ident == ident:
            self.store.touch(self)
            return None
        if cur is not None and self._grew(cur, ident):
            if ident.size - cur.size > INLINE_BYTES:
                return self.catch_up  # a burst (Pi writing megabytes a second): off the loop
            return self._append(cur, ident)
        if ident.size >= INLINE_BYTES:
            return self.reload
        self._reload()
        self.store.touch(self)
        return None

    def _absorb(self, cur: Loaded, ident: Identity, limit: int | None) -> bool:
        with self.store.files.reading(self.path, ident.dev, ident.ino) as fd:
            try:
                return cur.absorb(fd, ident, limit)
            except OSError as err:
                raise Unreadable(self.path, err) from None

    def _append(self, cur: Loaded, ident: Identity) -> Work | None:
        done = self._absorb(cur, ident, INLINE_BYTES)
        if not cur.index_new():
            if cur.size >= INLINE_BYTES:
                return self.rebuild
            cur.rebuild()
        freeze_grown(cur)
        self.store.touch(self)
        return None if done and cur.ident == ident else YIELD

    def catch_up(self) -> None:
        """Blocking: parse what was appended in one go (a burst bigger than a slice). In
        slices on the loop, 10 MB/s of appends kept the loop busy half the time, and other
        sessions' requests waited behind them for over a second."""
        with self.lock:
            cur = self.loaded
            ident = Identity.of(self.stat())
            if cur is None or cur.ident == ident or not self._grew(cur, ident):
                return  # done meanwhile, or not an append: the next step sees to it
            self._absorb(cur, ident, None)
            if not cur.index_new():
                cur.rebuild()
            freeze_grown(cur)

    def wait(self) -> None:
        """Blocking: wait for the thread that holds the session to be done with it."""
        with self.lock:
            pass

    def reload(self) -> None:
        """Blocking: read the file whole into a new state, if it still needs it."""
        with self.lock:
            ident = Identity.of(self.stat())
            cur = self.loaded
            if cur is None or (cur.ident != ident and not self._grew(cur, ident)):
                self._reload()

    def rebuild(self) -> None:
        """Blocking: build the index of the state anew (appends changed earlier entries)."""
        with self.lock:
            if self.loaded is not None:
                self.loaded.rebuild()

    def load(self) -> Loaded:
        """The state brought up to date with the file, blocking as long as that takes (for
        tests, scripts and threads that hold nothing; the mount steps instead)."""
        while (work := self.step()) is not None:
            if work is not YIELD:
                work()
        assert self.loaded is not None
        return self.loaded

    def _grew(self, cur: Loaded, ident: Identity) -> bool:
        """Whether the file only grew since ``cur`` read it (same inode, same last bytes)."""
        old = cur.ident
        if old is None or (old.dev, old.ino) != (ident.dev, ident.ino) or ident.size < old.size:
            return False
        w = len(cur.window)
        return cur.pread(w, cur.size - w) == cur.window

    def _reload(self) -> None:
        """Read the file whole into a new state (under the lock).

        The collector stays paused from the first byte to :func:`gc.freeze`: resumed in
        between, its first young-generation pass would walk every object just made (seconds
        on a 1 GB session, every thread waiting)."""
        forgotten = self.forgotten
        with no_gc():
            fresh = self._read_whole()
            log.debug("read %s whole (%d bytes)", self.path, fresh.size)
            fresh.rebuild()
            # (forget holds this lock, not the session's: the loop must not wait for a parse)
            with self.store.lru_lock:
                if self.forgotten != forgotten:
                    # The watcher said the file is gone while a thread read it: kept, the
                    # state would be held outside the cap for the rest of the mount.
                    log.debug("%s: gone while it was read: not kept", self.path)
                    return
                self.loaded = fresh
            self._fingerprint = None
            if fresh.size >= INLINE_BYTES:
                gc.freeze()  # never walked again: none of these objects is in a cycle
        if self.store.on_parsed is not None:
            self.store.on_parsed(self.path, fresh)

    def _read_whole(self) -> Loaded:
        fd = self.store.files.open(self.path)
        try:
            st = os.fstat(fd)  # the identity of exactly what is read
            # Bytes that merely grew since an eviction keep the epoch (and so the kernel's
            # inodes); anything else read whole again is a new version of the file.
            if not self._continues_evicted(st, fd) and (
                self.loaded is not None or self._fingerprint is not None
            ):
                self.epoch += 1
            fresh = Loaded(self.store.files, self.path, self.epoch)
            try:
                fresh.absorb(fd, Identity.of(st))
            except OSError as err:
                raise Unreadable(self.path, err) from None
        finally:
            os.close(fd)
        return fresh

    def _continues_evicted(self, st: os.stat_result, fd: int) -> bool:
        if self._fingerprint is None:
            return False
        old, crc = self._fingerprint
        start = max(0, old.size - WINDOW)
        return (
            (old.dev, old.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= old.size
            and zlib.crc32(os.pread(fd, old.size - start, start)) == crc
        )

    def forget(self) -> None:
        """The file is gone: drop its parsed state (open readers keep their snapshots). A file
        that appears again at this path is another version: a new epoch."""
        self.forgotten += 1
        if self.loaded is not None or self._fingerprint is not None:
            self.epoch += 1  # (dropped by the cap or not: the kernel may hold its nodes)
        self.loaded = None
        self._fingerprint = None

    def evict(self) -> None:
        """Drop the parsed state, leaving what the store's owner keeps of it (``on_evict``)."""
        cur = self.leave()
        if cur is not None:
            self.let_go(cur)

    def leave(self) -> Loaded | None:
        """Have the store's owner keep what it will answer without the state (its answers,
        its files in the store); the state, unless it may not be dropped now."""
        cur = self.loaded
        if cur is None or cur.ident is None or self.working:
            return None  # a thread renders it: evicted now, it would be parsed again, forever
        if not self.lock.acquire(blocking=False):
            return None  # a thread is reading it whole: it stays until the next pass
        try:
            self._evicted(cur)
        finally:
            self.lock.release()
        return cur

    def let_go(self, cur: Loaded) -> bool:
        """Drop ``cur``, the state :meth:`leave` was called for, if it still is the file's
        and no thread is reading it."""
        if self.loaded is not cur or self.working or not self.lock.acquire(blocking=False):
            return False
        try:
            assert cur.ident is not None
            self._fingerprint = (cur.ident, zlib.crc32(cur.window))
            self.loaded = None
        finally:
            self.lock.release()
        log.debug("%s: dropped from the parse cache", self.path)
        return True

    def _evicted(self, cur: Loaded) -> None:
        """Tell the store's owner that ``cur`` is dropped (while it is still the file's
        state): a failure there loses what it would have kept, never the eviction."""
        hook = self.store.on_evict
        if hook is None:
            return
        try:
            hook(cur)
        except Exception:
            log.exception("%s: keeping what it answered failed", self.path)


@dataclass(frozen=True, slots=True)
class Leaving:
    """A session a thread made ready to drop (``Store.leave``), and when."""

    sf: SessionFile
    state: Loaded
    since: float


@dataclass(frozen=True, slots=True)
class Listing:
    """A folder of the root: its shown name and real path; ``is_session`` for flat files."""

    name: str
    path: str
    is_session: bool
    alias_of: str | None = None  # a name that is a link to the listed name ``alias_of``


#: The root's own names (DESIGN "Layout"): a project folder whose name stripped of ``--``
#: would be one of them shows its raw name (a folder really named so wins over them).
ROOT_NAMES = frozenset({"latest", "search", "usage"})


def project_name(raw: str) -> str:
    """``--home-ana-src-app--`` -> ``home-ana-src-app`` (never ``.`` or ``..``)."""
    if len(raw) > 4 and raw.startswith("--") and raw.endswith("--"):
        stripped = raw[2:-2]
        if stripped not in (".", ".."):
            return stripped
    return raw


def _session_entries(entries: list[FileEntry]) -> list[FileEntry]:
    """The session files among a folder's entries."""
    return [d for d in entries if d.is_file and _is_session_name(d.name)]


def _unique(items: list[Listing], kept: dict[str, str]) -> list[Listing]:
    """Names made unique in their folder: a later duplicate gets ``~2``, ``~3``… (file names
    are sorted, so the same folder always gives the same names). A file that was given a
    name keeps it while mounted (``kept``: path -> name, updated): a new file whose name
    sorts first takes the next free name, it never renames the one already there."""
    seen = {kept[i.path] for i in items if i.path in kept}
    out: list[Listing] = []
    for item in items:
        name = kept.get(item.path)
        if name is None:
            name, n = item.name, 1
            while name in seen:
                n += 1
                name = f"{item.name}~{n}"
            seen.add(name)
            kept[item.path] = name
        out.append(item if name == item.name else Listing(name, item.path, item.is_session))
    return out


def _aliases(listing: list[Listing], heads: dict[str, Head]) -> dict[str, Listing]:
    """Unlisted names of a folder's sessions, each a link to the listed name: the file's stem
    (the name before sessions were named for people) and the session id. A listed name, or
    a name two sessions would share, is no alias."""
    shown = {item.name for item in listing}
    out: dict[str, Listing] = {}
    clash: set[str] = set()
    for item in listing:
        if not item.is_session:
            continue
        stem = stem_of(item.path)
        head = heads.get(item.path)
        for alias in {stem, *([head.session_id] if head and head.session_id else [])}:
            if alias in shown or alias == item.name or "/" in alias or alias in (".", ".."):
                continue
            if alias in out and out[alias].path != item.path:
                clash.add(alias)
            out[alias] = Listing(alias, item.path, True, item.name)
    for alias in clash:
        del out[alias]
    return out


class Store:
    """The sessions root: discovery, the parsed-session cache and its byte cap."""

    def __init__(self, root: str, cache_bytes: int = 1 << 30, min_idle: float = MIN_IDLE) -> None:
        self.files = Files(root)
        self.root = self.files.root
        self.cache_bytes = cache_bytes
        self.min_idle = min_idle
        self._files: dict[str, SessionFile] = {}
        # path -> (bytes held, when last used), oldest first
        self._lru: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._total = 0
        self._listings: dict[str, tuple[int, list[Listing], dict[str, Listing]]] = {}
        self.heads = Heads(self.files, self._kept_heads)
        self._shown: dict[str, str] = {}  # path -> the name it was listed with
        self._provisional: set[str] = set()  # named before their first line was there
        self.lru_lock = threading.Lock()
        # What a dropped session leaves behind (the view says what: ``on_evict`` is called
        # with the state about to be dropped) goes to the store: on disk, or in memory
        # within :data:`SHARE` of the same cap.
        self.on_evict: Callable[[Loaded], None] | None = None
        # What a whole read of a session found besides its entries (its usage) is offered
        # to whoever keeps it (the view says who).
        self.on_parsed: Callable[[str, Loaded], None] | None = None
        # Told of every session file that changed, came or went (None: any may have): what
        # keeps something of every session (the search index) looks at those only.
        self.watchers: list[Callable[[str | None], None]] = []
        # What each session's folders answered, kept past its parse (a walk of a dropped
        # session is answered from them), within a share of the same cap.
        self.answers = Kept(cap=max(int(cache_bytes * ANSWERS_SHARE), ANSWERS_FLOOR))
        self.disk: DiskStore | None = None  # the store (``store``)
        self.newest = Newest(self)  # the root's latest
        self._kept_heads_taken = False

    def _kept_heads(self) -> dict[str, list[Any]]:
        return self.disk.names.heads if self.disk is not None else {}

    def heads_to_keep(self) -> dict[str, list[Any]]:
        """The heads to keep for the next mount (``Heads.to_keep``)."""
        return self.heads.to_keep()

    def _cached(self, folder: str, build: Callable[[], list[Listing]]) -> list[Listing]:
        """A folder's listing, scanned again only when the folder's mtime moved (a file or
        folder came or went), so a lookup in a folder of 10,000 sessions costs one stat.

        Raises :class:`Unreadable` when the folder cannot be listed."""
        mtime = self.files.lstat(folder).st_mtime_ns
        hit = self._listings.get(folder)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        listing = _unique(build(), self._shown)
        table = _aliases(listing, self.heads.known)
        table.update((item.name, item) for item in listing)
        # Folder times are coarse (a few ms): a change in the same tick as this scan would
        # not move them, so a scan that close to the last change is not trusted later.
        racy = time.time_ns() - mtime < _RACY_NS
        self._listings[folder] = (-1 if racy else mtime, listing, table)
        return listing

    def find(self, folder: str, name: str) -> Listing | None:
        """The item shown as ``name`` in ``folder`` (the root or a project)."""
        if folder == self.root:
            self.top()
        else:
            self.sessions_in(folder)
        hit = self._listings.get(folder)  # filled (or confirmed fresh) just now
        return hit[2].get(name) if hit is not None else None

    def top(self) -> list[Listing]:
        """Project folders (names stripped of ``--``) and flat session files of the root."""
        return self._cached(self.root, self._top)

    def _top(self) -> list[Listing]:
        entries = self.files.scandir(self.root)
        dirs = [d for d in entries if d.is_dir]
        sessions = _session_entries(entries)
        stripped = [project_name(d.name) for d in dirs]
        raw_dirs = {d.name for d in dirs}
        out = []
        for d, name in zip(dirs, stripped, strict=True):
            taken = name in raw_dirs or name in ROOT_NAMES or stripped.count(name) > 1
            out.append(Listing(d.name if name != d.name and taken else name, d.path, False))
        shown = {item.name for item in out}
        for d in sessions:
            name = self.head(d.path).name
            taken = name in shown or name in ROOT_NAMES
            out.append(Listing(d.name if taken else name, d.path, True))
        return out

    def project_of(self, path: str) -> str:
        """The name of the project folder of session ``path`` as the root lists it (``.``
        for one lying in the root, or of a folder gone)."""
        folder = os.path.dirname(path)
        found = [i.name for i in self.top() if not i.is_session and i.path == folder]
        return found[0] if found else "."

    def sessions_by_project(self) -> list[tuple[str, str]]:
        """Every session file the mount shows, with its project folder's name (``.`` for one
        lying in the root), without reading one (``usage``)."""
        out = []
        for item in self.top():
            if item.is_session:
                out.append((item.path, "."))
                continue
            with contextlib.suppress(Unreadable):
                out += [(d.path, item.name) for d in self.session_files(item.path)]
        return out

    def sessions_in(self, folder: str) -> list[Listing]:
        return self._cached(folder, lambda: self._sessions_in(folder))

    def _sessions_in(self, folder: str) -> list[Listing]:
        return [Listing(self.head(d.path).name, d.path, True) for d in self.session_files(folder)]

    def session_files(self, folder: str) -> list[FileEntry]:
        return _session_entries(self.files.scandir(folder))

    def head(self, path: str, seen: Seen | None = None, since: int = 0) -> Head:
        """What the head of session file ``path`` says, read the first time the mount sees
        the file and kept: its folder's name never changes while mounted. ``seen``: the
        file's and its folder's ``lstat``, taken when the chmod count was ``since``. A file
        with no whole first line yet (made, its header not written yet) is named by its
        stem until it has one (``header_came``)."""
        head = self.heads.get(path, seen, since)
        if not head.final:
            self.heads.known.pop(path, None)
            self._provisional.add(path)
        return head

    def header_came(self, path: str) -> str | None:
        """Session file ``path`` changed: when it was named before it had a first line and
        has one now, it is named again (its folder's listing is made again). Returns the
        name it had then."""
        if path not in self._provisional or not self.head(path).final:
            return None
        self._provisional.discard(path)
        self._listings.pop(os.path.dirname(path), None)
        return self._shown.pop(path, None)

    def unlisted(self, folder: str) -> tuple[list[str], list[str]]:
        """The session files of ``folder`` when its listing is to be made (again), and those
        of them whose heads are not read yet; else none of either (one stat)."""
        hit = self._listings.get(folder)
        if hit is not None and hit[0] == self.files.lstat(folder).st_mtime_ns:
            return [], []  # (_cached's test: a listing made again reads the heads it lacks)
        paths = [d.path for d in self.session_files(folder)]
        return paths, [p for p in paths if p not in self.heads.known]

    def listing_made(self, folder: str) -> bool:
        """Whether ``folder``'s listing was made and the folder is unchanged since (or was
        changed in that instant: ``_cached`` then makes it again where it is used)."""
        hit = self._listings.get(folder)
        return hit is not None and hit[0] in (-1, self.files.lstat(folder).st_mtime_ns)

    def make_listings(self, folders: list[str] | None = None) -> None:
        """Blocking: the listings of project ``folders`` (all: None) made, each scanned, its
        new heads read, its sessions' store entries read ahead."""
        for folder in folders or [i.path for i in self.top() if not i.is_session]:
            listed, missing = self.unlisted(folder)
            self.prefetch(listed)
            self.read_heads(missing)
            with contextlib.suppress(Unreadable):  # (the listing itself says so)
                self.sessions_in(folder)  # (scans again: after _cached takes the mtime)

    def kept_heads_work(self) -> Work | None:
        """Once per mount, when the store kept the sessions' names (a later mount): every
        project's listing made in one pass before the root's first (stats, no file read)."""
        if self._kept_heads_taken or not self._kept_heads():
            return None
        self._kept_heads_taken = True
        return self.make_listings

    def read_heads(self, paths: list[str]) -> None:
        """Blocking: read the heads of ``paths`` (a folder of many new sessions)."""
        since = self.heads.chmods
        seen = self.heads.seen(paths) if self.disk is not None and self.disk.names.heads else {}
        for path in paths:
            self.head(path, seen.get(path), since)

    def prefetch(self, paths: list[str]) -> None:
        """Have the kernel read the disk cache entries of ``paths`` ahead (their folder is
        being listed: a walk reads them next)."""
        if self.disk is not None and paths:
            self.disk.prefetch(paths)

    def mode_changed(self, path: str) -> str | None:
        """A session file's bits changed (chmod): when that changes whether its name may show
        its first message, the name is made again (the one exception to names fixed while
        mounted: no one may read in a name what they may not read in the file). Returns the
        old name, when it changed."""
        self.heads.chmods += 1  # (before the look: see head)
        if self.disk is not None:
            self.disk.drop(path)  # (its entry was made under the old bits: never used again)
            self.disk.names.forget_head(path)
        self.heads.idents.pop(path, None)
        head = self.heads.known.get(path)
        if head is None:
            return None
        try:
            hidden = self.heads.private(path, self.files.lstat(path).st_mode)
        except Unreadable:
            return None
        if hidden == head.hidden:
            return None
        old = self._shown.pop(path, None)
        self.heads.known.pop(path, None)
        self._listings.pop(os.path.dirname(path), None)
        return old

    def cwd_of(self, folder: str) -> str | None:
        """The working directory the sessions of ``folder`` were started in, when they agree."""
        cwds = {h.cwd for i in self.sessions_in(folder) if (h := self.heads.known.get(i.path))}
        return cwds.pop() if len(cwds) == 1 else None

    def changed(self, path: str) -> None:
        """Session file ``path`` changed (the watcher says so): its entry in the store and
        its last ``stat`` no longer vouch for it."""
        self._tell(path)
        if self.disk is not None:
            self.disk.drop(path)
        sf = self._files.get(path)
        if sf is not None:
            sf.changed()

    def warm_room(self) -> bool:
        """Whether one more session parsed keeps the ones before (``--warm``): the parse
        cache is under the cap, or the store, where the cap sends what it drops, has room."""
        if self.held() < self.cache_bytes:
            return True
        d = self.disk
        return d is not None and (not d.memory or d.total_bytes() < WARM_KEPT * d.cap)

    def held(self) -> int:
        """Bytes counted against the cap: the parsed sessions, the answers kept, and the
        store when it is in memory (what ``status`` shows on its ``in memory`` line)."""
        d = self.disk
        kept = d.total_bytes() if d is not None and d.memory else 0
        return self._total + self.answers.bytes + kept

    def in_memory_store(self) -> DiskStore:
        """A store in memory for what the parse cache drops (``--disk-cache off``), within
        :data:`SHARE` of the cap."""
        return DiskStore(None, int(self.cache_bytes * SHARE), "memory", self.root)

    def session_paths(self) -> tuple[list[str], int]:
        """Every session file the mount shows, in a walk's order (the root's last), and in how
        many project folders (a scan, no file opened: ``status``, the render workers)."""
        try:
            top = self.files.scandir(self.root)
        except Unreadable:
            return [], 0
        paths: list[str] = []
        projects = [d for d in top if d.is_dir]
        for d in projects:
            with contextlib.suppress(Unreadable):
                paths += [f.path for f in self.session_files(d.path)]
        return paths + [d.path for d in _session_entries(top)], len(projects)

    def loaded_paths(self) -> list[str]:
        return [p for p, sf in self._files.items() if sf.loaded is not None]

    def known(self, path: str) -> SessionFile | None:
        return self._files.get(path)

    def changed_all(self) -> None:
        """Any session file may have changed, come or gone (a folder came or went, events
        were lost)."""
        self._tell(None)

    def _tell(self, path: str | None) -> None:
        """Session file ``path`` (None: any) changed, came or went: the watchers are told."""
        self.newest.changed()
        for told in self.watchers:
            told(path)

    def forget(self, path: str) -> None:
        self._tell(path)
        sf = self._files.get(path)
        if self.disk is not None:
            self.disk.drop(path)  # (a session gone leaves none of its text behind)
            self.disk.names.forget_head(path)  # (nor its name)
        self.heads.idents.pop(path, None)  # (nor at unmount)
        self._provisional.discard(path)
        if sf is not None:
            with self.lru_lock:
                sf.forget()
                self._total -= self._lru.pop(path, (0, 0.0))[0]

    def session(self, path: str) -> SessionFile:
        sf = self._files.get(path)
        if sf is None:
            sf = self._files[path] = SessionFile(self, path)
        return sf

    def touch(self, sf: SessionFile) -> None:
        """Mark ``sf`` recently used and drop others past the byte cap, oldest first, but
        none used in the last ``min_idle`` seconds: a session bigger than the cap (or a
        working set that is) stays while it is in use, instead of being parsed again and
        again."""
        now = time.monotonic()
        with self.lru_lock:
            size = sf.loaded.nbytes() if sf.loaded is not None else 0
            old = self._lru.pop(sf.path, (0, 0.0))[0]
            self._lru[sf.path] = (size, now)  # last: O(1), this runs on every request
            self._total += size - old
            self._shrink(now)

    def used(self, sf: SessionFile) -> bool:
        """Mark ``sf`` used now without counting what it holds again (the hot path of a
        walk: every message file asks); False when it is not counted yet (parsed by a
        thread, or not at all): then its next step counts it."""
        with self.lru_lock:
            hit = self._lru.get(sf.path)
            if hit is None:
                return False
            self._lru[sf.path] = (hit[0], time.monotonic())
            self._lru.move_to_end(sf.path)
            return True

    def grew(self, path: str, more: int) -> None:
        """Session ``path`` holds ``more`` bytes than it was counted for (renders it kept
        between two steps: the next step that may drop sessions drops for them)."""
        with self.lru_lock:
            hit = self._lru.get(path)
            if hit is not None:
                self._lru[path] = (hit[0] + more, hit[1])
                self._total += more

    def shrink(self, most: int, room: int = 0, idle: float | None = None) -> int:
        """Drop at most ``most`` sessions, least recently used first, until ``room`` bytes
        more fit under the cap, of those not used in the last ``idle`` seconds (default:
        ``min_idle``); how many went."""
        with self.lru_lock:
            return self._shrink(time.monotonic(), most, room, idle)

    def leave(self, room: int, idle: float) -> Leaving | None:
        """Blocking (a thread): the least recently used session past the cap (with ``room``
        bytes more), not used for ``idle`` seconds, made ready to drop: what it will answer
        without its state is kept (``on_evict``), which takes a while. The loop then lets it
        go (:meth:`let_go`): a request on the loop that reads it is then not in the middle
        of its answer. ``--warm`` drops one at a time so, as fast as the store writes them
        (what a request drops at once is more than its writer's queue takes)."""
        with self.lru_lock:
            now = time.monotonic()
            if self.held() <= self.cache_bytes - room:
                return None
            idle_paths = itertools.islice(self._idle(now, idle), LEAVE_TRIES)
            oldest = [self._files[path] for path, _ in idle_paths]
        for sf in oldest:  # (outside the lock: the loop's requests take it, and this is slow)
            made = _leaving(sf, now)
            if made is not None:
                return made
        return None

    def leaving(self, path: str) -> Leaving | None:
        """Blocking (a thread): session ``path`` made ready to drop, as :meth:`leave` does
        for the least recently used one (``--warm`` drops each session it saved)."""
        sf = self._files.get(path)
        return _leaving(sf, time.monotonic()) if sf is not None else None

    def let_go(self, leaving: Leaving) -> bool:
        """On the loop: drop the session :meth:`leave` made ready, unless it was used since."""
        sf = leaving.sf
        with self.lru_lock:
            hit = self._lru.get(sf.path)
            if hit is None or hit[1] > leaving.since or not sf.let_go(leaving.state):
                return False
            self._total -= hit[0]
            del self._lru[sf.path]
            return True

    def _idle(self, now: float, idle: float) -> Iterator[tuple[str, int]]:
        """Sessions not used in the last ``idle`` seconds and what each holds, least recently
        used first (under the LRU's lock)."""
        for path, (held, used) in self._lru.items():
            if now - used < idle:
                return
            yield path, held

    def _shrink(
        self, now: float, most: int | None = None, room: int = 0, idle: float | None = None
    ) -> int:
        cap = self.cache_bytes - room
        if self.held() <= cap:
            return 0  # the common case: no walk over every session, on every request
        gone: list[str] = []  # (taken out after the loop: not a copy of 5,000 per request)
        for path, held in self._idle(now, self.min_idle if idle is None else idle):
            if self.held() <= cap or (most is not None and len(gone) >= most):
                break
            victim = self._files[path]
            victim.evict()
            if victim.loaded is None:
                self._total -= held
                gone.append(path)
        for path in gone:
            del self._lru[path]
        return len(gone)


def _leaving(sf: SessionFile, now: float) -> Leaving | None:
    """``sf`` made ready to drop (``SessionFile.leave``), as of ``now``; None if it may not."""
    cur = sf.leave()
    return Leaving(sf, cur, now) if cur is not None else None


def _is_session_name(name: str) -> bool:
    """``<stem>.jsonl`` (Pi's temp files, ``*.jsonl.tmp``, are not sessions)."""
    return name.endswith(".jsonl") and len(name) > len(".jsonl")
