"""The names of session folders as the mount keeps them: what the head of each session file
said (``heads.read_head``), read the first time the mount sees the file, or taken from what
the store kept of a file that is still the very file it was read from. A folder's name never
changes while mounted; a chmod that makes a file private makes its name say nothing of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from .files import Files, Unreadable
from .heads import Head, private, read_head
from .loaded import Identity

log = logging.getLogger(__name__)


#: A session file's ``lstat`` and its folder's mode (what its name may show depends on both).
Seen = tuple[os.stat_result, int]


class Heads:
    """What the head of each session file said, read the first time the mount sees the file
    and kept: its folder's name never changes while mounted (``Store.mode_changed`` is the
    one exception). A later mount takes the names the disk cache kept for files that are
    still the very files they were read from (``kept``)."""

    def __init__(self, files: Files, kept: Callable[[], dict[str, list[Any]]]) -> None:
        """``kept()``: the heads the disk cache kept (path -> row), or none."""
        self.files, self.kept = files, kept
        self.known: dict[str, Head] = {}  # session file -> its head: names fixed while mounted
        self.idents: dict[str, list[int]] = {}  # ... and the file it was read from
        self.chmods = 0  # mode changes the watcher told of, ever

    def get(self, path: str, seen: Seen | None, since: int) -> Head:
        head = self.known.get(path)
        if head is not None:
            return head
        for attempt in range(3):
            chmods = since if attempt == 0 and seen is not None else self.chmods
            head = self.known[path] = self._read_head(path, None if attempt else seen)
            # A thread reading heads (read_heads) may race a chmod: the watcher, finding no
            # head, left it to us. Kept after the count was read, the head is seen by a
            # later mode_changed; one kept before is checked here against the new mode.
            if self.chmods == chmods or self._still_right(path, head):
                return head
            self.known.pop(path, None)  # (or mode_changed did, for another event meanwhile)
        head = self.known[path] = Head(stem_of(path), None, None, True)  # (chmods each time)
        return head

    def _read_head(self, path: str, seen: Seen | None = None) -> Head:
        kept = self._kept_head(path, seen)
        if kept is not None:
            return kept
        stem = stem_of(path)
        try:
            fd = self.files.open(path)
        except Unreadable:
            return Head(stem, None, None, False)  # unreadable: asked again next time
        try:
            st = os.fstat(fd)  # (before the read: the head is of the file as this says)
            hidden = self.private(path, st.st_mode)
            head = read_head(fd, stem, slug=not hidden)
            self.idents[path] = file_ident(st)
            log.debug("%s: head read", path)
            return head
        except (OSError, Unreadable):
            return Head(stem, None, None, False)
        finally:
            os.close(fd)

    def _kept_head(self, path: str, seen: Seen | None) -> Head | None:
        """The head the disk cache kept for ``path``, when the file is the very file it was
        read from and its name may show what it showed (a year of sessions is named
        without opening one of them: at a later mount, the first walk read every head)."""
        row = self.kept().get(path)
        if row is None:
            return None
        try:
            if seen is None:
                seen = self.files.lstat(path), self.files.lstat(os.path.dirname(path)).st_mode
            st, folder_mode = seen
            if not _of(row, st):
                return None
            ident, name, sid, cwd, hidden = row
            if hidden is not self._hidden(st.st_mode, folder_mode):
                return None
            head = Head(_text(name), _text(sid, none=True), _text(cwd, none=True), hidden)
        except (Unreadable, ValueError, TypeError):
            return None
        self.idents[path] = ident
        return head

    def to_keep(self) -> dict[str, list[Any]]:
        """The heads to keep for the next mount (``DiskStore.keep_heads``): this mount's,
        and those it was given that it did not need, of files that are still the files
        they were read from (a file gone takes its name with it; one that grew is read
        again anyway)."""
        rows = dict(self.kept())
        for path, head in list(self.known.items()):
            ident = self.idents.get(path)
            if ident is not None:
                rows[path] = [ident, head.name, head.session_id, head.cwd, head.hidden]
        now = self.seen(list(rows))
        return {p: row for p, row in rows.items() if p in now and _of(row, now[p][0])}

    def _still_right(self, path: str, head: Head) -> bool:
        """Whether ``head`` shows what the file's mode allows now."""
        try:
            return self.private(path, self.files.lstat(path).st_mode) == head.hidden
        except Unreadable:
            return True  # gone: its name is asked again if it comes back

    def seen(self, paths: list[str]) -> dict[str, Seen]:
        """``lstat`` of each of ``paths`` and of its folder, one descriptor per folder (a
        kept head is checked against them: three walks from the root a session, before)."""
        names: dict[str, list[str]] = {}
        for path in paths:
            names.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
        out = {}
        for folder, in_it in names.items():
            with contextlib.suppress(Unreadable, ValueError):  # (gone; a path not below)
                mode = self.files.lstat(folder).st_mode
                for name, st in self.files.lstats(folder, in_it).items():
                    out[os.path.join(folder, name)] = (st, mode)
        return out

    def private(self, path: str, mode: int) -> bool:
        return self._hidden(mode, self.files.lstat(os.path.dirname(path)).st_mode)

    def _hidden(self, mode: int, folder_mode: int) -> bool:
        """Whether a file of ``mode`` in a folder of ``folder_mode`` is named without its
        slug (see ``heads.private``; what the folders above let through counts too)."""
        return private(mode, folder_mode & self.files.reach)


def file_ident(st: os.stat_result) -> list[int]:
    """What the disk cache ties what it keeps of a file to: its identity and its ctime (a
    file put back with an old mtime is another file; nothing sets a ctime back)."""
    i = Identity.of(st)
    return [i.dev, i.ino, i.size, i.mtime_ns, st.st_ctime_ns, i.mode, i.uid, i.gid]


def _of(row: object, st: os.stat_result) -> bool:
    """Whether a kept head ``row`` was read from the file ``st`` describes."""
    return isinstance(row, list) and bool(row) and row[0] == file_ident(st)


def _text(value: object, none: bool = False) -> Any:
    """``value`` if it is a string (or None, when ``none`` allows it); else ValueError."""
    if isinstance(value, str) or (none and value is None):
        return value
    raise ValueError("not a string")


def stem_of(path: str) -> str:
    return os.path.basename(path)[: -len(".jsonl")]
