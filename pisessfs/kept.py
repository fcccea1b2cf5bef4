"""Answers kept for sessions the parse cache dropped: what a walk asks of a session folder.

A year of sessions is bigger than the parse cache, so a ``grep -r`` over all of them drops
each session before the next walk comes back to it, and every walk parsed and rendered the
whole corpus again (150 s for 1 GB with the default cap, against 18 s with a cap that holds
it all). What a walk asks of a session folder is small: the listings of the session folder,
``leaves/`` and ``nodes/`` with their attributes (the sizes of conversation.md, tree.txt and
session.json among them) and the links' targets; the text itself comes from the kernel's
page cache. This module keeps those answers per session file, tied to the identity of the
file they were made from (device, inode, size, mtime, owner and mode). While the file is
that file, they are what parsing it again would give; once it is not, they are dropped.
They are gathered while a session is parsed and answer for it then too: a warm walk of a
parsed session's folders is then no listing made again at every ``opendir``.

It is a plain store: the view decides what is worth keeping and when an answer may be used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .loaded import Identity

if TYPE_CHECKING:
    from .layout import Fork
    from .store import Stored
    from .view import Attr

#: Sessions whose answers are kept (least recently used dropped first); a few KiB each.
KEPT_SESSIONS = 50_000
#: Answers kept per session at most (a name of a listing counts as one): a branchy session
#: whose ``leaves/`` lists more is parsed again when walked.
KEPT_ANSWERS = 4096
#: What one answer costs, as counted against the cache's cap (a stat record, a dict slot,
#: a name: measured about 180 bytes in a walk of the fixtures).
ANSWER_COST = 200


class Tally:
    """The answers kept, counted (shared by every :class:`Answers` of one :class:`Kept`)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


@dataclass(slots=True)
class Answers:
    """What the nodes of one session answered, for the file as ``ident`` says it was."""

    ident: Identity
    attrs: dict[int, Attr] = field(default_factory=dict)  # inode -> stat
    listings: dict[int, dict[str, Attr]] = field(default_factory=dict)  # folder -> names
    links: dict[int, bytes] = field(default_factory=dict)  # link inode -> target
    # Names looked up that no listing shows (rg stats where each link leads: nodes/<id>,
    # nodes/<id>.md, .session.jsonl): (folder inode, name) -> stat
    found: dict[tuple[int, str], Attr] = field(default_factory=dict)
    # Names looked up that the folder does not have (those no such folder ever has, .git
    # and rg's ignore files, the kernel is told to remember: ``NodeKind.never``).
    absent: set[tuple[int, str]] = field(default_factory=set)
    fork: Fork | None = None  # a fork's: what its parent link answered
    count: int = 0
    stored: Stored | None = None  # the disk cache entry they came from (its files too)
    # What the last save to the disk cache had (``count`` and the files' kinds): the same
    # again is not written again (``--warm`` saves each session, a drop or unmount after).
    saved: tuple[int, frozenset[str]] | None = None
    tally: Tally | None = None  # of the answers kept, where these are (``Kept``)

    def room(self, n: int = 1) -> bool:
        """Whether ``n`` more answers may be kept (and count them if so)."""
        if self.count + n > KEPT_ANSWERS:
            return False
        self.count += n
        if self.tally is not None:
            self.tally.n += n
        return True

    def child(self, folder: int, name: str) -> Attr | None:
        names = self.listings.get(folder)
        hit = names.get(name) if names is not None else None
        return hit if hit is not None else self.found.get((folder, name))

    def lacks(self, folder: int, name: str) -> bool:
        """Whether a lookup of ``name`` in ``folder`` answered that there is no such name."""
        return (folder, name) in self.absent


class Kept:
    """:class:`Answers` by session file path, the least recently used dropped first past
    ``limit`` sessions or ``cap`` bytes (:data:`ANSWER_COST` each)."""

    def __init__(self, limit: int = KEPT_SESSIONS, cap: int = 1 << 62) -> None:
        self.limit, self.cap = limit, cap
        self._tally = Tally()
        self._by_path: OrderedDict[str, Answers] = OrderedDict()
        #: Changes at every answers dropped or put in (a caller that found some may use
        #: them again without asking while it is the same)
        self.version = 0
        # ``--warm`` drops sessions in a worker thread, which looks their answers up (``get``)
        # while the loop gathers others (``of``: it may push the oldest out meanwhile).
        self._lock = threading.Lock()

    def get(self, path: str, ident: Identity) -> Answers | None:
        """The answers for ``path`` if they were made from the file ``ident`` describes."""
        with self._lock:
            a = self._by_path.get(path)
            if a is None:
                return None
            if a.ident != ident:
                self._pop(path)  # the file changed: none of it holds any more
                return None
            self._by_path.move_to_end(path)
            return a

    def peek(self, path: str, ident: Identity) -> Answers | None:
        """The answers for ``path`` if made from the file ``ident`` describes, as they are
        (a handle opened before a change asks this: it must not drop the new answers)."""
        with self._lock:
            a = self._by_path.get(path)
            return a if a is not None and a.ident == ident else None

    def of(self, path: str, ident: Identity, fork: Fork | None = None) -> Answers:
        """The answers being gathered for ``path`` as the file ``ident`` (new ones when the
        file changed since the last were gathered, or a fork's parent link did)."""
        with self._lock:
            a = self._by_path.get(path)
            if a is not None and a.ident == ident and _link(a.fork) == _link(fork):
                if a.fork is not None and fork is not None:
                    a.fork.checked = max(a.fork.checked, fork.checked)
            else:
                a = self._add(path, Answers(ident, fork=fork))
            return a

    def put(self, path: str, answers: Answers) -> Answers:
        """Keep ``answers`` for ``path`` (read back from the disk cache)."""
        with self._lock:
            return self._add(path, answers)

    def _add(self, path: str, answers: Answers) -> Answers:
        """(Under the lock.) Keep ``answers``, the least recently used out past the limits."""
        self._pop(path)
        answers.tally = self._tally
        self._tally.n += answers.count
        self._by_path[path] = answers
        while len(self._by_path) > 1 and (len(self._by_path) > self.limit or self.bytes > self.cap):
            self._pop(next(iter(self._by_path)))
        return answers

    def _pop(self, path: str) -> None:
        """(Under the lock.) Drop the answers of ``path``, if any."""
        self.version += 1
        gone = self._by_path.pop(path, None)
        if gone is not None:
            self._tally.n -= gone.count
            gone.tally = None

    def drop(self, path: str) -> None:
        with self._lock:
            self._pop(path)

    @property
    def bytes(self) -> int:
        """What the answers kept take, as counted against the cache's cap."""
        return self._tally.n * ANSWER_COST

    def __len__(self) -> int:
        return len(self._by_path)


def _link(fork: Fork | None) -> tuple[str, str | None] | None:
    return None if fork is None else (fork.named, fork.link)
