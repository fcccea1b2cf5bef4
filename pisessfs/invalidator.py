"""Telling the kernel what changed: the queue of invalidations the core asks for.

The core (``Changes.invalidations``) says which inodes, pages and names no longer hold; this
module sends them to the kernel from a task beside ``pyfuse3.main``, each batch in a worker
thread, never from inside a handler: the kernel may wait for requests in flight on the same
node before it answers, and those need the event loop (calling it from a handler deadlocks
the mount, fuse-notes.md §1.9). A save waits until what it changed was dropped
(``settled``), so the program that saved meets the new state at once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import pyfuse3
import trio

from . import view as v

log = logging.getLogger(__name__)

#: How long a save through the mount waits for the kernel to drop what it changed: an
#: invalidation takes well under a millisecond; one that hangs must not hang the editor's
#: close().
SETTLE_TIMEOUT = 2.0
BATCH = 64  # invalidations at most per trip to a worker thread
QUEUED = 10_000  # invalidations waiting at most (more: dropped, with a line in the log)
UNSETTLED = "a save answered before the kernel dropped what it changed"  # (tests look for it)

Item = tuple[int, str | None]


def _invalidate(batch: list[Item]) -> None:
    """Tell the kernel to drop each item's cache (in a worker thread): an inode's attributes
    (name None), with its pages (``PAGES``), or a name in a folder."""
    for ino, name in batch:
        try:
            if name is None or name == v.PAGES:
                pyfuse3.invalidate_inode(ino, name is None)
            else:
                pyfuse3.invalidate_entry(ino, os.fsencode(name))
        except OSError as err:  # the kernel had forgotten it, or the mount is going
            log.debug("invalidate %d %r: %s", ino, name, err)


class Invalidator:
    """The queue from the view's invalidations to the kernel, and who waits for it."""

    def __init__(self, view: v.View, dropped: Callable[[int], None]) -> None:
        """``dropped``: told of each inode whose pages or size the kernel is to drop."""
        self.view = view
        self.dropped = dropped
        self._send, self._recv = trio.open_memory_channel[Item](QUEUED)
        self._queued: set[Item] = set()  # sent, not yet done
        self._sent = 0  # invalidations sent to the task, ever
        self._done = 0  # of those, how many it has finished
        self._settling = trio.lowlevel.ParkingLot()  # saves waiting for theirs (settled)
        self._full_said = -60.0  # when "invalidation queue full" was last logged

    def drain(self) -> None:
        """Queue the invalidations the core asked for (never done inside a handler)."""
        queue = self.view.changes.invalidations
        while queue:
            item = queue.popleft()
            if item[1] is None or item[1] == v.PAGES:
                self.dropped(item[0])  # (its pages go, or its size changed)
            if item in self._queued:
                continue  # already on its way: a burst of appends asks for the same ones
            if log.isEnabledFor(logging.DEBUG):  # (what made the kernel ask again)
                log.debug("invalidate %d %r: %s", *item, self.view.inodes.key_of(item[0]))
            try:
                self._send.send_nowait(item)
                self._queued.add(item)
                self._sent += 1
            except trio.WouldBlock:
                now = time.monotonic()
                if now - self._full_said > 60:  # once a minute: a burst fills it many times
                    self._full_said = now
                    log.warning("invalidation queue full: the kernel may serve stale data briefly")
                queue.clear()

    async def run(self) -> None:
        """Drop the kernel caches the core says changed; runs beside ``pyfuse3.main``.

        Each batch goes in a worker thread. Mostly only attributes are dropped: files whose
        bytes change are read around the page cache (direct_io), except tree.txt and
        session.json opened from kept answers (``Keeping.later``), whose pages go too
        (``PAGES``); a read of them in flight is answered by the free loop meanwhile."""
        async for item in self._recv:
            batch = [item]  # what is queued by now, in one trip to a thread (a save's ten)
            while len(batch) < BATCH:
                try:
                    batch.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            self._queued.difference_update(batch)  # a change from now on asks again
            await trio.to_thread.run_sync(_invalidate, batch)
            self._done += len(batch)
            self._settling.unpark_all()

    async def settled(self) -> None:
        """Wait until the kernel has dropped what was queued so far, for at most
        :data:`SETTLE_TIMEOUT`.

        A save through the mount answers only then: the kernel keeps ``current``'s target,
        and the program that saved may walk that path again at once (``echo > current/n.md``
        twice must find the ``n.md`` it saved, in the leaf ``current`` now leads to)."""
        target = self._sent
        with trio.move_on_after(SETTLE_TIMEOUT):
            while self._done < target:
                await self._settling.park()
        if self._done < target:  # a stall of the saving program: what held the kernel?
            late = target - self._done
            log.warning("%s: %d invalidations not done in %.0f s", UNSETTLED, late, SETTLE_TIMEOUT)
