"""Full-text search of every conversation entry (DESIGN "Search"): the index in the store,
kept up to date off the request loop, and what a query finds.

Each conversation entry is indexed once, by the bytes of its message file, with where that
file is (its session file, its entry id, its name ``MMMM-kind.md``) and where its line is.
The index is SQLite FTS5 (unicode61, accents removed, BM25), contentless: the text is not
kept twice (``search_text``'s rows are ``search_docs``' ids; a removed session's rows stay
in the index unmatched, as ids no ``search_docs`` row has: SQLite 3.40 cannot delete from a
contentless index without its text).

A session file is indexed from its whole parse (``docs_of``: the view's, which knows what a
message file holds); a file that only grew is indexed from the entry it reached. What a
query is: :func:`parse_query`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import stat
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from .database import key, path_of
from .store import DiskStore, text_in, text_out

log = logging.getLogger(__name__)

LIMIT = 200  # results of a query at most
#: Matches a query ranks at most: the newest (a word most messages hold is ranked among
#: the messages of the last weeks, not of the whole year); SPARE more for removed ones.
WINDOW, SPARE = 10_000, 64
MAX_TERMS = 64  # words of a query at most
FRESH = 0.5  # seconds between two looks at every session file
BUDGET = 0.5  # seconds a query's own update may index before it answers from what is done
PAGE_LINES, LINE_BYTES = 5, 300  # of each result in <Q>.md
BATCH = 4 << 20  # bytes of text of the sessions indexed in one transaction
REST = 0.1  # the index's writes pause this much of each batch's time after it
_TOKEN = re.compile(r"\w+")  # (what unicode61 keeps of a word: letters and digits)


class BadQuery(ValueError):
    """A name that is no query (why: one log line)."""


@dataclass(frozen=True)
class Query:
    """A query: the FTS5 expression it is, and the words a matching line shows."""

    text: str
    match: str
    words: tuple[str, ...]


def parse_query(text: str) -> Query:
    """``text`` as DESIGN "Search" reads it: words, each a whole word or (ending in ``*``)
    a prefix; ``"quoted words"`` a phrase; a word starting with ``-`` excluded; all must
    match. Anything else in a word (``:``, brackets, FTS5's own operators) is a separator,
    as in the text indexed. :class:`BadQuery` when nothing is left to find."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadQuery("it is not UTF-8") from None
    parts = re.findall(r'(-?)"([^"]*)"?|(\S+)', text)
    if len(parts) > MAX_TERMS:
        raise BadQuery(f"it has more than {MAX_TERMS} words")
    wanted: list[str] = []
    unwanted: list[str] = []
    words: list[str] = []
    for minus, phrase, bare in parts:
        out = wanted
        if bare:
            excluded = bare.startswith("-")
            word = bare[1:] if excluded else bare
            out = unwanted if excluded else wanted
            prefix = word.endswith("*")
            tokens = _TOKEN.findall(word)
        else:
            out = unwanted if minus else wanted
            prefix, tokens = False, _TOKEN.findall(phrase)
        if not tokens:
            continue
        out.append('"' + " ".join(tokens) + '"' + ("*" if prefix else ""))
        if out is wanted:
            words += [*tokens[:-1], tokens[-1] + ("*" if prefix else "")]
    if not wanted:
        raise BadQuery("it has no word to find")
    match = " AND ".join(wanted)
    if unwanted:
        match = f"({match}) NOT ({' OR '.join(unwanted)})"
    return Query(text, match, tuple(words))


class Doc(NamedTuple):
    """One conversation entry as indexed."""

    eid: str
    name: str  # its message file's name
    ts_ms: int | None
    start: int  # its line in the file
    end: int
    text: bytes  # its message file


class Hit(NamedTuple):
    path: str
    eid: str
    name: str
    ts_ms: int | None
    start: int
    end: int


@dataclass
class Found:
    """What a query found: the best :data:`LIMIT` hits, and of how much of the mount."""

    hits: list[Hit]
    indexed: int
    sessions: int
    mode: int = 0o444  # what every session of a hit lets read: no more of the results
    mtime_ns: int = 0
    page: bytes | None = None  # <Q>.md, once made


class Indexed(NamedTuple):
    """A session file as indexed: its (dev, ino, size, mtime_ns), how many entry lines of
    its parse were indexed, and the id and end offset of the last (what a parse of the file
    grown since must still have there, else the file was rewritten: indexed anew)."""

    ident: tuple[int, int, int, int]
    entries: int
    last: tuple[str, int] | None

    def holds(self, st: os.stat_result) -> bool:
        """Whether the file as ``st`` says it is now is the one indexed."""
        return self.ident == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Parsed(NamedTuple):
    """What ``docs_of`` gives: the file as parsed, and its entries from the one asked on
    (all of them when the file is no longer what was indexed: ``anew``)."""

    indexed: Indexed
    docs: list[Doc]
    anew: bool


DocsOf = Callable[[str, Indexed | None], Parsed]


@dataclass
class _Progress:
    indexed: int = 0
    sessions: int = 0
    building: bool = False
    started: float = 0.0  # (time.monotonic) when the build began
    done_then: int = 0  # ... and how many were indexed then

    def said(self) -> str:
        """The build's progress, as ``pisessfs status`` says it ("": not built yet)."""
        if not self.sessions:
            return ""
        done = f"{self.indexed:,} of {self.sessions:,} sessions indexed"
        if not self.building:
            return done
        took = time.monotonic() - self.started
        rate = (self.indexed - self.done_then) / took if took > 0 else 0.0
        left = (self.sessions - self.indexed) / rate if rate > 0 else None
        about = f", about {left:.0f} s to go" if left is not None else ""
        return f"building: {done}, {rate:.0f} a second{about}"


class SearchIndex:
    """The index of every session the mount shows, in the store.

    ``sessions()`` lists them (path, project folder); ``docs_of(path, was)`` parses one and
    gives what to index of it (:class:`Parsed`). :meth:`refresh` brings the index up to date
    (blocking: run off the loop; a first build goes on in a thread of its own); :meth:`find`
    answers. Which files changed: every file's ``stat`` at most every :data:`FRESH` seconds,
    or, while ``watched()`` says the watcher sees every folder, the files it named
    (:meth:`note`)."""

    def __init__(
        self,
        store: DiskStore,
        sessions: Callable[[], list[tuple[str, str]]],
        lstat: Callable[[str], os.stat_result],
        docs_of: DocsOf,
        watched: Callable[[], bool] = lambda: False,
    ) -> None:
        self.store, self.sessions, self.lstat, self.docs_of = store, sessions, lstat, docs_of
        self.watched = watched
        self.scope = key(store.scope)
        self._lock = threading.Lock()  # one update at a time
        self._checked = -1e9  # (time.monotonic) of the last full look
        self._known: dict[str, Indexed] | None = None  # what is indexed, by file
        self._due: set[str] = set()  # files seen changed, or not indexed yet
        self._noted: set[str] = set()  # files the watcher named since the last update
        self._rescan = True  # a look at every file is due (the watcher cannot say)
        self.generation = 0  # grows with every change of the index: found results are of one
        self.progress = _Progress()
        self._batch: list[Callable[[sqlite3.Connection], None]] = []  # writes queued
        self._batch_bytes = 0
        self._written = threading.Event()  # the last batch handed to the writer is written
        self._written.set()
        self._took = 0.0  # seconds the last batch took to write
        # what queries found, by the index's generation, and when (a file's mode changes
        # without a change of the index)
        self._found: dict[tuple[str, str | None], tuple[int, float, Found]] = {}
        # While render workers index (``share``): whether they index this file (not here)
        self._shared: Callable[[str], bool] | None = None
        self._asked: Callable[[], None] = lambda: None
        self._shared_read = -1e9  # (time.monotonic) when what they wrote was read

    def share(
        self, by: Callable[[str], bool] | None, asked: Callable[[], None] = lambda: None
    ) -> None:
        """Other processes (the render workers) index the files ``by(path)`` says until
        ``share(None)``: meanwhile this index leaves those to them, reads what they indexed
        again at each update, and tells them a query came (``asked``)."""
        self._shared, self._asked = by, asked
        self._known = None  # (read again: what they wrote)
        self._rescan = True
        self.generation += 1
        if by is None:  # (they are done: what status says is what they did)
            with contextlib.suppress(OSError, sqlite3.Error):  # (at unmount: closed)
                indexed, listed = len(self.indexed()), len(self.sessions())
                self.progress = _Progress(min(indexed, listed), listed)

    def add(self, path: str) -> None:
        """(Blocking: a render worker's, right after its parse of ``path``.) Index what
        session ``path`` holds that the index lacks (written in its batch: :meth:`flush`)."""
        with self._lock:
            if self._known is None:
                self._known = self.indexed()
            was = self._known.get(path)
            st = self.lstat(path)
            if was is None or not was.holds(st):
                self._known[path] = self._index(path, was)

    def flush(self) -> None:
        """(Blocking.) Write what :meth:`add` queued."""
        with self._lock:
            self._flush(wait=True)

    def note(self, path: str | None) -> None:
        """(The watcher's.) Session file ``path`` changed, came or went (None: any may have,
        a folder came or events were lost)."""
        if path is None:
            self._rescan = True
        else:
            self._noted.add(path)
        self.generation += 1  # (what was found may show a mode changed since: found again)

    def fresh(self) -> bool:
        """Whether nothing is known to be due (a query then answers without a look)."""
        if self._shared is not None and not self._noted:
            # (the workers index what is due: what they wrote is read twice a second at most)
            return time.monotonic() - self._shared_read < FRESH
        if self._due or self._noted:
            return False
        if self.watched() and not self._rescan:
            return True
        return time.monotonic() - self._checked < FRESH

    def due(self) -> bool:
        """Whether a query should bring the index up to date first (not while a build runs:
        it answers from what is indexed)."""
        return not self.progress.building and not self.fresh()

    def said(self) -> str:
        return self.progress.said()

    def refresh(self) -> None:
        """(Blocking.) Index what changed, for :data:`BUDGET` seconds at most; what is left
        goes on in a thread of its own (a first build of a year of sessions), and a query
        answers from what is indexed meanwhile."""
        if self._shared is not None:
            self._asked()  # (the workers index now, if they did not yet)
        if not self._lock.acquire(blocking=False):
            return  # (the build's thread has it: answered from what it did so far)
        try:
            if not self.fresh() and not self._update(time.monotonic() + BUDGET):
                self.progress.building = True
                self.progress.started = time.monotonic()
                self.progress.done_then = self.progress.indexed
                threading.Thread(target=self._build, name="search-build", daemon=True).start()
                return  # (the lock goes with the thread)
        except BaseException:
            self._lock.release()
            raise
        self._lock.release()

    def _build(self) -> None:
        try:
            started = time.monotonic()
            self._update(None)
            took = time.monotonic() - started
            log.info("search: %d sessions indexed in %.1f s", self.progress.indexed, took)
        except Exception:
            log.exception("search: the index was not built")
        finally:
            self.progress.building = False
            self._lock.release()

    def _update(self, until: float | None) -> bool:
        """(Under the lock.) Index each session file due, until ``until`` (None: all);
        True when none is left."""
        shared = self._shared
        if self._known is None or shared is not None:
            self._known = self.indexed()  # (the workers add to it meanwhile)
            self._shared_read = time.monotonic()
        known = self._known
        noted, self._noted = self._noted, set()
        if self._rescan or not self.watched() or time.monotonic() - self._checked > 3600:
            self._rescan = False
            listed = {path for path, _ in self.sessions()}
            self._due = {p for p in listed if p not in known} | set(known) | noted
            self._checked = time.monotonic()
        else:
            self._due |= noted
        gone, todo = [], []
        for path in list(self._due):
            if shared is not None and shared(path):
                continue  # (a worker indexes it: due until the workers are done)
            try:
                st = self.lstat(path)
            except Exception:  # (gone, or no longer a file to read: not searched)
                self._due.discard(path)
                if path in known:
                    gone.append(path)
                continue
            was = known.get(path)
            if was is not None and was.ident[2:] == (st.st_size, st.st_mtime_ns):
                self._due.discard(path)
                continue
            todo.append((st.st_mtime_ns, path, was))
        # oldest first: the files changed last get the last rows, which a word that most
        # messages hold is ranked among (WINDOW)
        for _, path, was in sorted(todo, key=lambda t: (t[0], t[1])):
            if until is not None and time.monotonic() > until:
                break
            self._due.discard(path)
            try:
                known[path] = self._index(path, was)
            except Exception as err:  # (unreadable, or gone meanwhile: not searched)
                log.debug("search: %s not indexed: %s", path, err)
                if known.pop(path, None) is not None:
                    gone.append(path)
            self.progress.indexed = len(known)
        self._flush(wait=True)
        if gone:
            for path in gone:
                known.pop(path, None)
            self.store.run(lambda db: _remove(db, gone, True), "search: sessions gone")
            self.generation += 1
        p = self.progress
        left = len({q for q in self._due if q not in known})
        self.progress = _Progress(len(known), len(known) + left, p.building, p.started, p.done_then)
        return all(shared is not None and shared(q) for q in self._due)  # (none left here)

    def indexed(self) -> dict[str, Indexed]:
        """(Blocking.) What the store's index holds of each session file of this root."""
        rows = self.store.query(
            "SELECT path, mark, seen FROM search_files WHERE scope = ?", (self.scope,)
        )
        out: dict[str, Indexed] = {}
        for path, mark, seen in rows:
            got = _indexed(self.store.mark, mark, seen)
            if got is not None:
                out[path_of(path)] = got
        return out

    def _index(self, path: str, was: Indexed | None) -> Indexed:
        """Index what session ``path`` holds past what ``was`` indexed of it."""
        parsed = self.docs_of(path, was)
        folder = key(os.path.dirname(path))
        at = key(path)
        now = parsed.indexed
        last = None if now.last is None else (text_out(now.last[0]), now.last[1])
        seen = orjson.dumps([now.ident, now.entries, last]).decode()  # (an id: any str)

        def write(db: sqlite3.Connection) -> None:
            if parsed.anew:
                _remove(db, [path], False)
            (file,) = db.execute(
                "INSERT INTO search_files (path, scope, folder, mark, seen) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (path) DO UPDATE SET scope = excluded.scope, mark = excluded.mark,"
                " seen = excluded.seen RETURNING id",
                (at, self.scope, folder, self.store.mark, seen),
            ).fetchone()
            for d in parsed.docs:
                cur = db.execute(
                    "INSERT INTO search_docs (file, eid, name, ts_ms, start, end)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (file, key(d.eid), key(d.name), d.ts_ms, d.start, d.end),
                )
                text = d.text.decode("utf-8", "replace")
                db.execute(
                    "INSERT INTO search_text (rowid, text) VALUES (?, ?)", (cur.lastrowid, text)
                )

        self._write(write, sum(len(d.text) for d in parsed.docs))
        return now

    def _write(self, write: Callable[[sqlite3.Connection], None], size: int) -> None:
        """(Under the lock.) Queue ``write``: sessions are written :data:`BATCH` bytes of
        text to a transaction (FTS5 makes a segment of each, and merges them: one a session
        made the writer the build's bottleneck), each batch while the next is parsed."""
        self._batch.append(write)
        self._batch_bytes += size
        if self._batch_bytes >= BATCH:
            self._flush(wait=False)

    def _flush(self, wait: bool) -> None:
        """(Under the lock.) Write what is queued; with ``wait``, until it is written."""
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        self._written.wait()  # (the batch before: one in the writer's queue at a time)
        if batch:
            # A pause between batches, a tenth of the last one's time: the store has one
            # writer at a time, and SQLite's waiters poll; a build that wrote back to back
            # starved the render workers' saves ("database is locked" after 5 s).
            time.sleep(self._took * REST)

            def write_all(db: sqlite3.Connection) -> None:
                started = time.monotonic()
                for write in batch:
                    write(db)
                self.generation += 1
                self._took = time.monotonic() - started

            self._written = threading.Event()
            self.store.later(write_all, f"search: {len(batch)} sessions", self._written)
        if wait:
            self._written.wait()

    def find(self, q: Query, folder: str | None) -> Found:
        """The hits of ``q`` (in project folder ``folder``, or everywhere), best first; a
        hit whose session is gone since is left out."""
        memo = self._found.get((q.text, folder))
        now = time.monotonic()
        if memo is not None and memo[0] == self.generation and now - memo[1] < FRESH:
            return memo[2]
        try:
            rows = self._best(q, folder)
        except sqlite3.Error as err:  # (a query SQLite refuses: found nothing)
            log.info("search: %r found nothing: %s", q.text, err)
            rows = []
        found = Found([], self.progress.indexed, self.progress.sessions)
        stats: dict[str, os.stat_result | None] = {}
        for path, eid, name, ts_ms, start, end in rows:
            p = path_of(path)
            if p not in stats:
                try:
                    stats[p] = self.lstat(p)
                except Exception:
                    stats[p] = None
            st = stats[p]
            if st is None:
                continue
            found.mode &= stat.S_IMODE(st.st_mode)
            found.mtime_ns = max(found.mtime_ns, st.st_mtime_ns)
            found.hits.append(Hit(p, path_of(eid), path_of(name), ts_ms, start, end))
        if len(self._found) > 64:
            self._found.clear()
        self._found[(q.text, folder)] = (self.generation, now, found)
        return found

    def _best(
        self, q: Query, folder: str | None
    ) -> list[tuple[bytes, bytes, bytes, int, int, int]]:
        """The rows of the best :data:`LIMIT` matches: BM25 over the :data:`WINDOW` matches
        indexed last (every match, when fewer: ranking a word in most messages of a year of
        sessions took 400 ms), the newest files being indexed last."""
        args: tuple[object, ...]
        if folder is None:
            match, args = "search_text MATCH ?", (q.match,)
            src = "search_text"
        else:
            match, args = "search_text MATCH ? AND f.folder = ?", (q.match, key(folder))
            src = _JOINED
        cut = self.store.query(
            f"SELECT search_text.rowid FROM {src} WHERE {match}"
            " ORDER BY search_text.rowid DESC LIMIT 1 OFFSET ?",
            (*args, WINDOW - 1),
        )
        ids = [
            doc
            for (doc,) in self.store.query(
                f"SELECT search_text.rowid FROM {src} WHERE {match} AND search_text.rowid >= ?"
                " ORDER BY search_text.rank LIMIT ?",
                (*args, cut[0][0] if cut else 0, LIMIT + SPARE),
            )
        ]
        if not ids:
            return []
        rows = self.store.query(
            "SELECT d.doc, f.path, d.eid, d.name, d.ts_ms, d.start, d.end FROM search_docs d"
            f" JOIN search_files f ON f.id = d.file WHERE d.doc IN ({','.join('?' * len(ids))})",
            tuple(ids),
        )
        by_doc = {r[0]: r[1:] for r in rows}  # (a removed doc has none: its words stay)
        return [by_doc[d] for d in ids if d in by_doc][:LIMIT]

    def name_of(self, path: str, eid: str) -> str | None:
        """The message file's name of entry ``eid`` of session ``path``, as indexed."""
        rows = self.store.query(
            "SELECT d.name FROM search_docs d JOIN search_files f ON f.id = d.file"
            " WHERE f.path = ? AND d.eid = ? LIMIT 1",
            (key(path), key(eid)),
        )
        return path_of(rows[0][0]) if rows else None

    def count(self, q: Query, folder: str | None) -> int:
        """How many messages match ``q`` (in ``folder``): the page's first line."""
        try:
            if folder is not None:
                sql = f"SELECT count(*) FROM {_JOINED} WHERE search_text MATCH ? AND f.folder = ?"
                return int(self.store.query(sql, (q.match, key(folder)))[0][0])
            (n,) = self.store.query(
                "SELECT count(*) FROM search_text WHERE search_text MATCH ?", (q.match,)
            )[0]
            if self.store.query("SELECT 1 FROM search_dead LIMIT 1"):
                (dead,) = self.store.query(
                    "SELECT count(*) FROM search_text WHERE search_text MATCH ?"
                    " AND rowid IN (SELECT doc FROM search_dead)",
                    (q.match,),
                )[0]
                n -= dead
            return int(n)
        except sqlite3.Error:
            return 0


#: A match with its message's row and file (a project's search/).
_JOINED = (
    "search_text JOIN search_docs d ON d.doc = search_text.rowid"
    " JOIN search_files f ON f.id = d.file"
)


def _indexed(ours: str, mark: str, seen: str) -> Indexed | None:
    """A row of ``search_files``, when this code (mark ``ours``) made it."""
    if mark != ours:
        return None
    with contextlib.suppress(ValueError, TypeError):
        (dev, ino, size, mtime_ns), count, last = orjson.loads(seen)
        at = (text_in(last[0]), int(last[1])) if last is not None else None
        return Indexed((dev, ino, size, mtime_ns), count, at)
    return None


def _remove(db: sqlite3.Connection, paths: list[str], files: bool) -> None:
    """The docs of ``paths`` go (their words stay in the index: ``search_dead`` names them),
    and with ``files`` what each file was."""
    keys = [(key(p),) for p in paths]
    of = "(SELECT id FROM search_files WHERE path = ?)"
    dead = f"INSERT OR IGNORE INTO search_dead SELECT doc FROM search_docs WHERE file = {of}"
    db.executemany(dead, keys)
    db.executemany(f"DELETE FROM search_docs WHERE file = {of}", keys)
    if files:
        db.executemany("DELETE FROM search_files WHERE path = ?", keys)


# -- the page <Q>.md ---------------------------------------------------------------------------


def marked_lines(text: str, words: tuple[str, ...]) -> list[str]:
    """The lines of ``text`` that hold a word of the query (at most :data:`PAGE_LINES`,
    each cut to :data:`LINE_BYTES`), the words marked ``**so**``."""
    if not words:
        return []
    alts = [re.escape(w[:-1]) + r"\w*" if w.endswith("*") else re.escape(w) for w in words]
    find = re.compile(r"(?<!\w)(" + "|".join(alts) + r")(?!\w)", re.IGNORECASE)
    out = []
    for line in text.splitlines():
        if not find.search(line) and not find.search(_plain(line)):
            continue
        cut = line.encode("utf-8", "surrogateescape")[:LINE_BYTES]
        short = cut.decode("utf-8", "ignore")
        out.append(find.sub(lambda m: f"**{m.group(0)}**", short).strip())
        if len(out) == PAGE_LINES:
            break
    return out


def _plain(text: str) -> str:
    """``text`` without its accents (as the index reads it)."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))
