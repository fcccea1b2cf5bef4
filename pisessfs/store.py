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

from . import database
from .database import CHUNK, CHUNKS, DB_NAME, PREFETCH, Ahead, Part, Writer
from .database import connect as _connect
from .database import delete as _delete
from .database import key as _key
from .database import path_of as _path
from .database import transaction as _transaction
from .database import write_chunks as _write_chunks

__all__ = ["CHUNK", "CHUNKS", "DB_NAME", "PREFETCH", "DiskStore", "File", "Gone", "Part", "Stored"]

log = logging.getLogger(__name__)

#: Uncompressed bytes waiting for the writer at most (more offered meanwhile: not saved).
QUEUE_BYTES = 64 << 20
#: The text of an entry that holds its answers (apart from the rows: a mount reads every
#: row at its start, and a year of sessions' answers is tens of MB).
ANSWERS = "answers"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW

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


def mark_for(reach: int) -> str:
    """The mark of a mount's entries: the code's, and what bounds every mode it shows
    (``files.reach``): a worker process makes the same mark, or makes nothing."""
    return f"{code_mark()} reach {reach:o}"


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

    @property
    def what(self) -> str:
        return self.path


Work = Callable[[sqlite3.Connection], object]  # what the writer's thread is given to run


@dataclass(frozen=True, slots=True)
class _Do:
    """Other work of the writer: ``run(db)`` in a transaction (``done``: set after it)."""

    run: Work
    what: str
    done: threading.Event | None = None


class Gone(OSError):
    """A text read was removed meanwhile (its session saved again, dropped or trimmed)."""

    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "its disk cache entry changed")


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


#: The file identity of each entry of a root by a code (``DiskStore.idents``)
_IDENTS = "SELECT path, ident FROM entries WHERE scope = ? AND mark = ?"


class _Sizes:
    """The entries there are: each one's bytes by path, and their sum (asked at every drop
    of a parsed session when the store is in memory: its bytes count against that cap)."""

    def __init__(self, sizes: dict[str, int] | None = None) -> None:
        self._of = sizes or {}
        self.total = sum(self._of.values())

    def __contains__(self, path: str) -> bool:
        return path in self._of

    def __len__(self) -> int:
        return len(self._of)

    def get(self, path: str) -> int | None:
        return self._of.get(path)

    def set(self, path: str, size: int) -> None:
        self.total += size - self._of.get(path, 0)
        self._of[path] = size

    def pop(self, path: str) -> int | None:
        size = self._of.pop(path, None)
        if size is not None:
            self.total -= size
        return size


class DiskStore:
    """Entries by session file path, in one database; at most ``cap`` bytes, oldest out.

    With no folder (``--disk-cache off``, or a folder that may not be used), the database is
    in memory and lives as long as the mount: then it keeps what the parse cache drops for
    this mount alone, within the share of the cache's cap it is given."""

    def __init__(self, folder: str | None, cap: int, mark: str, scope: str) -> None:
        """``mark``: what made the entries (:func:`code_mark` and the mount's options that
        change what it shows); ``scope``: the sessions root (its entries only are pruned)."""
        self.folder, self.cap, self.mark, self.scope = folder or "", cap, mark, scope
        self.memory = folder is None
        self.path = ":memory:" if folder is None else os.path.join(folder, DB_NAME)
        self._db: sqlite3.Connection | None = None  # the readers' connection
        self._read = threading.RLock()  # (one statement at a time on it)
        self._last: tuple[int, bytes] = (-1, b"")  # (``_unpacked``: under ``_read``)
        self._sizes = _Sizes()  # the entries there are
        self._lock = threading.Lock()
        if folder is None:
            self._writer = Writer(self._shared, self._do, own=False)
        else:
            self._writer = Writer(lambda: _connect(self.path), self._do)
        # Saves and drops per path: a queued save is made only if it is still the last
        # thing asked of its entry (a session trashed after it was saved stays gone).
        self._asked: dict[str, int] = {}
        self._waiting = 0  # bytes of saves queued (``QUEUE_BYTES``)
        self.saved = 0  # entries written by this mount (status, tests)
        self.names = _Names(scope, mark, self._queue)  # the sessions' folder names
        self._ahead = Ahead(self.path)
        self.used = 0  # entries that answered for a session

    # -- the database -----------------------------------------------------------------------

    def open(self) -> bool:
        """Make (or check) the folder and the database and learn its entries. False (and a
        warning) when it cannot be used: then nothing is read or written."""
        if self.memory:
            self._db = database.in_memory(self._read)
            return True
        why = _folder(self.folder)
        if not why:
            try:
                self._db = database.opened(self.path)
            except (OSError, sqlite3.Error) as err:
                why = f"{self.path}: {err}"
        if why:
            log.warning("no disk cache: %s", why)
            return False
        self._load()
        self._queue(_Do(self._trim, "trim"))  # (the cap may be lower than the last mount's)
        return True

    def _shared(self) -> sqlite3.Connection:
        assert self._db is not None, "the store is not open"
        return self._db

    def _load(self) -> None:
        """The entries there are and this root's kept session names (another code's are
        not used)."""
        with self._reading() as db:
            sizes = db.execute("SELECT path, bytes FROM entries").fetchall()
            self.names.load(db)
        self._sizes = _Sizes({_path(p): n for p, n in sizes})

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._read:  # (looked at under the lock: the close takes it to close the db)
            if self._db is None:
                raise OSError(errno.EBADF, "the disk cache is closed")
            yield self._db

    def __len__(self) -> int:
        return len(self._sizes)

    def total_bytes(self) -> int:
        """What the entries and the kept session names take."""
        with self._lock:
            return self._sizes.total + self.names.bytes

    @property
    def name(self) -> str:
        """What the log calls it."""
        return "store in memory" if self.memory else "disk cache"

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

    def size_of(self, path: str) -> int | None:
        return self._sizes.get(path)  # (a dict's get: no lock needed)

    def learn(self, path: str, size: int) -> None:
        """Another process (a render worker) wrote the entry of ``path``, ``size`` bytes."""
        with self._lock:
            self._sizes.set(path, size)

    def idents(self) -> dict[str, str]:
        """(Blocking.) The file identity (JSON) of each entry of this root by this code."""
        rows = self.query(_IDENTS, (_key(self.scope), self.mark))
        return {_path(p): i for p, i in rows}

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
            with self._reading() as db:  # (the row and its answers at one hold of the lock)
                row = db.execute(
                    "SELECT mark, ident, files FROM entries WHERE path = ?", (_key(path),)
                ).fetchone()
                return self._entry(path, ident, row, answers)
        except Gone:  # saved again meanwhile, by another mount sharing the folder
            return None
        except (OSError, sqlite3.Error) as err:
            log.warning("disk cache: %s is unreadable (%s)", path, err)
            return None

    def _entry(self, path: str, ident: list[int], row: Any, answers: bool) -> Stored | None:
        """(Under the readers' lock.) The entry ``row`` read of ``path``, if it is of the
        file ``ident`` describes, by this code."""
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
        except Gone:
            raise
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
                    if self.memory:
                        got = self._unpacked(db, text * CHUNKS + n)[at : at + size]
                    else:
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

    def _unpacked(self, db: sqlite3.Connection, chunk: int) -> bytes:
        """A chunk of a store in memory, whose chunks are compressed (the last one kept: a
        file is read in order, a chunk in two reads or more)."""
        if self._last[0] != chunk:
            row = db.execute("SELECT data FROM chunks WHERE id = ?", (chunk,)).fetchone()
            if row is None:
                raise Gone()
            self._last = (chunk, zlib.decompress(row[0]))
        return self._last[1]

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
            self._last = (-1, b"")  # (a text of theirs read last is not read again)
            for path in paths:
                self._asked[path] = self._asked.get(path, 0) + 1
            return [path for path in paths if self._sizes.pop(path) is not None]

    def _forget(self, path: str) -> None:
        with self._lock:
            self._sizes.pop(path)

    def prefetch(self, paths: list[str]) -> None:
        """Read the entries of ``paths`` ahead (``Ahead``): their folder is being listed,
        and a walk reads them next."""
        if self.on and not self.memory:
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
        if not self.on or self.cap <= 0:  # (--cache-mb 0: nothing is kept in memory)
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

    def run(self, work: Work, what: str) -> None:
        """(Blocking: a worker thread's.) ``work(db)`` in a transaction of the writer's
        thread, once it is done (or given up: a full disk, logged)."""
        done = threading.Event()
        self.later(work, what, done)
        done.wait()

    def later(self, work: Work, what: str, done: threading.Event | None = None) -> None:
        """``work(db)`` in a transaction of the writer's thread, in its turn (not waited for:
        a parse offering what it counted); ``done`` is set after it."""
        self._queue(_Do(work, what, done))

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of a read (OSError or sqlite3.Error when it cannot be read)."""
        with self._reading() as db:
            return db.execute(sql, args).fetchall()

    def busy(self) -> bool:
        """Whether the writer has entries still to write (read without the lock)."""
        return self._waiting > 0

    def _do(self, db: sqlite3.Connection, item: _Save | _Do) -> None:
        """(The writer's thread.) One job: a save, or other work in a transaction."""
        if isinstance(item, _Do):
            try:
                with _transaction(db):
                    item.run(db)
            finally:
                if item.done is not None:
                    item.done.set()
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
        log.debug("%s: %s saved (%d bytes)", self.name, job.path, total)
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
            self._last = (-1, b"")  # (a text it had, read last, is not read again)
            where: dict[str, tuple[int, int]] = {}
            stored = 0
            for kind, (parts, size) in job.files.items():
                cur = db.execute("INSERT INTO texts(path, size) VALUES (?, ?)", (key, size))
                text = cur.lastrowid
                assert text is not None
                stored += _write_chunks(db, text, parts, size, pack=self.memory)
                where[kind] = (text, size)
            scope, mark, ident = job.row
            total = stored
            db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, scope, mark, ident, orjson.dumps(where).decode(), total, time.time_ns()),
            )
            with self._lock:  # (a drop takes the lock too: it comes before, or after, this)
                if self._asked.get(job.path) != job.asked:
                    raise _Void()
                self._sizes.set(job.path, total)
        return where, total

    def _trim(self, db: sqlite3.Connection) -> None:
        """Remove the oldest entries past the cap (in a transaction only when there are)."""
        with self._lock:
            total = self._sizes.total + self.names.bytes
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

    # -- pruning ----------------------------------------------------------------------------

    def prune(self, gone: Callable[[str], bool]) -> int:
        """Remove the entries of this root's sessions for which ``gone(path)`` says the file
        is no more or that other code made (blocking: a thread at mount start); how many
        went. Other roots' entries are their mounts' (one folder may serve several)."""
        try:
            rows = self.query("SELECT path, mark FROM entries WHERE scope = ?", (_key(self.scope),))
        except (OSError, sqlite3.Error):
            return 0
        out = [p for key, mark in rows for p in [_path(key)] if mark != self.mark or gone(p)]
        self._void(out)
        if out:
            self._queue(_Do(lambda db: _delete(db, out), "prune"))
        return len(out)


class _Void(Exception):
    """A save that was dropped meanwhile: its transaction is rolled back."""
