"""The store: what a mount keeps across mounts, in one SQLite database in the cache folder
(DESIGN "The cache folder"), so that the first walk after a mount (after every reboot) is not
a parse and a render of a year of sessions.

A fresh mount knows nothing: its first ``grep -r`` over a year of sessions parsed and rendered
every one of them (Python renders 11 to 13 MiB of JSONL a second). A session file only grows,
and what a mount shows of a file is a function of its bytes. So what a mount told the kernel
of a session (the answers ``kept`` gathers: its folders' listings, attributes and link
targets) and the bytes of its ``conversation.md``, ``tree.txt`` and ``session.json`` are
written here when the mount is done with it (when the parse cache drops it, and at a clean
unmount), tied to the identity of the file they were made from (device, inode, size, mtime,
ctime, owner and mode) and to the code that made them. The next mount answers a walk of an
unchanged session from them without parsing it. Anything that does not match (the file grew,
was replaced, was chmodded; another version of pisessfs) is not used and is removed. Each
session's folder name (what the head of its file said) is kept too, so that naming a year of
sessions does not open each one again.

Tables (``SCHEMA``): ``entries`` (one row per session file: its identity, the code's mark,
where its texts are), ``texts`` and ``chunks`` (a file's bytes, or the answers as JSON, in
chunks read in place through SQLite's incremental blob I/O, never whole), ``heads`` (the
session names of a root).

Nothing leaks through it: the folder is the daemon user's own (``0700``, the database
``0600``; a folder that is anyone else's or open to others is not used), a session that is
trashed or deleted loses its entry, and a mount removes the entries of sessions that are gone.
What a mount serves from an entry is bounded, as ever, by the session file's mode now (the
identity includes it).

It is a plain store (FUSE-free): the view decides what to save and when an entry may answer.
Writing runs in a thread of its own, never on the caller's; readers share one connection.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import queue
import sqlite3
import stat
import sys
import threading
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

log = logging.getLogger(__name__)

DB_NAME = "pisessfs.sqlite"
SCHEMA_VERSION = 2
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
#: Uncompressed bytes waiting for the writer at most (more offered meanwhile: not saved).
QUEUE_BYTES = 64 << 20
#: The text of an entry that holds its answers (apart from the rows: a mount reads every
#: row at its start, and a year of sessions' answers is tens of MB).
ANSWERS = "answers"
BUSY_MS = 5000  # another mount sharing the folder writes: wait for it this long
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW

#: One part of a file offered: its offset, its bytes (or what makes them, in the writer's
#: thread: a big session's groups of conversation.md that no one holds), and whether they
#: are zlib-compressed.
Part = tuple[int, bytes | Callable[[], bytes], bool]
#: A file offered: its parts and its size.
File = tuple[list[Part], int]
#: Where a file kept is: its text's id and its size.
Where = tuple[int, int]


def text_out(s: str) -> str:
    """Any ``str`` (lone surrogates too: ids from JSON, names from the file system) as one
    JSON can hold; :func:`text_in` gives it back exactly."""
    return s.encode("utf-8", "surrogatepass").decode("latin-1")


def text_in(s: object) -> str:
    if type(s) is not str:
        raise ValueError("not a string")
    return s if s.isascii() else s.encode("latin-1").decode("utf-8", "surrogatepass")


def _key(path: str) -> bytes:
    """A path as the database keys it (any ``str``: surrogates pass)."""
    return path.encode("utf-8", "surrogatepass")


def _path(key: bytes) -> str:
    return bytes(key).decode("utf-8", "surrogatepass")


def default_folder() -> str:
    """``$XDG_CACHE_HOME/pisessfs``, else ``~/.cache/pisessfs``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pisessfs")


def code_mark() -> str:
    """What made an entry: this package's source and the Python that runs it (its Unicode
    tables make slugs and names): any change to them may change what a file shows, so an
    entry made by other code is never used."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{sys.version}\0{unicodedata.unidata_version}\0".encode())
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _folder(folder: str) -> str:
    """Why the cache folder may not be used ("" when it may; made when missing, mode 700):
    it must be the daemon user's alone, as what it keeps shows what the sessions say."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as err:
        return f"{folder}: {err.strerror}"
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        return f"{folder} must be yours alone, it is uid {st.st_uid} mode {mode:o} (chmod 700 it)"
    return ""


def unusable(folder: str) -> str | None:
    """Why the cache folder cannot be used (the command line says so before mounting), or
    None when it can."""
    return _folder(folder) or None


@dataclass(frozen=True, slots=True)
class Stored:
    """An entry read back: the answers as the view wrote them (JSON), and where each file's
    bytes are (kind -> text id, size: an entry saved again has other texts)."""

    answers: msgspec.Raw
    files: dict[str, Where]


@dataclass(frozen=True, slots=True)
class _Save:
    """An entry to write, and whom to tell where it is."""

    path: str
    asked: int  # the entry's request number (a later save or drop makes it void)
    row: tuple[bytes, str, str]  # scope, mark, ident
    files: dict[str, File]
    raw: int  # what it holds, as counted against QUEUE_BYTES
    saved: Callable[[Stored], None] | None


@dataclass(frozen=True, slots=True)
class _Do:
    """Other work of the writer: ``run(db)`` in a transaction."""

    run: Callable[[sqlite3.Connection], object]
    what: str


class Gone(OSError):
    """A text read was removed meanwhile (its session saved again, dropped or trimmed)."""

    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "its disk cache entry changed")


def _connect(path: str, readonly: bool = False) -> sqlite3.Connection:
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


class _Names:
    """The session names of a root kept in the database (``heads``), for the next mount:
    what the head of each session file said, for the file as it was."""

    def __init__(self, scope: str, mark: str, put: Callable[[_Do], None]) -> None:
        self.scope, self.mark, self._put = scope, mark, put
        self._lock = threading.Lock()
        # path -> [identity, name, session id, cwd, hidden]
        self.heads: dict[str, list[Any]] = {}
        self.bytes = 0  # what the table takes (counted against the cap)

    def load(self, db: sqlite3.Connection) -> None:
        """This root's names as the last mount kept them (another code's are not used)."""
        rows = db.execute(
            "SELECT path, row FROM heads WHERE scope = ? AND mark = ?",
            (_key(self.scope), self.mark),
        ).fetchall()
        self.bytes = db.execute("SELECT coalesce(sum(length(row)), 0) FROM heads").fetchone()[0]
        bad = 0
        for path, row in rows:
            try:
                got = orjson.loads(row)
            except orjson.JSONDecodeError:
                got = None
            if isinstance(got, list):
                self.heads[_path(path)] = got
            else:
                bad += 1
        if bad:
            log.warning("disk cache: %d kept session names are unreadable: not used", bad)

    def keep_heads(self, heads: dict[str, list[Any]]) -> None:
        """Keep ``heads`` as the root's session names (at unmount: before the writer ends)."""
        with self._lock:
            self.heads = dict(heads)
        rows = []
        for path, row in heads.items():
            with contextlib.suppress(TypeError):  # (a number past 64 bits: not kept)
                rows.append((_key(self.scope), _key(path), self.mark, orjson.dumps(row)))
        scope = _key(self.scope)

        def write(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM heads WHERE scope = ?", (scope,))
            db.executemany("INSERT INTO heads VALUES (?, ?, ?, ?)", rows)
            self.bytes = db.execute("SELECT coalesce(sum(length(row)), 0) FROM heads").fetchone()[0]

        self._put(_Do(write, "the session names"))

    def forget_head(self, path: str) -> None:
        """Session ``path`` is gone, or its bits changed: its name (a slug of its first
        message) is not kept."""
        with self._lock:
            if self.heads.pop(path, None) is None:
                return
        self._forget_heads([path])

    def _forget_heads(self, paths: list[str]) -> None:
        keys = [(_key(self.scope), _key(p)) for p in paths]
        self._put(
            _Do(
                lambda db: db.executemany("DELETE FROM heads WHERE scope = ? AND path = ?", keys),
                "forget names",
            )
        )

    def prune_heads(self, gone: Callable[[str], bool]) -> int:
        """Forget the kept names of the sessions ``gone(path)`` says are no more (blocking:
        the prune thread at mount start); how many."""
        with self._lock:
            paths = list(self.heads)
        lost = [path for path in paths if gone(path)]
        with self._lock:
            for path in lost:
                self.heads.pop(path, None)
        if lost:
            self._forget_heads(lost)  # (one transaction for them all)
        return len(lost)


class _Writer:
    """The thread that writes the database, with its own connection: jobs one at a time,
    in the order they were put."""

    def __init__(self, path: str, run: Callable[[sqlite3.Connection, _Save | _Do], None]) -> None:
        self.path, self.run = path, run
        self._todo: queue.Queue[_Save | _Do | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, item: _Save | _Do) -> None:
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
        db = _connect(self.path)
        try:
            while True:
                item = self._todo.get()
                try:
                    if item is None:
                        return
                    self.run(db, item)
                except Exception as err:  # a full disk, a bug: this one is not written
                    what = item.path if isinstance(item, _Save) else item.what if item else ""
                    log.warning("disk cache: %s not saved: %s", what, err)
                finally:
                    self._todo.task_done()
        finally:
            with contextlib.suppress(sqlite3.Error):  # (the next mount reads one file)
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()


class _Ahead:
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
        db = _connect(self.path, readonly=True)
        while True:
            paths = self._todo.get()
            with contextlib.suppress(Exception):  # (a hint: nothing depends on it)
                self._read(db, paths)

    @staticmethod
    def _read(db: sqlite3.Connection, paths: list[str]) -> None:
        budget = PREFETCH_LISTING
        for path in paths:
            for (text,) in db.execute(
                "SELECT id FROM texts WHERE path = ?", (_key(path),)
            ).fetchall():
                first = text * CHUNKS
                last = first + (PREFETCH - 1) // CHUNK
                # (the bytes themselves, read by SQLite without the GIL: length() alone
                # reads no page of a blob)
                (got,) = db.execute(
                    "SELECT sum(length(substr(data, 1, 1)) * length(data)) FROM chunks"
                    " WHERE id BETWEEN ? AND ?",
                    (first, last),
                ).fetchone()
                budget -= got or 0
                if budget < 0:
                    return


class DiskStore:
    """Entries by session file path, in one database; at most ``cap`` bytes, oldest out."""

    def __init__(self, folder: str, cap: int, mark: str, scope: str) -> None:
        """``mark``: what made the entries (:func:`code_mark` and the mount's options that
        change what it shows); ``scope``: the sessions root (its entries only are pruned)."""
        self.folder, self.cap, self.mark, self.scope = folder, cap, mark, scope
        self.path = os.path.join(folder, DB_NAME)
        self._db: sqlite3.Connection | None = None  # the readers' connection
        self._read = threading.Lock()  # (one statement at a time on it)
        self._sizes: dict[str, int] = {}  # path -> its entry's bytes (the entries there are)
        self._lock = threading.Lock()
        self._writer = _Writer(self.path, self._do)
        # Saves and drops per path: a queued save is made only if it is still the last
        # thing asked of its entry (a session trashed after it was saved stays gone).
        self._asked: dict[str, int] = {}
        self._waiting = 0  # bytes of saves queued (``QUEUE_BYTES``)
        self.saved = 0  # entries written by this mount (status, tests)
        self.names = _Names(scope, mark, self._queue)  # the sessions' folder names
        self._ahead = _Ahead(self.path)
        self.used = 0  # entries that answered for a session

    # -- the database -----------------------------------------------------------------------

    def open(self) -> bool:
        """Make (or check) the folder and the database and learn its entries. False (and a
        warning) when it cannot be used: then nothing is read or written."""
        why = _folder(self.folder)
        if not why:
            try:
                self._db = self._opened()
            except (OSError, sqlite3.Error) as err:
                why = f"{self.path}: {err}"
        if why:
            log.warning("no disk cache: %s", why)
            return False
        self._load()
        self._trim_now()
        return True

    def _opened(self) -> sqlite3.Connection:
        """The database, made (mode 600, not through a link) when missing; one that is not
        a database of this code's schema is made anew."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise OSError(errno.EPERM, "not a file of yours")
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o600)  # (its -wal and -shm take its mode)
        finally:
            os.close(fd)
        try:
            return self._schema()
        except sqlite3.DatabaseError as err:  # damaged, or another schema: start again
            log.warning("disk cache: %s is unreadable (%s): made anew", self.path, err)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path + suffix)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            os.close(fd)
            return self._schema()

    def _schema(self) -> sqlite3.Connection:
        db = _connect(self.path)
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

    def _load(self) -> None:
        """The entries there are and this root's kept session names (another code's are
        not used)."""
        with self._reading() as db:
            sizes = db.execute("SELECT path, bytes FROM entries").fetchall()
            self.names.load(db)
        self._sizes = {_path(p): n for p, n in sizes}

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        if self._db is None:
            raise OSError(errno.EBADF, "the disk cache is closed")
        with self._read:
            yield self._db

    def __len__(self) -> int:
        return len(self._sizes)

    def total_bytes(self) -> int:
        """What the entries and the kept session names take."""
        with self._lock:
            return sum(self._sizes.values()) + self.names.bytes

    @property
    def on(self) -> bool:
        return self._db is not None

    def close(self, timeout: float | None = None) -> bool:
        """Write what is waiting, then stop (at unmount); False when the writer was not
        done after ``timeout`` seconds (it is left to the process's exit: what it had not
        committed is not there)."""
        if not self._writer.stop(timeout):
            return False  # (the database stays open: the writer still uses it)
        if self._db is not None:
            with self._read:
                self._db.close()
                self._db = None
        return True

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until everything offered is written or given up (tests, unmount); False
        when that took more than ``timeout`` seconds."""
        return self._writer.settle(timeout)

    # -- entries ----------------------------------------------------------------------------

    def has(self, path: str) -> bool:
        """Whether there is an entry for ``path`` (a dict lookup: no I/O)."""
        return path in self._sizes

    def load(self, path: str, ident: list[int]) -> Stored | None:
        """The entry of ``path`` if it was made from the file ``ident`` describes, by this
        code, for a mount like this one. An entry that is not is removed."""
        found = self._found(path, ident, answers=True)
        if found is not None:
            self.used += 1
        return found

    def holds(self, path: str, ident: list[int]) -> bool:
        """Whether there is an entry of ``path`` made from the file ``ident`` describes, by
        this code (``--warm`` renders only the sessions that have none). An entry that is
        not is removed."""
        return self._found(path, ident, answers=False) is not None

    def _found(self, path: str, ident: list[int], answers: bool) -> Stored | None:
        if path not in self._sizes:
            return None
        try:
            with self._reading() as db:
                row = db.execute(
                    "SELECT mark, ident, files FROM entries WHERE path = ?", (_key(path),)
                ).fetchone()
        except (OSError, sqlite3.Error) as err:
            log.warning("disk cache: %s is unreadable (%s)", path, err)
            return None
        if row is None:
            self._forget(path)  # (removed by another mount sharing the folder)
            return None
        mark, was, files = row
        if mark != self.mark or was != orjson.dumps(ident).decode():
            self.drop(path)  # the file moved on, or other code made it: never used again
            return None
        try:
            where = {k: (int(i), int(n)) for k, (i, n) in orjson.loads(files).items()}
            raw = self.copy(Stored(msgspec.Raw(b""), where), ANSWERS) if answers else b""
        except (OSError, ValueError, TypeError, AttributeError) as err:
            log.warning("disk cache: the entry of %s is unreadable (%s): removed", path, err)
            self.drop(path)
            return None
        where.pop(ANSWERS, None)
        return Stored(msgspec.Raw(raw), where)

    def read(self, text: int, off: int, size: int) -> bytes:
        """``size`` bytes of text ``text`` from ``off`` (fewer at its end); :class:`Gone`
        when it is no more."""
        out = []
        try:
            with self._reading() as db:
                while size > 0:
                    n, at = divmod(off, CHUNK)
                    with db.blobopen("chunks", "data", text * CHUNKS + n, readonly=True) as b:
                        b.seek(min(at, len(b)))
                        got = b.read(min(size, CHUNK - at))
                    if not got:
                        break
                    out.append(got)
                    off, size = off + len(got), size - len(got)
        except sqlite3.Error as err:
            raise Gone() from err
        return b"".join(out)

    def reader(self, stored: Stored, kind: str, size: int) -> int | None:
        """The text of file ``kind`` of an entry, when it holds ``size`` bytes of it."""
        where = stored.files.get(kind)
        if where is None or where[1] != size or not self.on:
            return None
        return where[0]

    def copy(self, stored: Stored, kind: str, size: int | None = None) -> bytes:
        """File ``kind`` of an entry whole, when it holds ``size`` bytes of it (any, when
        None) (the writer's: an entry saved again keeps what the mount that saves it did not
        make again)."""
        size = stored.files.get(kind, (0, -1))[1] if size is None else size
        text = self.reader(stored, kind, size)
        data = b"" if text is None else self.read(text, 0, size)
        if len(data) != size:
            raise OSError(f"the disk cache's {kind} is not there whole")
        return data

    def drop(self, path: str) -> None:
        """Session ``path`` changed or went: its entry never answers again (nor does one
        queued for writing); it is removed in the writer's thread."""
        if not self.on:
            return
        if self._void([path]):
            self._queue(_Do(lambda db: _delete(db, [path]), f"drop {path}"))

    def _void(self, paths: list[str]) -> list[str]:
        """Entries of ``paths`` never answer again, nor do saves of them still queued;
        those there were."""
        with self._lock:
            for path in paths:
                self._asked[path] = self._asked.get(path, 0) + 1
            return [path for path in paths if self._sizes.pop(path, None) is not None]

    def _forget(self, path: str) -> None:
        with self._lock:
            self._sizes.pop(path, None)

    def prefetch(self, paths: list[str]) -> None:
        """Read the entries of ``paths`` ahead (``_Ahead``): their folder is being listed,
        and a walk reads them next."""
        if self.on:
            self._ahead.put([p for p in paths if p in self._sizes])

    # -- writing ----------------------------------------------------------------------------

    def save(
        self,
        path: str,
        ident: list[int],
        answers: dict[str, Any],
        files: dict[str, File],
        saved: Callable[[Stored], None] | None = None,
    ) -> bool:
        """Write the entry of ``path`` (in the writer thread): the ``answers`` (JSON, made
        with :func:`text_out`) and each file's ``(parts, size)``; ``saved`` is told where
        it is, once it is there (from the writer's thread). False when there is no room for
        it now (the writer is behind) or no cache."""
        if not self.on:
            return False
        raw = sum(size for _, size in files.values())  # (what the writer holds, at most)
        try:
            row = (_key(self.scope), self.mark, orjson.dumps(ident).decode())
            said = orjson.dumps(answers)
        except TypeError as err:  # (a number past 64 bits: a hostile time)
            log.debug("disk cache: %s not saved: %s", path, err)
            return False
        with self._lock:
            if self._waiting and self._waiting + raw > QUEUE_BYTES:
                return False  # (a session bigger than that waits for an idle writer)
            self._waiting += raw
            asked = self._asked[path] = self._asked.get(path, 0) + 1
        files = {**files, ANSWERS: ([(0, said, False)], len(said))}
        self._queue(_Save(path, asked, row, files, raw, saved))
        return True

    def _queue(self, item: _Save | _Do) -> None:
        self._writer.put(item)

    def busy(self) -> bool:
        """Whether the writer has entries still to write (read without the lock)."""
        return self._waiting > 0

    def _do(self, db: sqlite3.Connection, item: _Save | _Do) -> None:
        """(The writer's thread.) One job: a save, or other work in a transaction."""
        if isinstance(item, _Do):
            with _transaction(db):
                item.run(db)
            return
        try:
            stored = self._write(db, item)
        finally:
            with self._lock:
                self._waiting -= item.raw
        if stored is not None:
            self.saved += 1
            self._trim(db)
            if item.saved is not None:
                item.saved(stored)

    def _write(self, db: sqlite3.Connection, job: _Save) -> Stored | None:
        """Write an entry, unless it was dropped or saved again since it was asked for."""
        try:
            where, total = self._written(db, job)
        except _Void:
            return None  # dropped, or saved again, since it was asked for
        log.debug("disk cache: %s saved (%d bytes)", job.path, total)
        where.pop(ANSWERS, None)
        return Stored(msgspec.Raw(b""), where)

    def _written(
        self, db: sqlite3.Connection, job: _Save
    ) -> tuple[dict[str, tuple[int, int]], int]:
        """The entry's rows written, where its texts are and what it takes; :class:`_Void`
        (nothing written) when it is no longer asked for."""
        key = _key(job.path)
        with _transaction(db):
            _delete(db, [job.path])
            where: dict[str, tuple[int, int]] = {}
            for kind, (parts, size) in job.files.items():
                cur = db.execute("INSERT INTO texts(path, size) VALUES (?, ?)", (key, size))
                text = cur.lastrowid
                assert text is not None
                _write_chunks(db, text, parts, size)
                where[kind] = (text, size)
            scope, mark, ident = job.row
            total = sum(n for _, n in where.values())
            db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, scope, mark, ident, orjson.dumps(where).decode(), total, time.time_ns()),
            )
            with self._lock:  # (a drop takes the lock too: it comes before, or after, this)
                if self._asked.get(job.path) != job.asked:
                    raise _Void()
                self._sizes[job.path] = total
        return where, total

    def _trim(self, db: sqlite3.Connection) -> None:
        """Remove the oldest entries until all fit under the cap."""
        with self._lock:
            total = sum(self._sizes.values()) + self.names.bytes
        if total <= self.cap:
            return
        aged = db.execute("SELECT path, bytes FROM entries ORDER BY saved_ns").fetchall()
        out = []
        for key, size in aged:
            if total <= self.cap:
                break
            total -= size
            out.append(_path(key))
        self._void(out)
        with _transaction(db):
            _delete(db, out)

    def _trim_now(self) -> None:
        """At open: the cap may be lower than the last mount's."""
        with self._lock:
            over = sum(self._sizes.values()) + self.names.bytes > self.cap
        if over:
            self._queue(_Do(self._trim, "trim"))

    # -- pruning ----------------------------------------------------------------------------

    def prune(self, gone: Callable[[str], bool]) -> int:
        """Remove the entries of this root's sessions for which ``gone(path)`` says the file
        is no more or that other code made (blocking: a thread at mount start); how many
        went. Other roots' entries are their mounts' (one folder may serve several)."""
        try:
            with self._reading() as db:
                rows = db.execute(
                    "SELECT path, mark FROM entries WHERE scope = ?", (_key(self.scope),)
                ).fetchall()
        except (OSError, sqlite3.Error):
            return 0
        out = [p for key, mark in rows for p in [_path(key)] if mark != self.mark or gone(p)]
        self._void(out)
        if out:
            self._queue(_Do(lambda db: _delete(db, out), "prune"))
        return len(out)


class _Void(Exception):
    """A save that was dropped meanwhile: its transaction is rolled back."""


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _write_chunks(db: sqlite3.Connection, text: int, parts: list[Part], size: int) -> None:
    """Text ``text``'s bytes, from its parts in order (each made or unpacked as it comes:
    no more than a part and a chunk in memory), as rows of ``chunks``."""
    chunk = bytearray()
    n = 0

    def put(last: bool = False) -> None:
        nonlocal n
        while len(chunk) >= CHUNK or (last and chunk):
            db.execute(
                "INSERT INTO chunks VALUES (?, ?)", (text * CHUNKS + n, bytes(chunk[:CHUNK]))
            )
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


def _delete(db: sqlite3.Connection, paths: list[str]) -> None:
    keys = [(_key(p),) for p in paths]
    for key in keys:
        for (text,) in db.execute("SELECT id FROM texts WHERE path = ?", key).fetchall():
            first = text * CHUNKS
            db.execute("DELETE FROM chunks WHERE id BETWEEN ? AND ?", (first, first + CHUNKS - 1))
    db.executemany("DELETE FROM texts WHERE path = ?", keys)
    db.executemany("DELETE FROM entries WHERE path = ?", keys)
