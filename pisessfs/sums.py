"""The store's side of ``usage/``: what each session file's usage gave, by UTC day and model
(table ``usage``), and the file as it was counted (``usage_files``: its stat, the offset
counted to, its project); the sums ``usage.py`` shows are SQL sums of these rows.

Rows of another root (two mounts may share the cache folder) are left alone; rows made by
other code are counted again. It is a plain table: ``usage.Usage`` decides what to count.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson

from .database import key, path_of
from .store import text_in, text_out
from .usage import ROOT_PROJECT, Counting, Done, Seen, Sums, Table

if TYPE_CHECKING:
    from .store import DiskStore

#: The rows of each file of ``usage/``: its key columns, and the SQL that makes them.
_KEYS = {
    "daily.csv": (("date",), "u.day"),
    "monthly.csv": (("month",), "substr(u.day, 1, 7)"),
    "projects.csv": (("project",), "json_extract(f.seen, '$[5]')"),
    "models.csv": (("provider", "model"), "u.model"),
}
_SUMS = "sum(messages), sum(input), sum(output), sum(cache_read), sum(cache_write), sum(cost)"


Write = Callable[[sqlite3.Connection], None]


class UsageTable:
    """The usage rows of one sessions root, in the store."""

    def __init__(self, store: DiskStore) -> None:
        self.store, self.scope = store, key(store.scope)

    def seen(self) -> dict[str, Seen]:
        """Each file of this root as it was counted, by this code."""
        rows = self.store.query(
            "SELECT path, mark, seen FROM usage_files WHERE scope = ?", (self.scope,)
        )
        out = {}
        for path, mark, seen in rows:
            was = orjson.loads(seen)
            if mark == self.store.mark and isinstance(was, list) and len(was) == 7:
                dev, ino, size, mtime_ns, offset, project, tail = was
                shown = text_in(project)
                out[path_of(path)] = Seen(dev, ino, size, mtime_ns, offset, shown, tail)
        return out

    def put(
        self, path: str, seen: Seen, sums: Sums, start: int | None, then: Done | None = None
    ) -> None:
        """Add what ``path`` gave from offset ``start``, where its count stopped (None: counted
        from its start, its old rows go). Nothing is added when its count is no longer at
        ``start`` (a parse put a whole count meanwhile: added again, lines would count
        twice). ``then``: not waited for, called once it is written (the writer's thread)."""
        self._run([self._writer(path, seen, sums, start)], then, f"usage of {path}")

    def put_all(self, counted: list[Counting], then: Done | None = None) -> None:
        """:meth:`put` of the counts of many files, in one transaction (a walk's parses offer
        one each: a transaction each took the writer's time from the texts)."""
        writes = [self._writer(*c) for c in counted]
        self._run(writes, then, f"usage of {len(counted)} sessions")

    def _run(self, writes: list[Write], then: Done | None, what: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            for one in writes:
                one(db)
            if then is not None:
                then()

        if then is None:
            self.store.run(write, what)
        else:
            self.store.later(write, what)

    def _writer(self, path: str, seen: Seen, sums: Sums, start: int | None) -> Write:
        at = key(path)
        row = orjson.dumps(
            [
                *(seen.dev, seen.ino, seen.size, seen.mtime_ns, seen.offset),
                *(text_out(seen.project), seen.tail),
            ]
        ).decode()
        values = [(at, day, model, *map(int, v[:5]), v[5]) for (day, model), v in sums.items()]

        def write(db: sqlite3.Connection) -> None:
            if start is None:
                db.execute("DELETE FROM usage WHERE path = ?", (at,))
            elif not self._at(db, at, seen, start):
                return
            db.executemany(
                "INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET"
                " messages = messages + excluded.messages, input = input + excluded.input,"
                " output = output + excluded.output,"
                " cache_read = cache_read + excluded.cache_read,"
                " cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost",
                values,
            )
            db.execute(
                "INSERT OR REPLACE INTO usage_files VALUES (?, ?, ?, ?, ?)",
                (at, self.scope, self.store.mark, row, len(values)),
            )

        return write

    @staticmethod
    def _at(db: sqlite3.Connection, at: bytes, seen: Seen, start: int) -> bool:
        """Whether the count of file ``at`` (of ``seen``'s inode) stopped at ``start``."""
        row = db.execute("SELECT seen FROM usage_files WHERE path = ?", (at,)).fetchone()
        was = orjson.loads(row[0]) if row is not None else None
        return (
            isinstance(was, list)
            and len(was) == 7
            and was[:2] + was[4:5]
            == [
                seen.dev,
                seen.ino,
                start,
            ]
        )

    def forget(self, paths: list[str]) -> None:
        """Sessions gone: their rows go."""
        keys = [(key(p),) for p in paths]

        def write(db: sqlite3.Connection) -> None:
            db.executemany("DELETE FROM usage WHERE path = ?", keys)
            db.executemany("DELETE FROM usage_files WHERE path = ?", keys)

        self.store.run(write, "usage of sessions gone")

    def table(self, name: str) -> Table:
        """The rows of file ``name`` of ``usage/``, oldest (or by name) first."""
        keys, column = _KEYS[name]
        rows = self.store.query(
            f"SELECT {column}, {_SUMS} FROM usage u JOIN usage_files f ON f.path = u.path"
            f" WHERE f.scope = ? AND f.mark = ? GROUP BY {column} ORDER BY {column}",
            (self.scope, self.store.mark),
        )
        out = []
        for got, *values in rows:
            shown = str(got) if got is not None else ROOT_PROJECT
            if name == "projects.csv":
                shown = text_in(got) if isinstance(got, str) else ROOT_PROJECT  # (a file name)
            cells = tuple(shown.split("/", 1)) if len(keys) == 2 else (shown,)
            out.append((cells if len(cells) == len(keys) else (shown, ""), list(values)))
        return Table(keys, out)
