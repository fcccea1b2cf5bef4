"""The disk cache's side of the view: what a session answered and its whole-session files
saved to the store (``store.DiskStore``) when the mount is done with it, and read back by a
later mount, numbered anew, so that its first walk of an unchanged session parses nothing.

An entry is saved only when it is what a render of the file as it is gives; it is used only
for the very file it was made from (``store`` checks the identity and the code's mark).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

import msgspec

from .handles import Later, OnDisk
from .inodes import Attr, Key
from .kept import Answers
from .kind import Kind
from .layout import KINDS, Fork
from .naming import file_ident
from .sessions import Identity, Loaded, SessionFile, Unreadable
from .store import Stored, text_in, text_out

if TYPE_CHECKING:
    from .keeping import Keeping
    from .view import View

log = logging.getLogger(__name__)


class Carry:
    """Sessions' answers and files to and from the disk cache."""

    def __init__(self, view: View, keeping: Keeping) -> None:
        self.view, self.keeping = view, keeping

    def save(self, s: Loaded) -> bool:
        """Write what session ``s`` answered, and its whole-session files, to the disk cache
        (in its thread), when they are what a render of its file as it is now gives: not a
        ``conversation.md`` whose text is not (see ``Conversation.exact``), not of a
        file that changed since it was read (its ctime moved: a rewrite that kept size and
        mtime too). A fork's ``parent`` link, which follows other files, is saved with what
        it led to, and checked again at its first use (``kept``)."""
        sf = self.view.store.known(s.path)
        if self.view.disk is None or sf is None or s.ident is None:
            return False
        held = self.keeping.answers.get(s.path, s.ident)
        conv = s.memo.conversation
        if held is None or (conv is not None and not conv.exact(s.lasting_problems())):
            return False
        try:
            st = sf.stat()
        except Unreadable:
            return False
        if Identity.of(st) != s.ident or st.st_ctime_ns != s.ctime_ns:
            return False  # it moved on: what s answered is not what it answers now
        files = self.keeping.whole_files(s, again=True)
        old = held.stored  # the entry these answers came from: of this very file
        if old is not None:
            for kind, (_, size) in old.files.items():
                if kind not in files:  # (not rendered in this mount: rg asked for links)
                    copied = functools.partial(self.view.disk.copy, old, kind, size)
                    files[kind] = ([(0, copied, False)], size)
        made = (held.count, frozenset(files))
        if held.saved == made:
            return True  # (on disk as it is)
        saved = functools.partial(self._saved, s.path, s.ident, held)
        answers = self._answers_out(s, held)
        done = self.view.disk.save(s.path, file_ident(st), answers, files, saved)
        if done:
            held.saved = made
        return done

    def _saved(self, path: str, ident: Identity, held: Answers, stored: Stored) -> None:
        """The writer saved the entry of ``held``: a read the kernel's page cache cannot
        answer is read from there, not parsed."""
        if self.keeping.answers.peek(path, ident) is held:
            held.stored = stored

    def save_all(self, until: float = math.inf) -> int:
        """Save every parsed session (at unmount), until ``until`` (``time.monotonic``); how
        many were offered."""
        saved = 0
        for path in self.view.store.loaded_paths():
            if time.monotonic() > until:
                break
            saved += self.save_one(path, until)
        return saved

    def save_one(self, path: str, until: float = math.inf) -> bool:
        """Save session ``path`` if it is parsed (blocking: at unmount, or ``--warm`` once it
        rendered it), with what ``rg`` will ask of its links, as a drop keeps them."""
        sf = self.view.store.known(path)
        s = sf.loaded if sf is not None else None
        if s is None or sf is None or not sf.lock.acquire(timeout=1):
            return False  # (a thread abandoned at unmount may hold it)
        try:
            self.keeping.keep_links(s)
            done = self.save(s)
            if not done and self.view.disk is not None and self.view.disk.busy():
                # the writer was behind: wait for it, once
                done = self.view.disk.settle(until - time.monotonic()) and self.save(s)
            return done
        except Exception:  # (a bug: the other sessions are still saved)
            log.exception("%s: not saved to the disk cache", path)
            return False
        finally:
            sf.lock.release()

    def on_disk(self, path: str) -> bool:
        """Whether the disk cache holds session ``path`` as its file is now (blocking)."""
        if self.view.disk is None:
            return False
        try:
            st = self.view.store.files.lstat(path)
        except Unreadable:
            return False
        return self.view.disk.holds(path, file_ident(st))

    def _answers_out(self, s: Loaded, held: Answers) -> dict[str, Any]:
        """``held`` as JSON: keys instead of inode numbers (another mount numbers them
        anew), an entry's epoch as "the session's", a fork's parent as the file its header
        names and where its link led (``_fork_in``), and each stat once, in a table the
        rest name by its row (reading them back is much of a cold walk of the cache: a
        listing's rows repeat what ``getattr`` answered)."""

        def key(k: Key | None) -> list[Any] | None:
            if k is None or k.path != s.path or k.kind not in KINDS:
                return None
            return [k.kind, text_out(k.eid), k.k, bool(k.eid) and k.epoch == s.epoch]

        table: list[list[Any]] = []
        rows: dict[Attr, int | None] = {}

        def row(a: Attr) -> int | None:
            if a not in rows:
                k = key(a.key)
                rows[a] = None if k is None else len(table)
                if k is not None:
                    table.append([k, a.mode, a.size, a.mtime_ns, a.nlink, a.immutable,
                                  a.scratch, a.uid, a.gid])  # fmt: skip
            return rows[a]

        def at(ino: int) -> list[Any] | None:
            return key(self.view.inodes.key_of(ino))

        out = text_out
        listings = []
        for folder, names in held.listings.items():
            named = [[out(n), row(a)] for n, a in names.items()]
            where = at(folder)
            if where is not None and all(r[1] is not None for r in named):
                listings.append([where, named])
        links = [[at(i), target.decode("latin-1")] for i, target in held.links.items()]
        found = [[at(f), out(n), row(a)] for (f, n), a in held.found.items()]
        fork = held.fork
        link = None if fork is None or fork.link is None else out(fork.link)
        return {
            "fork": None if fork is None else [out(fork.named), link],
            "attrs": [i for i in map(row, held.attrs.values()) if i is not None],
            "listings": listings,
            "links": [r for r in links if r[0] is not None],
            "found": [r for r in found if r[0] is not None and r[2] is not None],
            "absent": [[at(f), out(n)] for f, n in held.absent if at(f) is not None],
            "table": table,
        }

    def from_disk(self, sf: SessionFile, st: os.stat_result) -> Answers | None:
        """The answers the disk cache holds for ``sf``'s file as ``st`` says it is now (a
        fresh mount's first walk of a session it has not parsed)."""
        assert self.view.disk is not None
        stored = self.view.disk.load(sf.path, file_ident(st))
        if stored is None:
            return None
        try:
            held = self._answers_in(sf, Identity.of(st), stored.answers)
        except Exception as err:  # (whatever it holds: the session answers for itself)
            log.warning("%s: its disk cache entry is not sound (%r): removed", sf.path, err)
            self.view.disk.drop(sf.path)
            return None
        held.stored = dataclasses.replace(stored, answers=msgspec.Raw())  # (not them twice)
        log.debug("%s: answers from the disk cache", sf.path)
        return self.keeping.answers.put(sf.path, held)

    def _answers_in(self, sf: SessionFile, ident: Identity, raw: msgspec.Raw) -> Answers:
        """What :meth:`_answers_out` wrote, numbered in this mount (anything else in it
        raises: the entry is then not used). Decoding checks every type; what is left is
        making nodes of it, once per key (a listing names the keys of the table's rows):
        once per session in a later mount's cold walk, about a quarter of the handlers' time."""
        saved = _SAVED.decode(raw)
        path, epoch, name, ino = sf.path, sf.epoch, text_in, self.view.ino
        nodes: dict[_SavedKey, tuple[Key, int]] = {}

        def node(v: _SavedKey) -> tuple[Key, int]:
            got = nodes.get(v)
            if got is None:
                saved_kind, eid, n, of_entry = v
                kind = Kind(saved_kind)  # (ValueError for one that is not)
                k = _new(Key, (kind, path, epoch if of_entry else 0, name(eid), n))
                got = nodes[v] = (k, ino(k))
            return got

        table = [_new(Attr, (i, *r[1:], k)) for r in saved.table for k, i in [node(r[0])]]
        row = dict(enumerate(table)).__getitem__  # (a KeyError for a row it has not)
        held = Answers(ident, fork=self._fork_in(path, saved.fork))
        held.attrs = {a.ino: a for a in map(row, saved.attrs)}
        for folder, rows in saved.listings:
            held.listings[node(folder)[1]] = {name(n): row(i) for n, i in rows}
        for at, target in saved.links:
            held.links[node(at)[1]] = target.encode("latin-1")
        for at, n, i in saved.found:
            held.found[(node(at)[1], name(n))] = row(i)
        for at, n in saved.absent:
            held.absent.add((node(at)[1], name(n)))
        held.count = len(held.attrs) + sum(map(len, held.listings.values())) + len(held.found)
        return held

    def _fork_in(self, path: str, raw: tuple[str, str | None] | None) -> Fork | None:
        """A saved fork's parent link, to be looked for again at its first use (``kept``);
        the fork is one whose listing a session file coming or going changes."""
        if raw is None:
            return None
        named, link = raw
        self.view.changes.forks.add(path)
        return Fork(text_in(named), None if link is None else text_in(link), -math.inf)

    def from_disk_file(self, later: Later, key: Key) -> bool:
        """Serve ``later`` from the disk cache entry its answers came from, if any."""
        held = self.keeping.answers.peek(key.path, later.ident)
        stored = held.stored if held is not None else None
        if stored is None or self.view.disk is None:
            return False
        text = self.view.disk.reader(stored, key.kind, later.size)
        if text is None:
            return False
        log.debug("%s of %s: read from the %s", key.kind, key.path, self.view.disk.name)
        later.inner = OnDisk(self.view.disk, text, later.size)
        return True


#: A node as :meth:`Carry._answers_out` saves it: kind, entry id, k, whether of an entry.
_SavedKey = tuple[str, str, int, bool]


class _Saved(msgspec.Struct, frozen=True):
    """What :meth:`Carry._answers_out` saves, as a later mount reads it back (msgspec checks
    each type as it decodes: an int is never a bool here, nor a bool an int)."""

    fork: tuple[str, str | None] | None = None
    attrs: list[int] = []
    listings: list[tuple[_SavedKey, list[tuple[str, int]]]] = []
    links: list[tuple[_SavedKey, str]] = []
    found: list[tuple[_SavedKey, str, int]] = []
    absent: list[tuple[_SavedKey, str]] = []
    table: list[tuple[_SavedKey, int, int, int, int, bool, bool, int, int]] = []


_SAVED = msgspec.json.Decoder(_Saved)
#: Makes a named tuple of its fields without the Python-level ``__new__`` (which checks
#: nothing more: the fields are the decoder's checked values)
_new = tuple.__new__
