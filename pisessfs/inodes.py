"""Inode numbers: which key each number names, and which numbers the kernel holds.

Inode numbers are stable for the life of the mount: a node's number is derived from its key
(kind, file, epoch, entry id, ...), so a name looked up again after the kernel forgot it gets
the number it had (``tail -F`` and ``find`` compare them). Only the numbers the kernel holds
are in the table, with its lookup counts, plus those named in the last moments: the
kernel's ``forget`` frees the rest (a year of sessions walked once would otherwise leave a
key per node ever seen). Keys of entry-derived nodes carry the session's epoch, so a
rewritten file never serves old bytes under an old inode.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Container, Iterator
from typing import NamedTuple

from .errors import NotFound
from .kind import Kind

ROOT_INO = 1
INO_MASK = (1 << 63) - 1
#: Numbers named but not (yet) handed to the kernel are dropped once this many more were
#: named after them, twice over (a listing's names are in its handle's attributes, with
#: their keys, until the kernel takes them: see ``hold``).
UNHELD_KEPT = 1 << 17


class Key(NamedTuple):
    kind: Kind  # what it is: layout.KINDS has its class
    path: str = ""  # project folder or session file
    epoch: int = 0
    eid: str = ""
    k: int = 0  # 0: the message file, n: its n-th image; a scratch node's serial


NO_KEY = Key(Kind.NONE)


class Attr(NamedTuple):
    """What ``stat`` shows; ``immutable`` nodes may be cached by the kernel for long.
    (A named tuple: a cold walk makes one per name it meets, four times as fast as a frozen
    dataclass.)"""

    ino: int
    mode: int
    size: int
    mtime_ns: int
    nlink: int
    immutable: bool
    scratch: bool = False  # a scratch name: the kernel asks again at every use
    uid: int = 0
    gid: int = 0
    key: Key = NO_KEY  # what the number names (``hold`` names it again after a sweep)


class Inodes:
    """Numbers by key and keys by number, with the kernel's lookup counts."""

    def __init__(self, lasting: Container[int]) -> None:
        """``lasting``: numbers that stay named while the kernel holds none of them (the
        scratch layer's nodes, while they live)."""
        self.lasting = lasting
        self._ino: dict[Key, int] = {Key(Kind.ROOT): ROOT_INO}
        self._keys: dict[int, Key] = {ROOT_INO: Key(Kind.ROOT)}
        self._held: dict[int, int] = {ROOT_INO: 1}  # inode -> the kernel's lookup count
        self._young: list[int] = []  # named since the last sweep, held or not
        self._old: list[int] = []  # named before it: the next sweep drops the unheld
        # The five above change together under this lock: ``--warm`` names nodes from a
        # worker thread (``_keep_links``) while the loop names, sweeps and scans them.
        self._naming = threading.Lock()

    def ino(self, key: Key) -> int:
        n = self._ino.get(key)
        if n is not None:
            return n  # (the common case: one dict read, no lock)
        with self._naming:
            n = self._ino.get(key)  # (named by another thread meanwhile)
            if n is None:
                if len(self._young) >= UNHELD_KEPT:
                    self._sweep()  # before naming: never the number about to be returned
                n = self._number(key)
                self._ino[key], self._keys[n] = n, key
                self._young.append(n)
            return n

    def _number(self, key: Key) -> int:
        """``key``'s number: its hash, unless another named key has that (then the next of a
        fixed sequence: still the same number for the same key while that one is named)."""
        n = hash(key) & INO_MASK
        while n <= ROOT_INO or n in self._keys:
            n = (n * 6364136223846793005 + 1442695040888963407) & INO_MASK
        return n

    def key(self, ino: int) -> Key:
        key = self._keys.get(ino)
        if key is None:
            raise NotFound(ino)
        return key

    def hold(self, a: Attr) -> None:
        """The kernel took a reply naming ``a`` (a lookup, an entry of a listing, a create):
        it holds the number until it forgets it. A number swept meanwhile is named again."""
        n = a.ino
        with self._naming:
            if n not in self._keys:
                self._keys[n] = a.key
                self._ino.setdefault(a.key, n)
            self._held[n] = self._held.get(n, 0) + 1

    def forget(self, ino: int, count: int) -> None:
        """The kernel dropped ``count`` of its references to ``ino``: a number it no longer
        holds leaves the table (a scratch node's stays while the node lives)."""
        with self._naming:
            left = self._held.get(ino, 0) - count
            if left > 0:
                self._held[ino] = left
                return
            self._held.pop(ino, None)
            if ino != ROOT_INO and ino not in self.lasting:
                self._unname(ino)

    @contextlib.contextmanager
    def pinned(self, ino: int) -> Iterator[None]:
        """Keep ``ino`` named while a request waits on work for it (a sweep could drop it)."""
        with self._naming:
            self._held[ino] = self._held.get(ino, 0) + 1
        try:
            yield
        finally:
            with self._naming:
                left = self._held.get(ino, 0) - 1
                if left > 0:
                    self._held[ino] = left
                else:
                    self._held.pop(ino, None)
                    self._young.append(ino)  # unheld again: a later sweep may drop it

    def named(self) -> tuple[int, int]:
        """How many numbers the table has, and how many of them the kernel holds (the
        ``--debug`` line of a forget says)."""
        return len(self._keys), len(self._held)

    def _sweep(self) -> None:
        """Drop the numbers named before the last sweep that the kernel does not hold
        (under ``_naming``)."""
        for n in self._old:
            if n not in self._held and n not in self.lasting:
                self._unname(n)
        self._old, self._young = self._young, []

    def _unname(self, ino: int) -> None:  # (under ``_naming``)
        key = self._keys.pop(ino, None)
        if key is not None and self._ino.get(key) == ino:
            del self._ino[key]

    def known(self, key: Key) -> int | None:
        """The inode of ``key`` if the kernel may have seen it (None: nothing to invalidate)."""
        return self._ino.get(key)

    def all_named(self) -> list[tuple[Key, int]]:
        """Every name and its number, as of now (a scan must not see another thread name)."""
        with self._naming:
            return list(self._ino.items())

    def known_of(self, kind: str) -> list[tuple[Key, int]]:
        """The nodes of ``kind`` the kernel may have seen (a scan: for an inotify overflow)."""
        return [(key, n) for key, n in self.all_named() if key.kind == kind]

    def release(self, ino: int) -> None:
        """A scratch node is freed: its number goes unless the kernel holds it."""
        with self._naming:
            if ino not in self._held:
                self._unname(ino)

    def key_of(self, ino: int) -> Key | None:
        """The key ``ino`` names, if it is named (no error)."""
        return self._keys.get(ino)
