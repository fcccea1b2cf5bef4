"""Noticing what changes in the sessions folder while the mount is up (the live view).

This module owns the mapping from inotify events to the view: watches on the sessions root
and its project folders (a folder watch reports its files growing, appearing and going), and
the kernel caches that must be dropped when a session file changed, came or went. It reads
nothing: the requests the kernel then sends bring the sessions up to date (only the appended
bytes, or whole when a file was replaced or rewritten), in steps and off the loop when big.
"""

from __future__ import annotations

import logging
import os

from .inotify import (
    IN_ATTRIB,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
)
from .kind import Kind
from .sessions import Store, project_name
from .view import ROOT_INO, Key, View

log = logging.getLogger(__name__)

_GONE = IN_DELETE | IN_MOVED_FROM
_CAME = IN_CREATE | IN_MOVED_TO


class Watcher:
    """inotify watches over a :class:`Store`, applied to a :class:`View`."""

    def __init__(self, store: Store, view: View) -> None:
        self.store = store
        self.view = view
        self.inotify = Inotify()
        self.folders: dict[int, str] = {}  # watch descriptor -> folder path
        self.blind: set[str] = set()  # folders that could not be watched
        self._watch(store.root)
        for item in store.top():
            if not item.is_session:
                self._watch(item.path)

    @property
    def fd(self) -> int:
        return self.inotify.fd

    def _watch(self, folder: str) -> None:
        try:
            self.folders[self.inotify.add(folder)] = folder
            self.blind.discard(folder)
        except OSError as err:
            self.blind.add(folder)
            log.warning("cannot watch %s (%s): changes show within 10 s only", folder, err)

    def close(self) -> None:
        self.inotify.close()

    def read(self) -> list[Event]:
        return self.inotify.read()

    def handle(self, events: list[Event]) -> None:
        """Apply ``events``: queue the kernel invalidations they call for."""
        changed: dict[str, None] = {}  # session files whose bytes changed, in order, once
        for ev in events:
            if ev.mask & IN_Q_OVERFLOW:
                log.warning("inotify queue overflowed: checking every parsed session")
                self._everything_changed(changed)
                continue
            folder = self.folders.get(ev.wd)
            if folder is None:
                continue
            if ev.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                if ev.mask & IN_IGNORED:
                    self.folders.pop(ev.wd, None)
                continue
            if ev.mask & _GONE and ev.is_dir and folder == self.store.root:
                self.blind.discard(os.path.join(folder, ev.name))  # (nothing left to see)
            self._event(folder, ev, changed)
        for path in changed:
            self.view.changes.session(path)

    def _event(self, folder: str, ev: Event, changed: dict[str, None]) -> None:
        path = os.path.join(folder, ev.name)
        if ev.is_dir:
            if folder == self.store.root:
                self._project(path, ev)
            return
        if not ev.name.endswith(".jsonl"):
            return
        self._folder_changed(folder, ev.name[: -len(".jsonl")], bool(ev.mask & (_GONE | _CAME)))
        if ev.mask & IN_ATTRIB:
            # chmod, chown: what everything under the session's folder may show changed,
            # and the kernel caches the attributes of entry nodes for long.
            self.view.changes.everything_of(path)
            old = self.store.mode_changed(path)  # its name may no longer show its text
            if old is not None:
                self._folder_changed(folder, old, True)
        if ev.mask & _GONE:
            self.store.forget(path)
            self.view.changes.session(path)
        else:
            changed[path] = None
            stem = self.store.header_came(path)  # (named by its stem until its header came)
            if stem is not None:
                self._folder_changed(folder, stem, True)
        if ev.mask & (_GONE | _CAME):
            self.view.changes.came_or_went()

    def _project(self, path: str, ev: Event) -> None:
        self.store.changed_all()  # (a folder of sessions came or went)
        name = os.path.basename(path)
        if ev.mask & _CAME:
            self._watch(path)
        for shown in {name, project_name(name)}:
            self.view.changes.entry(ROOT_INO, shown)
        self.view.changes.contents(ROOT_INO)

    def _folder_changed(self, folder: str, stem: str, listing: bool) -> None:
        """A session file changed: its folder's times changed, and its ``listing`` when the
        file came or went (the kernel keeps listings: an append does not drop it)."""
        ino = ROOT_INO if folder == self.store.root else self.view.known(Key(Kind.PROJECT, folder))
        if ino is not None:
            (self.view.changes.contents if listing else self.view.changes.inode)(ino)
            self.view.changes.entry(ino, stem)
        latest = self.view.known(Key(Kind.LATEST, self.store.root))  # it may lead here now
        if latest is not None:
            self.view.changes.contents(latest)

    def _everything_changed(self, changed: dict[str, None]) -> None:
        """Events were lost: every folder the kernel may have listed, and every session it
        may have seen (it keeps their answers for minutes), is dropped from its caches."""
        self.store.changed_all()
        self.view.changes.contents(ROOT_INO)
        for _, ino in self.view.known_of(Kind.PROJECT):
            self.view.changes.contents(ino)
        for key, _ in self.view.known_of(Kind.SESSION):
            changed[key.path] = None
        for path in self.store.loaded_paths():
            changed[path] = None
