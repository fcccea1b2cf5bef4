"""Where sessions are in the mount: any session file's shown path (:func:`shown_path`), and
the root's ``latest``, where the session whose file changed last is.

``latest`` is found by the files' mtimes (stats, no file opened), and only the folder of the
newest session is named: naming reads each session's head (its file scanned for its name), and a
first listing of the root that named every session of 5,000 held the loop for 4.4 s. The
stats run off the loop (:meth:`Newest.work`), and the newest's folder's heads are read in a
thread before the root's listing (``layout``).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING

from .files import Unreadable
from .loaded import Work

if TYPE_CHECKING:
    from .sessions import Listing, Store

#: Seconds the newest files found stay so: a walk asks for ``latest`` at every listing of the
#: root, and the watcher tells of every change meanwhile (``changed``).
FRESH = 0.5

Found = list[tuple["Listing", str]]  # each newest file, with the root's item it is in


class Newest:
    """``latest`` of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._latest: tuple[float, str | None] | None = None  # when found, and where
        self._found: tuple[float, Found] | None = None

    def changed(self) -> None:
        """A session file changed, came or went."""
        self._latest = self._found = None

    def latest(self) -> str | None:
        """``<project>/<session>`` by their folders' names (or ``<session>``, for one lying
        in the root): the greatest of the shown paths of the newest files."""
        memo = self._latest
        if memo is not None and time.monotonic() - memo[0] < FRESH:
            return memo[1]
        found = self._named(self._newest())
        self._latest = (time.monotonic(), found)
        return found

    def unnamed(self) -> list[str]:
        """The session files whose heads :meth:`latest` would read (to read first)."""
        folders = {item.path for item, _ in self._newest() if not item.is_session}
        return [p for f in sorted(folders) for p in self.store.unlisted(f)[1]]

    def work(self) -> Work | None:
        """Blocking work that finds the newest files again (a stat of every session: on a
        cold disk, 5,000 of them held the loop for a tenth of a second), or None when what
        was found is fresh."""
        if self._fresh() is not None:
            return None
        items = self.store.top()  # (on the loop: the listings are its own)
        return lambda: self._keep(_find(self.store, items))

    def _newest(self) -> Found:
        fresh = self._fresh()
        return fresh if fresh is not None else self._keep(_find(self.store, self.store.top()))

    def _fresh(self) -> Found | None:
        memo = self._found
        return memo[1] if memo is not None and time.monotonic() - memo[0] < FRESH else None

    def _keep(self, found: Found) -> Found:
        self._found = (time.monotonic(), found)
        return found

    def _named(self, newest: Found) -> str | None:
        shown = []
        for _, path in newest:
            with contextlib.suppress(Unreadable):  # (gone since: the others are)
                where = shown_path(self.store, path)
                if where is not None:
                    shown.append(where[1:])
        return max(shown, default=None)


def shown_path(store: Store, path: str) -> str | None:
    """Where session file ``path`` is in the mount (``/<project>/<name>``, ``/<name>`` for
    a flat one), None when it is no listed session of this mount."""
    folder = os.path.dirname(path)
    if folder == store.root:
        names = {i.path: i.name for i in store.top() if i.is_session}
        return "/" + names[path] if path in names else None
    if os.path.dirname(folder) != store.root:
        return None
    projects = {i.path: i.name for i in store.top() if not i.is_session}
    if folder not in projects:
        return None  # (a path from a file: it may name a folder that is not there)
    names = {i.path: i.name for i in store.sessions_in(folder)}
    return f"/{projects[folder]}/{names[path]}" if path in names else None


def _find(store: Store, items: list[Listing]) -> Found:
    """The session files changed last of the root's ``items`` (all of them, when several
    were at once)."""
    best = -1
    found: Found = []
    for item in items:
        if item.is_session:
            folder, names = os.path.dirname(item.path), [os.path.basename(item.path)]
        else:
            folder = item.path
            try:
                names = [e.name for e in store.session_files(folder)]
            except Unreadable:
                continue
        for name, st in store.files.lstats(folder, names).items():
            if st.st_mtime_ns > best:
                best, found = st.st_mtime_ns, []
            if st.st_mtime_ns == best:
                found.append((item, os.path.join(folder, name)))
    return found
