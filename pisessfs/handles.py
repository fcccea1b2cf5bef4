"""What an open file reads until it is closed, whatever happens to its session meanwhile.

This module owns the read handles: bytes held for one open (a message file, tree.txt),
the session file through a descriptor of its own (``tail -f`` sees appends), conversation.md
by range (its groups made again where its :class:`~pisessfs.onefile.Conversation` no longer
holds them), and a handle opened from kept answers whose bytes are made at its first read.
The view makes them (``View.snapshot``, ``Keeping.later``); the adapter reads them.
"""

from __future__ import annotations

import functools
import os
from collections import Counter, OrderedDict
from collections.abc import Callable

from . import onefile
from .errors import Busy
from .sessions import Identity
from .store import DiskStore

INLINE_GROUP = 256 << 10  # bytes of conversation.md made again on the loop (more: a thread)


class Snapshot:
    """Bytes held for one open file."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)

    def read(self, off: int, size: int) -> bytes:
        return self.data[off : off + size]

    def close(self) -> None:
        return None


class OpenFiles:
    """The read handles open now, each with its file's inode, and how many each file has
    (the adapter gives the kernel a file's first bytes at an open only while no other
    handle of it is open: a read in flight holds the pages, ``Operations._push``)."""

    def __init__(self) -> None:
        self._by_fh: dict[int, tuple[int, Snapshot]] = {}
        self._per_ino: Counter[int] = Counter()

    def add(self, fh: int, ino: int, snap: Snapshot) -> None:
        self._by_fh[fh] = (ino, snap)
        self._per_ino[ino] += 1

    def get(self, fh: int) -> Snapshot | None:
        got = self._by_fh.get(fh)
        return None if got is None else got[1]

    def __getitem__(self, fh: int) -> Snapshot:
        return self._by_fh[fh][1]

    def pop(self, fh: int) -> Snapshot | None:
        got = self._by_fh.pop(fh, None)
        if got is None:
            return None
        ino, snap = got
        self._per_ino[ino] -= 1
        if not self._per_ino[ino]:
            del self._per_ino[ino]
        return snap

    def alone(self, ino: int) -> bool:
        """Whether file ``ino`` has one handle open (the one just added)."""
        return self._per_ino[ino] == 1

    def __len__(self) -> int:
        return len(self._by_fh)


class Later(Snapshot):
    """A whole-session file opened from kept answers: what it reads is made at the first
    read (``Keeping.fill``), of the size the kernel was told."""

    def __init__(self, ino: int, ident: Identity, size: int, grows: bool = False) -> None:
        super().__init__(b"")
        self.ino, self.ident, self.size = ino, ident, size
        self.grows = grows  # conversation.md: it only grows, and an open reader follows it
        self.inner: Snapshot | None = None

    def read(self, off: int, size: int) -> bytes:
        assert self.inner is not None
        return self.inner.read(off, size)

    def behind(self, off: int, size: int) -> bool:
        """Whether a read past its end must look for what was added since (``tail -f``):
        bytes made from the store stop where they were kept; those made
        from the session (:class:`ConvSnapshot`) follow it by themselves."""
        inner = self.inner
        return (
            self.grows
            and inner is not None
            and not isinstance(inner, ConvSnapshot)
            and off + size > inner.size
        )

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


class OnDisk(Snapshot):
    """The ``size`` bytes of a file kept in the disk cache (text ``text`` of ``kept``), read
    in place at each read."""

    def __init__(self, kept: DiskStore, text: int, size: int) -> None:
        super().__init__(b"")
        self.kept, self.text, self.size = kept, text, size

    def read(self, off: int, size: int) -> bytes:
        return self.kept.read(self.text, off, max(0, min(size, self.size - off)))


class _Parts(Snapshot):
    """A file read in parts: a read joins what :meth:`chunk` gives from each part it spans."""

    def read(self, off: int, size: int) -> bytes:
        end = min(off + size, self.size)
        out: list[bytes] = []
        while off < end:
            got = self.chunk(off, end)
            if not got:
                break
            out.append(got)
            off += len(got)
        return b"".join(out)

    def chunk(self, off: int, end: int) -> bytes:
        """Bytes from ``off`` (< ``end``) to the end of its part or ``end``."""
        raise NotImplementedError


class ConvSnapshot(_Parts):
    """An open conversation.md: the first ``size`` bytes of a session's conversation, read
    from the groups it holds and, for the others, from groups made again for this handle
    (``remade``; the two last kept: a read spans at most two big ones). With ``defer``, a
    big group is made in a thread: :class:`Busy` (read again after its work)."""

    def __init__(
        self,
        conv: onefile.Conversation,
        size: int,
        remade: Callable[[int], bytes],
        defer: bool,
    ) -> None:
        super().__init__(b"")
        self.conv, self.size, self.remade, self.defer = conv, size, remade, defer
        self._mine: OrderedDict[int, bytes] = OrderedDict()

    def read(self, off: int, size: int) -> bytes:
        if off + size > self.size:
            # conversation.md only grows at its end, and the same bytes stay below it: a
            # reader holding it open (tail -f, less +F) reads what was added since it opened
            # (rendered when a stat asked for its new size).
            self.size = max(self.size, self.conv.length())
        return super().read(off, size)

    def chunk(self, off: int, end: int) -> bytes:
        while True:
            try:
                return self.conv.chunk(off, end, self._mine)
            except onefile.Missing as m:
                work = functools.partial(self._make, m.index)
                if self.defer and self.conv.groups[m.index].size > INLINE_GROUP:
                    raise Busy(work) from None
                work()

    def _make(self, index: int) -> None:
        data = self.remade(index)
        self._mine[index] = data
        while len(self._mine) > 2:
            self._mine.popitem(last=False)
        self.conv.keep(index, data)


class FileSnapshot(Snapshot):
    """The first ``size`` bytes of a file, read through a descriptor opened with the file.

    Like ``tail -f`` expects, it also reads what is appended while it is open, as long as the
    bytes it knows are still the file's last ones there (a file rewritten in place is another
    version: its reader keeps what it had)."""

    def __init__(self, fd: int, size: int, window: bytes) -> None:
        super().__init__(b"")
        self.fd = fd
        self.size = size
        self.window = window

    def read(self, off: int, size: int) -> bytes:
        if off + size > self.size:
            self._grow()
        return os.pread(self.fd, max(0, min(size, self.size - off)), off)

    def _grow(self) -> None:
        now = os.fstat(self.fd).st_size
        w = len(self.window)
        if now > self.size and os.pread(self.fd, w, self.size - w) == self.window:
            self.size = now
            tail = os.pread(self.fd, w, now - w)
            self.window = tail

    def close(self) -> None:
        os.close(self.fd)
