"""Answers kept past the parse cache: what a session's folders answered (listings,
attributes, link targets, names that do not exist), for its file as it was, so that a
session the parse cache dropped answers a walk without a parse, and handles opened from those
answers read their bytes from where they are kept (the session's rendering, the store).

Answers are gathered while a session is parsed (``holding``), answer for it while its file
is unchanged (one ``stat`` vouches for them for :data:`KEPT_FRESH` seconds) and after it is
dropped (``evicted`` keeps what ``rg`` will ask of its links, then saves it to the disk cache
with its files). Whether a node's answer may be kept is its kind's call
(``NodeKind.holds``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeGuard

from .errors import Changed, NotFound, ViewError
from .handles import Later, Snapshot
from .inodes import Attr, Key
from .kept import Answers, Kept
from .kind import Kind
from .layout import KINDS, RAW, WHOLE_KINDS, fork_holds, fork_of
from .loaded import RENDERED, Identity, Loaded
from .names import VIEW_SUFFIX, id_name
from .sessions import SessionFile, Unreadable
from .store import File

if TYPE_CHECKING:
    from .view import View

log = logging.getLogger(__name__)

#: Seconds a stat of a session's file vouches for its kept answers: a walk asks
#: each session six times within a millisecond or so; a change the watcher has not told of
#: yet shows after this at most (DESIGN's aim for an append: 100 ms).
KEPT_FRESH = 0.1


class _Hot(NamedTuple):
    """The session :meth:`Keeping.kept` found answers for last. A walk asks each session's
    nodes about twenty times in a row; finding its answers again (a ``stat`` within
    :data:`KEPT_FRESH`, its identity, the kept answers under their lock) was an eighth of
    the instructions of a later mount's cold walk. They are the same while the ``stat`` that
    vouched for them still does and no answers were dropped or put in since."""

    sf: SessionFile
    seen: tuple[os.stat_result, float]
    version: int  # ``Kept.version`` when they were found
    held: Answers

    def holds(self, keeping: Keeping) -> bool:
        sf = self.sf
        return (
            sf.seen is self.seen
            and not sf.recheck
            and keeping.answers.version == self.version
            and keeping.view.store.known(sf.path) is sf
            and time.monotonic() - self.seen[1] < KEPT_FRESH
        )


class Keeping:
    """The answers kept per session file, and what serves handles opened from them."""

    def __init__(self, view: View) -> None:
        self.view = view
        # what sessions' nodes answered, per file identity: the parse cache's (``kept``)
        self.answers: Kept = view.store.answers
        self._hot: _Hot | None = None  # the session ``kept`` answered for last
        self.evicting: Loaded | None = None  # the session being dropped (``evicted``)

    def holding(self, key: Key, children: list[Key] | None = None) -> Answers | None:
        """Where to keep what node ``key`` (and ``children``, its listing) answered just
        now, when every one of them answered what the file as it was read gives."""
        sf = self.view.store.known(key.path)
        s = sf.loaded if sf is not None else None
        if s is None or s.ident is None:
            return None
        for k in [key, *(children or ())]:
            if k.path != key.path or not KINDS[k.kind].holds(self.view, s, k):
                return None
        return self.answers.of(key.path, s.ident, fork_of(self.view, s))

    def kept(self, ino: int) -> Answers | None:
        """What a node of a session answered, when its file is still the file they were
        made from (one ``stat``, or one made in the last :data:`KEPT_FRESH` seconds); None:
        ask the session. A session the parse cache dropped answers a walk from these alone;
        a parsed one too, while its file is unchanged: a warm walk's listing of a session
        folder was two fifths of the daemon's own time, made again at every ``opendir``."""
        key = self.view.key(ino)
        if not KINDS[key.kind].kept:
            return None
        hot = self._hot
        if hot is not None and hot.sf.path == key.path and hot.holds(self):
            return hot.held
        sf = self.view.store.known(key.path)
        on_disk = self.view.disk is not None and self.view.disk.has(key.path)
        if sf is None and on_disk:
            sf = self.view.store.session(key.path)  # (a fresh mount: the disk cache may answer)
        if sf is None or sf.recheck:
            return None
        try:
            st = sf.recent(KEPT_FRESH)
        except Unreadable:
            return None  # the session answers that itself
        seen, version = sf.seen, self.answers.version
        ident = Identity.of(st)
        held = self.answers.get(key.path, ident)
        if held is None and on_disk:
            held = self.view.carry.from_disk(
                sf, st
            )  # (put in: the next call finds them kept, and hot)
        if (
            held is not None
            and held.fork is not None
            and not fork_holds(self.view, key.path, held.fork)
        ):
            self.answers.drop(key.path)  # its parent came or went: the fork answers again
            if held.stored is not None and self.view.disk is not None:
                self.view.disk.drop(key.path)  # (else each request would load the entry again)
            return None
        if held is not None and held.fork is None and seen is not None and seen[0] is st:
            self._hot = _Hot(sf, seen, version, held)
        return held

    def kept_attr(self, ino: int) -> Attr | None:
        held = self.kept(ino)
        return held.attrs.get(ino) if held is not None else None

    def kept_child(self, parent: int, name: str) -> Attr | None:
        """What a lookup answered for a session whose file is unchanged (None: ask it;
        NotFound: it has no such name)."""
        held = self.kept(parent)
        if held is None:
            return None
        if held.lacks(parent, name):
            raise NotFound(name)
        return held.child(parent, name)

    def kept_listing(self, ino: int) -> list[tuple[str, Attr]] | None:
        held = self.kept(ino)
        names = held.listings.get(ino) if held is not None else None
        return list(names.items()) if names is not None else None

    def kept_link(self, ino: int) -> bytes | None:
        held = self.kept(ino)
        return held.links.get(ino) if held is not None else None

    def later(self, ino: int) -> Later | None:
        """A handle for a whole-session file of a session whose file is unchanged since the
        kernel was told its size: its bytes are made only when a read comes (the page cache
        usually has them: a repeated walk then parses nothing)."""
        if self.view.key(ino).kind not in WHOLE_KINDS:
            return None
        held = self.kept(ino)
        a = held.attrs.get(ino) if held is not None else None
        if held is None or a is None:
            return None
        key = self.view.key(ino)
        later = Later(ino, held.ident, a.size, KINDS[key.kind].append_only)
        return later if later.grows or self._fillable(later, key, held) else None

    def _fillable(self, later: Later, key: Key, held: Answers) -> bool:
        """Whether tree.txt or session.json opened from kept answers can be read as the
        file it was opened for, whatever the session file does meanwhile (they change in
        the middle: a read of a newer version past the size the kernel was told would be
        another file cut short). Filled here from the rendering of that file when its
        session holds one; else from the store at the first read. False:
        the open renders the file as it is now."""
        sf = self.view.store.known(key.path)
        s = sf.loaded if sf is not None else None
        if s is not None and s.ident == later.ident:
            hit = s.memo.renders.get(key.kind)
            if hit is None or hit[0] != s.version or len(hit[1]) != later.size:
                return False
            later.inner = Snapshot(hit[1])
            return True
        return held.stored is not None

    def evicted(self, s: Loaded) -> None:
        """Session ``s`` is about to be dropped from the parse cache (it is still its
        state, under its lock): what a walk will ask of it again is kept without it, and
        its files go to the store (on disk, or in memory), so that a read the page cache
        cannot answer reads them there instead of parsing the session again."""
        self.evicting = s
        try:
            self.keep_links(s)
            self.view.carry.save(s)
        finally:
            self.evicting = None

    def keep_links(self, s: Loaded) -> None:
        """Keep, with the session's answers, what ``rg`` asks of its links and of where
        they lead, which ``grep -r`` never asks (the first rg after a grep parsed every
        dropped session again, and rendered every branch): the target of each link its
        folders listed (a fork's ``parent`` is checked at each use, as ever),
        ``.session.jsonl``, and the folder and one-file view in ``nodes/`` of each listed
        leaf and of the resume leaf, of the sizes conversation.md's render gave (nothing
        is rendered here)."""
        held = self.answers.get(s.path, s.ident) if s.ident is not None else None
        if held is None:
            return
        for names in list(held.listings.values()):
            for a in names.values():
                if stat.S_ISLNK(a.mode) and a.ino not in held.links and held.room():
                    with contextlib.suppress(ViewError):  # (a parent gone meanwhile)
                        held.links[a.ino] = KINDS[a.key.kind].target(self.view, a.key)
        wanted = [(Key(Kind.SESSION, s.path), RAW, Key(Kind.RAW, s.path))]
        sizes = s.memo.branch_sizes
        leaves = set(self.view.texts.listed(s))
        if s.index.resume is not None:
            leaves.add(s.index.resume)
        for leaf in leaves & sizes.keys():
            name = id_name(leaf)
            for kind, shown in ((Kind.BRANCH, name + VIEW_SUFFIX), (Kind.ENTRY, name)):
                wanted.append((Key(Kind.NODES, s.path), shown, Key(kind, s.path, s.epoch, leaf)))
        for folder, shown, key in wanted:
            n = self.view.inodes.known(folder)
            if n is not None and held.child(n, shown) is None and held.room():
                with contextlib.suppress(ViewError):
                    held.found[(n, shown)] = self.view.getattr(self.view.ino(key))
        if held.fork is not None:
            now = fork_of(self.view, s)
            if now is None or now.link != held.fork.link:
                self.answers.drop(s.path)  # its parent came or went: ``parent`` led elsewhere

    def whole_files(self, s: Loaded, again: bool = False) -> dict[str, File]:
        """The whole-session files of ``s`` as the kernel was told them, in parts (some
        compressed), by kind (under its lock). A big session's old groups of conversation.md
        that are held in no way are not there, or (``again``) are what making them again
        from a copy of ``s`` gives, when whoever takes the parts asks (a thread)."""
        out: dict[str, File] = {}
        conv = s.memo.conversation
        if conv is not None and conv.done == len(s.parser.entries):
            copies: list[Loaded] = []

            def made_again(index: int) -> Callable[[], bytes]:
                if not copies:
                    copies.append(s.frozen())  # (appends do not change it meanwhile)
                return functools.partial(self.view.wholes.remade, copies[0], conv, index)

            parts = conv.parts(made_again if again else None)
            if parts is not None:
                out[Kind.CONVERSATION.value] = (parts, conv.size)
        for kind in RENDERED:  # tree.txt and session.json, when of the file as it is
            hit = s.memo.renders.get(kind)
            if hit is not None and hit[0] == s.version:
                out[kind.value] = ([(0, hit[1], False)], len(hit[1]))  # (JSON keys: str)
        return out

    def from_store(self, later: Later) -> bool:
        """Make the bytes of ``later`` from the store, when its file is there as the kernel
        was told it (then its session is not parsed). False: :meth:`fill` must."""
        return self.view.carry.from_disk_file(later, self.view.key(later.ino))

    def fill(self, later: Later) -> None:
        """Make the bytes of ``later`` (its session brought up to date by ``ready``).
        conversation.md only grows; the other files must be of the very file the kernel was
        told the size of."""
        key = self.view.key(later.ino)
        s = self.view.session(key)
        inner = self.view.snapshot(later.ino)
        same = s.ident == later.ident and inner.size == later.size
        grown = KINDS[key.kind].append_only and inner.size >= later.size
        if not (same or grown):
            inner.close()
            log.warning("%s: changed between open and read: answered ESTALE", key.path)
            raise Changed(key.path)
        later.inner = inner

    def grew(self, snap: Snapshot, off: int, size: int) -> TypeGuard[Later]:
        """Whether a read of ``snap`` is one of a handle from kept answers past the end of
        what it holds (``Later.behind``), of a session file that grew since it was opened
        (``tail -f``), rather than the last page of the file as it was (the kernel reads
        whole pages)."""
        if not isinstance(snap, Later) or not snap.behind(off, size):
            return False
        sf = self.view.store.known(self.view.key(snap.ino).path)
        try:
            return sf is not None and Identity.of(sf.recent(KEPT_FRESH)) != snap.ident
        except (Unreadable, OSError):
            return False  # (gone: the reader keeps what it has)

    def catch_up(self, later: Later) -> None:
        """``later`` (conversation.md, made from the store) read past its
        end: from now on it reads the session's own, which has what was added since (its
        session brought up to date by ``ready``). Its first bytes are the same: the file only
        grows, and an entry renders the same forever."""
        key = self.view.key(later.ino)
        inner = KINDS[key.kind].opened(self.view, key)
        old = later.inner
        if old is None or inner.size < old.size:
            inner.close()  # (rewritten smaller since: the reader keeps the version it has)
            return
        later.inner = inner
        old.close()
