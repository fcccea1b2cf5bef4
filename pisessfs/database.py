"""The store's database: its schema, its connections (a file's, mapped; one in memory,
shared), the writer's thread and the read-ahead's, and the statements that write and remove
a text in chunks. ``store.DiskStore`` is what uses it; nothing else does.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import sqlite3
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

DB_NAME = "pisessfs.sqlite"
SCHEMA_VERSION = 5  # (4: an early search index, never released)
#: Bytes of a database page: a text's chunk is a few pages, read with a few system calls
#: (SQLite's default of 4 KiB read a cold walk's texts 4 KiB at a time).
PAGE_SIZE = 1 << 16
#: Bytes of a text per row of ``chunks``: a read at any offset reads its chunk's pages only
#: (one blob of a whole text is a chain of pages that SQLite walks from its start at every
#: read: a big conversation.md read by 128 KiB took time in its square).
CHUNK = 256 << 10
MMAP_BYTES = 0x7FFF0000  # of the database mapped at most (SQLite's own limit)
#: Chunks a text may have at most (``chunks.id`` is ``text * CHUNKS + n``): 256 GiB.
CHUNKS = 1 << 20
SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    path BLOB PRIMARY KEY,   -- the session file's path (UTF-8, surrogates passed)
    scope BLOB NOT NULL,     -- the sessions root it is of (a folder may serve several)
    mark TEXT NOT NULL,      -- the code and options that made it
    ident TEXT NOT NULL,     -- the file's identity it was made from (JSON)
    files TEXT NOT NULL,     -- kind -> [texts.id, size] (JSON); ANSWERS: what the mount
                             -- answered of it (JSON, the view's own types)
    bytes INTEGER NOT NULL,  -- what the entry takes (counted against the cap)
    saved_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS texts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- (never reused: a reader names the text it read)
    path BLOB NOT NULL,
    size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS texts_path ON texts(path);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,  -- texts.id * CHUNKS + n: the n-th CHUNK bytes of the text
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS usage_files (  -- what each session file's usage was counted from
    path BLOB PRIMARY KEY,
    scope BLOB NOT NULL,
    mark TEXT NOT NULL,
    seen TEXT NOT NULL,      -- [dev, ino, size, mtime_ns, offset counted to, project,
                             --  checksum of the 4 KiB before the offset] (JSON)
    n INTEGER NOT NULL       -- (its rows in usage)
);
CREATE TABLE IF NOT EXISTS usage (  -- what it gave: sums by UTC day and model (usage.py)
    path BLOB NOT NULL,
    day TEXT NOT NULL,
    model TEXT NOT NULL,
    messages INTEGER NOT NULL,
    input INTEGER NOT NULL,
    output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    cost REAL NOT NULL,
    PRIMARY KEY (path, day, model)
);
CREATE TABLE IF NOT EXISTS search_files (  -- what each session file's index was made from
    id INTEGER PRIMARY KEY,
    path BLOB NOT NULL UNIQUE,
    scope BLOB NOT NULL,
    folder BLOB NOT NULL,    -- its project folder (a project's search/ looks there only)
    mark TEXT NOT NULL,
    seen TEXT NOT NULL       -- [[dev, ino, size, mtime_ns], entries indexed, last] (JSON)
);
CREATE TABLE IF NOT EXISTS search_docs (  -- one conversation entry each (search.py)
    doc INTEGER PRIMARY KEY AUTOINCREMENT,  -- (never reused: the index keeps a removed one's words)
    file INTEGER NOT NULL,   -- search_files.id
    eid BLOB NOT NULL,       -- its entry's id (UTF-8, surrogates passed: any JSON string)
    name BLOB NOT NULL,      -- its message file's name, MMMM-kind.md
    ts_ms INTEGER,
    start INTEGER NOT NULL,  -- its line in the file
    end INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS search_docs_file ON search_docs(file);
CREATE TABLE IF NOT EXISTS search_dead (  -- docs removed, whose words the index still holds
    doc INTEGER PRIMARY KEY
);
CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING fts5(
    text, content='', tokenize='unicode61 remove_diacritics 2'
);
-- segments merged 16 at a time, not 4: a first build wrote a quarter faster, and queries
-- of common words answered as fast (docs/performance.md)
INSERT INTO search_text(search_text, rank) VALUES ('automerge', 16);
CREATE TABLE IF NOT EXISTS heads (
    scope BLOB NOT NULL,
    path BLOB NOT NULL,
    mark TEXT NOT NULL,
    row BLOB NOT NULL,       -- [identity, name, session id, cwd, hidden] (JSON)
    PRIMARY KEY (scope, path)
);
"""
#: Bytes of a listing's entries read ahead at most (a walk reads them next), and of each.
PREFETCH = 1 << 20
PREFETCH_LISTING = 64 << 20
BUSY_MS = 20_000  # another writer (a render worker, another mount) holds the store: wait this long

#: One part of a file offered: its offset, its bytes (or what makes them, in the writer's
#: thread: a big session's groups of conversation.md that no one holds), and whether they
#: are zlib-compressed.
Part = tuple[int, bytes | Callable[[], bytes], bool]


class Job(Protocol):
    """A job of the writer's thread (what a failure of it names: ``what``)."""

    @property
    def what(self) -> str: ...


def key(path: str) -> bytes:
    """A path as the database keys it (any ``str``: surrogates pass)."""
    return path.encode("utf-8", "surrogatepass")


def path_of(key: bytes) -> str:
    return bytes(key).decode("utf-8", "surrogatepass")


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    # (a path, not a URI: a folder name may hold "?" or "#")
    db = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_MS / 1000
    )
    db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    # Pages read through a mapping, not copied in 64 KiB reads one by one: a later mount's
    # cold walk took 13% (grep -r) to 20% (rg) longer without. Nothing truncates the file
    # while it is mapped (no VACUUM or auto_vacuum; a damaged one is unlinked, not cut),
    # which would be a SIGBUS.
    db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
    if readonly:
        db.execute("PRAGMA query_only=ON")
    return db


class Shared(sqlite3.Connection):
    """The one connection of a database in memory (no other connection sees it), shared by
    the writer's thread and the readers: a statement at a time (``lock``, the readers').
    A reader's statement may come between two of a save: it sees that save's rows before
    they are committed, which is harmless, as a reader only reads entries :class:`DiskStore`
    counts (``_sizes``: set as the save commits) and text ids are never used again."""

    lock: threading.RLock

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        with self.lock:
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        with self.lock:
            return super().executemany(sql, parameters)


J = TypeVar("J", bound=Job)


class Writer(Generic[J]):
    """The thread that writes the database, with its own connection: jobs one at a time,
    in the order they were put."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        run: Callable[[sqlite3.Connection, J], None],
        own: bool = True,
    ) -> None:
        """``connect()``: the writer's connection (``own``: its own, closed at its end;
        else the readers', of a database in memory)."""
        self.connect, self.run, self.own = connect, run, own
        self._todo: queue.Queue[J | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, item: J) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_all, name="disk", daemon=True)
                self._thread.start()
        self._todo.put(item)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until every job put is done; False when that took more than ``timeout``."""
        if timeout is None:
            self._todo.join()
            return True
        end = time.monotonic() + timeout
        while self._todo.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.01)
        return not self._todo.unfinished_tasks

    def stop(self, timeout: float | None = None) -> bool:
        """Do the jobs put, then end; False when it was not done after ``timeout``."""
        if self._thread is None:
            return True
        self._todo.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        self._thread = None
        return True

    def _write_all(self) -> None:
        db = self.connect()
        try:
            while self._one(db, self._todo.get()):
                pass
        finally:
            if self.own:
                with contextlib.suppress(sqlite3.Error):  # (the next mount reads one file)
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                db.close()

    def _one(self, db: sqlite3.Connection, item: J | None) -> bool:
        """Do one job; False at the end. (A function of its own: a job left in the loop's
        variable while it waited for the next held what it wrote, a whole session's files,
        until the next came: a render worker kept 80 MiB more after a session of 105 MB.)"""
        try:
            if item is None:
                return False
            self.run(db, item)
        except Exception as err:  # a full disk, a bug: this one is not written
            log.warning("disk cache: %s not saved: %s", item.what if item else "", err)
        finally:
            self._todo.task_done()
        return True


class Ahead:
    """The first :data:`PREFETCH` bytes of the texts of listed sessions read ahead, in a
    thread of its own with its own connection (it may still run at unmount), so that a cold
    walk does not wait for the disk at each session."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._todo: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, paths: list[str]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="disk-ahead", daemon=True)
                self._thread.start()
        self._todo.put(paths)

    def _run(self) -> None:
        db = connect(self.path, readonly=True)
        while True:
            paths = self._todo.get()
            with contextlib.suppress(Exception):  # (a hint: nothing depends on it)
                self._read(db, paths)

    @staticmethod
    def _read(db: sqlite3.Connection, paths: list[str]) -> None:
        budget = PREFETCH_LISTING
        for path in paths:
            for (text,) in db.execute(
                "SELECT id FROM texts WHERE path = ?", (key(path),)
            ).fetchall():
                first = text * CHUNKS
                last = first + (PREFETCH - 1) // CHUNK
                # (the bytes themselves, every page of each chunk, read by SQLite without
                # the GIL: length() alone reads no page of a blob, and substr() of its first
                # byte only its first page)
                (got,) = db.execute(
                    "SELECT sum(length(data || x'')) FROM chunks WHERE id BETWEEN ? AND ?",
                    (first, last),
                ).fetchone()
                budget -= got or 0
                if budget < 0:
                    return


def opened(path: str) -> sqlite3.Connection:
    """The database, made (mode 600, not through a link) when missing; one that is not
    a database of this code's schema is made anew."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a file of yours")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)  # (its -wal and -shm take its mode)
    finally:
        os.close(fd)
    try:
        return _schema(path)
    except sqlite3.DatabaseError as err:  # damaged, or another schema: start again
        log.warning("disk cache: %s is unreadable (%s): made anew", path, err)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
        return _schema(path)


def _schema(path: str) -> sqlite3.Connection:
    db = connect(path)
    try:
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # (a new database's: before WAL)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # (a cache: a lost last save is no loss)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"schema {version}, not {SCHEMA_VERSION}")
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("SELECT count(*) FROM entries").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def in_memory(lock: threading.RLock) -> sqlite3.Connection:
    """A database in memory, its one connection shared under ``lock`` (``Shared``)."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False, factory=Shared)
    db.lock = lock
    db.executescript(SCHEMA)
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction; within one already open, that one (its owner commits it)."""
    if db.in_transaction:
        yield
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def write_chunks(
    db: sqlite3.Connection, text: int, parts: list[Part], size: int, pack: bool = False
) -> int:
    """Text ``text``'s bytes, from its parts in order (each made or unpacked as it comes:
    no more than a part and a chunk in memory), as rows of ``chunks`` (``pack``: each
    compressed, in a store in memory: rendered text takes a third); the bytes stored."""
    chunk = bytearray()
    n = stored = 0

    def put(last: bool = False) -> None:
        nonlocal n, stored
        while len(chunk) >= CHUNK or (last and chunk):
            data = bytes(chunk[:CHUNK])
            data = zlib.compress(data, 1) if pack else data
            db.execute("INSERT INTO chunks VALUES (?, ?)", (text * CHUNKS + n, data))
            stored += len(data)
            del chunk[:CHUNK]
            n += 1

    at = 0
    for off, part, packed in sorted(parts, key=lambda p: p[0]):
        data = part() if callable(part) else part
        data = zlib.decompress(data) if packed else data
        if off != at:
            raise ValueError(f"the parts leave a hole at byte {at}")
        chunk += data
        at += len(data)
        put()
    if at != size:
        raise ValueError(f"{at} bytes, not {size}")
    put(last=True)
    return stored


def delete(db: sqlite3.Connection, paths: list[str]) -> None:
    keys = [(key(p),) for p in paths]
    for one in keys:
        for (text,) in db.execute("SELECT id FROM texts WHERE path = ?", one).fetchall():
            first = text * CHUNKS
            db.execute("DELETE FROM chunks WHERE id BETWEEN ? AND ?", (first, first + CHUNKS - 1))
    db.executemany("DELETE FROM texts WHERE path = ?", keys)
    db.executemany("DELETE FROM entries WHERE path = ?", keys)
