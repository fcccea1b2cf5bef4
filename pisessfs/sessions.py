"""Finding session files and keeping them parsed: the only module that reads the sessions.

This module owns the sessions root on disk: which project folders and ``*.jsonl`` files it
holds (never following a symlink out of it), and for each file a :class:`Loaded` state (its
bytes, the parser, the tree index) that is brought up to date by reading only appended
bytes when the file grew, and rebuilt whole (a new *epoch*) when it shrank, was replaced or
had its prefix rewritten. Parsed states are evicted least-recently-used past a byte cap.

It knows nothing of inodes or FUSE. Loading a large file blocks: callers decide which thread
runs :meth:`SessionFile.load` (``needs_load`` says whether it would).
"""

from __future__ import annotations

import gc
import logging
import os
import stat
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .jsonl import Parser, Stats, decode_line
from .model import Entry, Problem
from .tree import Index, NeedsRebuild

log = logging.getLogger(__name__)

VOLATILE = ("listed", "tree", "json")
_RACY_NS = 100_000_000
_WINDOW = 4096  # bytes before the old end compared to detect a rewritten prefix
# Bytes read and parsed at a time: above glibc's largest mmap threshold (32 MiB), so each
# chunk is its own mapping, given back to the system when parsed (no heap left behind).
_CHUNK = 40 << 20
INLINE_BYTES = 512 << 10  # files below this are parsed on the event loop (a few ms at most)


class Unreadable(Exception):
    """The session file cannot be read (permissions, vanished)."""

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(f"{path}: {err.strerror}")
        self.path = path
        self.errno = err.errno


@dataclass(frozen=True, slots=True)
class Identity:
    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Loaded:
    """A parsed session: parser and index, valid for one epoch, and a descriptor of the file.

    The file's bytes are not kept: an entry's line is read again (``pread``) when it is
    rendered, through a descriptor opened with this state, so it reads the very file (inode)
    that was parsed even if the path is replaced meanwhile. A parsed 100 MB session costs
    its index only, about half the file's size.
    """

    def __init__(self, path: str, epoch: int, fd: int) -> None:
        self.path = path
        self.epoch = epoch
        self.fd = fd
        weakref.finalize(self, os.close, fd)  # closed when no reader holds this state
        self.size = 0  # bytes parsed
        self.window = b""  # the last bytes parsed: proof that the file only grew since
        self.parser = Parser(path)
        self.index = Index()
        self.ident: Identity | None = None
        self.consumed = 0  # how many of parser.entries the index has seen
        self._tail_indexed = False
        self._stats = Stats()
        self._counted = 0
        self.reported: set[tuple[int, str]] = set()
        # Renders the view derives from this state. Entry-derived ones stay valid while the
        # file only grows; whole-session ones (VOLATILE) are dropped on every change.
        self.memo: dict[str, Any] = {}

    @property
    def entries(self) -> list[Entry]:
        """Entries in file order, with a provisional torn tail last."""
        tail = self.parser.tail
        return [*self.parser.entries, tail] if tail else self.parser.entries

    def problems(self) -> list[Problem]:
        out = [*self.parser.problems, *self.index.problems]
        if self.parser.tail_problem:
            out.append(self.parser.tail_problem)
        if self.parser.header is None and not any(p.kind in ("no-header", "bom") for p in out):
            out.append(Problem(0, "no-header", "no session header: Pi does not load this file"))
        return sorted(out, key=lambda p: p.line)

    def stats(self) -> Stats:
        """Counts, models, tokens and cost: gathered on demand (session.json), not while
        indexing, and only over the entries not counted yet."""
        entries = self.parser.entries
        for e in entries[self._counted :]:
            self._stats.add(e.type, self.parsed(e))
        self._counted = len(entries)
        return self._stats

    def raw(self, e: Entry) -> bytes:
        return os.pread(self.fd, e.end - e.start, e.start)

    def parsed(self, e: Entry) -> dict[str, Any]:
        """The entry's line parsed again in full (empty if it no longer parses)."""
        d, _ = decode_line(self.raw(e))
        return d if isinstance(d, dict) else {}

    def read_all(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def nbytes(self) -> int:
        return self.size

    def absorb(self, offset: int, ident: Identity) -> None:
        """Read the file from ``offset`` (the bytes parsed so far) to its end, in chunks (a
        100 MB file is never in memory whole), and bring parser and index up to date."""
        was_enabled = gc.isenabled()
        gc.disable()  # ~10 objects per line, none cyclic: the collector only slows this down
        try:
            while chunk := os.pread(self.fd, _CHUNK, offset):
                offset += len(chunk)
                self.size += len(chunk)
                tail = chunk[-_WINDOW:]
                self.window = tail if len(tail) == _WINDOW else (self.window + tail)[-_WINDOW:]
                self.parser.feed(chunk)
            self.ident = Identity(ident.dev, ident.ino, self.size, ident.mtime_ns)
            self._index()
        finally:
            if was_enabled:
                gc.enable()
        for k in VOLATILE:
            self.memo.pop(k, None)
        self._warn()

    def _index(self) -> None:
        tail = self.parser.tail
        if self.consumed == 0 or self._tail_indexed or tail is not None:
            # A provisional tail may still change: rebuild rather than undo. Rare and short-lived.
            self.index = Index(self.entries)
            self.memo.clear()
        else:
            try:
                for e in self.parser.entries[self.consumed :]:
                    self.index.add(e)
            except NeedsRebuild:
                self.index = Index(self.entries)
                self.memo.clear()
        self._tail_indexed = tail is not None
        self.consumed = len(self.parser.entries)

    def _warn(self) -> None:
        for p in self.problems():
            if p.kind == "torn-tail":
                continue  # usually a writer caught mid-line; session.json still lists it
            key = (p.line, p.kind)
            if key not in self.reported:
                self.reported.add(key)
                log.warning("%s:%d: %s: %s", self.path, p.line, p.kind, p.detail)


class SessionFile:
    """One ``*.jsonl`` file under the root, parsed on demand."""

    def __init__(self, store: Store, path: str) -> None:
        self.store = store
        self.path = path
        self.loaded: Loaded | None = None
        self.epoch = 0
        self._fingerprint: tuple[Identity, int] | None = None  # kept across eviction
        self._lock = threading.Lock()

    def stat(self) -> os.stat_result:
        try:
            return os.stat(self.path)
        except OSError as err:
            raise Unreadable(self.path, err) from None

    def needs_load(self) -> bool:
        """Whether :meth:`load` would parse a big file whole, or wait for a thread that does
        (slow: run it off the event loop). Growth is read inline (it costs only new bytes),
        and so is a small file: a thread hop costs more than parsing a few hundred KiB."""
        if self._lock.locked():
            return True
        cur = self.loaded
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # load() reports it
        if st.st_size < INLINE_BYTES:
            return False
        if cur is None or cur.ident is None:
            return True
        ident = Identity.of(st)
        try:
            return ident != cur.ident and not self._grew(cur, ident)
        except OSError:
            return False  # load() reports it

    def load(self, whole_only: bool = False) -> Loaded:
        """The session brought up to date with the file; parses only what is new.

        ``whole_only``: for a worker thread. Appends change the state others are reading, so
        they are left to the event loop's thread (the next plain ``load``); a whole read
        builds a new state and swaps it in.
        """
        with self._lock:
            st = self.stat()
            ident = Identity.of(st)
            cur = self.loaded
            if cur is not None and cur.ident == ident:
                self.store.touch(self, evict=not whole_only)
                return cur
            if cur is not None and self._grew(cur, ident):
                if not whole_only:
                    self._append(cur, ident)
            else:
                cur = self._reload(ident)
            # A worker thread never evicts: other sessions' states belong to the loop thread.
            self.store.touch(self, evict=not whole_only)
            return cur

    def _grew(self, cur: Loaded, ident: Identity) -> bool:
        """Whether the file only grew since ``cur`` read it (same inode, same last bytes)."""
        old = cur.ident
        if old is None or (old.dev, old.ino) != (ident.dev, ident.ino) or ident.size < old.size:
            return False
        w = len(cur.window)
        return os.pread(cur.fd, w, cur.size - w) == cur.window

    def _append(self, cur: Loaded, ident: Identity) -> None:
        try:
            cur.absorb(cur.size, ident)
        except OSError as err:
            raise Unreadable(self.path, err) from None

    def _reload(self, ident: Identity) -> Loaded:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            raise Unreadable(self.path, err) from None
        st = os.fstat(fd)  # the identity of exactly what is read
        # Bytes that merely grew since an eviction keep the epoch (and so the kernel's inodes);
        # anything else read whole again is a new version of the file.
        if not self._continues_evicted(st, fd) and (
            self.loaded is not None or self._fingerprint is not None
        ):
            self.epoch += 1
        fresh = Loaded(self.path, self.epoch, fd)
        try:
            fresh.absorb(0, Identity.of(st))
        except OSError as err:
            raise Unreadable(self.path, err) from None
        self.loaded = fresh
        self._fingerprint = None
        return fresh

    def _continues_evicted(self, st: os.stat_result, fd: int) -> bool:
        if self._fingerprint is None:
            return False
        old, crc = self._fingerprint
        start = max(0, old.size - _WINDOW)
        return (
            (old.dev, old.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= old.size
            and zlib.crc32(os.pread(fd, old.size - start, start)) == crc
        )

    def forget(self) -> None:
        """The file is gone: drop its parsed state (open readers keep their snapshots). A file
        that appears again at this path is another version: a new epoch."""
        if self.loaded is not None:
            self.epoch += 1
        self.loaded = None
        self._fingerprint = None

    def evict(self) -> None:
        cur = self.loaded
        if cur is None or cur.ident is None:
            return
        self._fingerprint = (cur.ident, zlib.crc32(cur.window))
        self.loaded = None


@dataclass(frozen=True, slots=True)
class Listing:
    """A folder of the root: its shown name and real path; ``is_session`` for flat files."""

    name: str
    path: str
    is_session: bool


def project_name(raw: str) -> str:
    """``--home-ana-src-app--`` -> ``home-ana-src-app``."""
    if len(raw) > 4 and raw.startswith("--") and raw.endswith("--"):
        return raw[2:-2]
    return raw


class Store:
    """The sessions root: discovery, the parsed-session cache and its byte cap."""

    def __init__(self, root: str, cache_bytes: int = 1 << 30) -> None:
        self.root = os.path.realpath(root)
        self.cache_bytes = cache_bytes
        self._files: dict[str, SessionFile] = {}
        self._lru: OrderedDict[str, int] = OrderedDict()  # path -> bytes held, oldest first
        self._total = 0
        self._listings: dict[str, tuple[int, list[Listing], dict[str, Listing]]] = {}
        self._lru_lock = threading.Lock()

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.root or real.startswith(self.root + os.sep)

    def _scan(self, folder: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as it:
                return sorted((d for d in it if not d.name.startswith(".")), key=lambda d: d.name)
        except OSError as err:
            log.warning("cannot list %s: %s", folder, err.strerror)
            return []

    def _is(self, d: os.DirEntry[str], kind: int) -> bool:
        try:
            if d.is_symlink() and not self._inside(d.path):
                return False
            return stat.S_IFMT(os.stat(d.path).st_mode) == kind
        except OSError:
            return False

    def _cached(self, folder: str, build: Callable[[], list[Listing]]) -> list[Listing]:
        """A folder's listing, scanned again only when the folder's mtime moved (a file or
        folder came or went), so a lookup in a folder of 10,000 sessions costs one stat."""
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            return []
        hit = self._listings.get(folder)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        listing = build()
        table = {item.name: item for item in listing}
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
        entries = self._scan(self.root)
        sessions = [d for d in entries if d.name.endswith(".jsonl") and self._is(d, stat.S_IFREG)]
        dirs = [d for d in entries if self._is(d, stat.S_IFDIR)]
        stems = [d.name[: -len(".jsonl")] for d in sessions]
        stripped = [project_name(d.name) for d in dirs]
        taken = set(stems) | {d.name for d in dirs}
        out = [Listing(s, d.path, True) for s, d in zip(stems, sessions, strict=True) if s]
        for d, name in zip(dirs, stripped, strict=True):
            clash = name != d.name and (name in taken or stripped.count(name) > 1)
            out.append(Listing(d.name if clash else name, d.path, False))
        return out

    def sessions_in(self, folder: str) -> list[Listing]:
        return self._cached(folder, lambda: self._sessions_in(folder))

    def _sessions_in(self, folder: str) -> list[Listing]:
        return [
            Listing(d.name[: -len(".jsonl")], d.path, True)
            for d in self._scan(folder)
            if d.name.endswith(".jsonl") and len(d.name) > 6 and self._is(d, stat.S_IFREG)
        ]

    def loaded_paths(self) -> list[str]:
        return [p for p, sf in self._files.items() if sf.loaded is not None]

    def known(self, path: str) -> SessionFile | None:
        return self._files.get(path)

    def forget(self, path: str) -> None:
        sf = self._files.get(path)
        if sf is not None:
            sf.forget()
            with self._lru_lock:
                self._total -= self._lru.pop(path, 0)

    def session(self, path: str) -> SessionFile:
        sf = self._files.get(path)
        if sf is None:
            sf = self._files[path] = SessionFile(self, path)
        return sf

    def touch(self, sf: SessionFile, evict: bool = True) -> None:
        """Mark ``sf`` recently used and (``evict``) drop others past the byte cap."""
        with self._lru_lock:
            size = sf.loaded.nbytes() if sf.loaded is not None else 0
            old = self._lru.get(sf.path, 0)
            self._lru[sf.path] = size
            self._lru.move_to_end(sf.path)  # O(1): this runs on every request
            self._total += size - old
            while evict and self._total > self.cache_bytes and len(self._lru) > 1:
                path = next(iter(self._lru))
                if path == sf.path:
                    break
                self._total -= self._lru.pop(path)
                self._files[path].evict()
