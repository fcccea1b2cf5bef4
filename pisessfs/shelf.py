"""The shelf: the whole-session files of sessions the parse cache dropped, kept compressed.

A walk over more sessions than the parse cache holds drops each session once it is walked;
what its folders answered is kept (``kept``), and its files' bytes are left to the kernel's
page cache. That cache does not always keep them: memory pressure, or a memory manager that
pages out what was idle for a minute (this project's VMs run one), and a repeated ``grep -r``
then parsed and rendered every session whose pages went (103 s against 16 s for a year of
sessions). Rendered text compresses to about a third, so this module keeps it: when a session
is dropped, the view offers its ``conversation.md``, ``tree.txt`` and ``session.json`` as they
were told to the kernel, tied to the identity of the file they were made from; a read the
page cache cannot answer is then served from here by decompressing a part (at most 128 KiB,
well under a millisecond) instead of parsing the session.

The shelf shares the parse cache's byte cap (the store counts it) and holds at most
:data:`SHARE` of it, least recently used dropped first. Compression runs in a thread of its
own (zlib gives up the GIL: the second core does it), never on the caller's.

It is a plain store, FUSE-free: the view decides what to offer and when a shelved file may
serve a read.
"""

from __future__ import annotations

import bisect
import logging
import queue
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sessions import Identity

log = logging.getLogger(__name__)

#: The share of the cache cap the shelf may hold (the parse cache has the rest, at least).
SHARE = 0.5
#: Uncompressed bytes waiting for the packer at most (more offered meanwhile: not shelved).
#: A cold walk drops sessions at a few MB/s of text; the packer compresses about 100 MB/s.
QUEUE_BYTES = 16 << 20
#: Bytes of a part at most: a read decompresses one part at a time, on the event loop.
PART_BYTES = 128 << 10
PART_COST = 100  # bytes a part's record costs
ITEM_COST = 300  # bytes a shelved file's record costs

#: One part of a file offered: its offset, its bytes, and whether they are compressed already.
Part = tuple[int, bytes, bool]


@dataclass(frozen=True, slots=True)
class Packed:
    """A file's bytes as compressed parts: part ``i`` holds the bytes from ``starts[i]``."""

    starts: tuple[int, ...]
    blobs: tuple[bytes, ...]
    size: int
    held: int = 0  # what it takes, as counted against the cap (``pack`` counts it once)

    def part(self, off: int) -> tuple[int, int]:
        """The index of the part that holds byte ``off``, and that part's first byte."""
        i = bisect.bisect_right(self.starts, off) - 1
        return i, self.starts[i]


def pack(parts: list[Part], size: int) -> Packed:
    """Compress what is not yet, in parts of at most :data:`PART_BYTES`."""
    starts: list[int] = []
    blobs: list[bytes] = []
    for off, data, packed in parts:
        if packed:
            starts.append(off)
            blobs.append(data)
            continue
        for i in range(0, max(len(data), 1), PART_BYTES):
            starts.append(off + i)
            blobs.append(zlib.compress(data[i : i + PART_BYTES], 1))
    held = sum(map(len, blobs)) + PART_COST * len(blobs) + ITEM_COST
    return Packed(tuple(starts), tuple(blobs), size, held)


@dataclass(slots=True)
class Shelved:
    """The files shelved of one session, all made from the file ``ident`` describes."""

    ident: Identity
    files: dict[str, Packed] = field(default_factory=dict)  # kind -> its bytes

    def nbytes(self) -> int:
        return sum(p.held for p in self.files.values())


class Shelf:
    """Packed files by session file, least recently used first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.bytes = 0  # what it holds, as counted against the cap (read without the lock)
        self._items: OrderedDict[str, Shelved] = OrderedDict()
        self._lock = threading.Lock()
        # (path, kind, identity, parts, size, uncompressed bytes among the parts)
        self._todo: queue.Queue[tuple[str, str, Identity, list[Part], int, int]] = queue.Queue()
        self._waiting = 0  # uncompressed bytes in the queue
        self._thread: threading.Thread | None = None

    def offer(self, path: str, ident: Identity, kind: str, parts: list[Part], size: int) -> bool:
        """Shelve file ``kind`` of session ``path`` (``size`` bytes in ``parts``), once the
        packer has compressed it. False when there is no room for it now."""
        raw = sum(len(data) for _, data, packed in parts if not packed)
        with self._lock:
            if self.budget <= 0 or self._waiting + raw > QUEUE_BYTES:
                return False
            self._waiting += raw
            if self._thread is None:
                self._thread = threading.Thread(target=self._pack, name="shelf", daemon=True)
                self._thread.start()
        self._todo.put((path, kind, ident, parts, size, raw))
        return True

    def busy(self) -> bool:
        """Whether the packer has files still to compress (read without the lock)."""
        return self._waiting > 0

    def _pack(self) -> None:
        while True:
            path, kind, ident, parts, size, raw = self._todo.get()
            try:
                packed = pack(parts, size)
                self._put(path, kind, ident, packed)
                log.debug("%s: %s shelved (%d bytes in %d)", path, kind, size, packed.held)
            except Exception:  # a bug here must not end the thread: log it, shelve nothing
                log.exception("shelving %s of %s failed", kind, path)
            finally:
                with self._lock:
                    self._waiting -= raw
                self._todo.task_done()

    def _put(self, path: str, kind: str, ident: Identity, packed: Packed) -> None:
        with self._lock:
            item = self._items.pop(path, None)
            if item is not None:
                self.bytes -= item.nbytes()
                if item.ident != ident:
                    item = None  # of another version of the file: none of it holds
            item = item or Shelved(ident)
            item.files[kind] = packed
            self._items[path] = item
            self.bytes += item.nbytes()
            while self.bytes > self.budget and self._items:
                self.bytes -= self._items.popitem(last=False)[1].nbytes()

    def get(self, path: str, ident: Identity, kind: str) -> Packed | None:
        """File ``kind`` of ``path`` if it was shelved from the file ``ident`` describes."""
        with self._lock:
            item = self._items.get(path)
            if item is None or item.ident != ident:
                return None
            self._items.move_to_end(path)
            return item.files.get(kind)

    def drop(self, path: str) -> None:
        """Session ``path`` changed or went: none of its files holds any more."""
        with self._lock:
            item = self._items.pop(path, None)
            if item is not None:
                self.bytes -= item.nbytes()

    def settle(self) -> None:
        """Wait until everything offered is shelved or refused (tests, scripts)."""
        self._todo.join()

    def __len__(self) -> int:
        return len(self._items)
