"""``--warm``: render every session in the background after mounting, while nothing is asked.

A task beside the request loop of the adapter (``fuse_ops``): it lists each session folder
as a walk would, through the adapter's own listing, so its renders, kept answers and disk
cache entries are exactly a walk's; it pauses whenever a request came in the last
:data:`WARM_QUIET` seconds, and keeps the parse cache under its cap as it goes.
"""

from __future__ import annotations

import logging
import stat
import time
from typing import TYPE_CHECKING

import trio

from . import view as v
from .fuse_ops import Asked
from .kind import Kind
from .sessions import Unreadable

if TYPE_CHECKING:
    from .fuse_ops import Operations

log = logging.getLogger(__name__)

#: The next session is rendered only after this long without a request: a walk or an
#: editor the user runs meanwhile goes first.
WARM_QUIET = 0.2


class WarmUp:
    """The warm-up of one mount, and where it is (``state``, for ``pisessfs status``)."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.view = ops.view
        self.state = ""  # "": not asked for

    async def run(self) -> None:
        """``--warm``: list every session folder as a walk would, newest first, whenever no
        request came for :data:`WARM_QUIET`.

        Listing a session folder renders its files off the loop, and a session the cache
        drops later leaves its answers and its files (``Keeping.later``, the store): the first
        walk is then answered like a repeated one. Without the disk cache it stops when the
        cache is full (``Store.warm_room``). With it, it indexes every session instead: a
        session the cache holds as its file is now is skipped, every other one is rendered,
        saved there and dropped from memory at once (its answers are kept, its files read
        from the entry), so a first mount's first walk, and every later mount's, parses
        nothing. It never ends the mount: a failure here ends the warm-up, with a line in
        the log."""
        start, done, had, store = time.monotonic(), 0, 0, self.view.store
        cache = self.view.disk
        self.state = "listing the sessions"
        try:
            order = await self._warm_order()
            for at, key in enumerate(order):
                on_disk = cache is not None and cache.on and not cache.memory
                in_cache = f", {had} were in the disk cache" if on_disk else ""
                self.state = f"at {at} of {len(order)} sessions ({done} rendered{in_cache})"
                while time.monotonic() - Asked.last < WARM_QUIET or self._writing():
                    # (the store refuses what comes faster than it writes: those would be lost)
                    await trio.sleep(0.01 if self._writing() else WARM_QUIET)
                indexing = on_disk  # (a cache folder gone: as without)
                if not indexing and not store.warm_room():
                    self.state = f"the cache is full after {done} sessions"
                    log.info("warm-up: %s", self.state)
                    break
                made = await self._warm_one(key, indexing)
                had, done = had + (made is None), done + bool(made)
            else:
                self.state = f"counting usage after {done} sessions"
                await trio.to_thread.run_sync(self.view.usage().update)  # (usage/: counted too)
                took = time.monotonic() - start
                held = f" ({had} were in the disk cache)" if cache is not None else ""
                rendered = "1 session" if done == 1 else f"{done} sessions"
                self.state = f"done: {rendered} rendered in {took:.1f} s{held}"
                log.info("warm-up: %s", self.state[len("done: ") :])
            await trio.sleep(store.min_idle)  # then what is past the cap goes (no request will)
            await self._drop_paced(0, store.min_idle)
        except Exception:
            self.state = f"failed after {done} sessions (see the log)"
            log.exception("warm-up failed after %d sessions (the mount goes on)", done)

    async def _warm_one(self, key: v.Key, indexing: bool) -> bool | None:
        """Render session ``key`` for the warm-up: True when it did, False when it could not
        (gone, unreadable), None when it need not (``indexing``: the disk cache holds it as
        its file is now). Indexing, a session rendered is saved and dropped from memory at
        once: on disk, it answers a walk from there (held parsed, a big conversation.md made
        its parts again for a cold read: a walk of 1 GB took 13 s against 9 s), and memory
        stays low."""
        store = self.view.store
        if indexing and await trio.to_thread.run_sync(self.view.carry.on_disk, key.path):
            return None
        await self._make_room(key.path)
        try:
            await self._list_below(self.view.ino(key))  # (numbered again if swept)
        except (v.ViewError, Unreadable, OSError) as err:  # gone, unreadable: skip it
            log.debug("warm-up: %s: %s", key.path, err)
            return False
        if indexing and await trio.to_thread.run_sync(self.view.carry.save_one, key.path):
            leaving = await trio.to_thread.run_sync(store.leaving, key.path)
            if leaving is not None:
                store.let_go(leaving)
        return True

    async def _make_room(self, path: str) -> None:
        """Drop sessions the warm-up parsed until session ``path`` fits under the cap (about
        twice its file's size, with its renders): left to the request that parses it, a big
        session dropped hundreds at once, more than the store's writer takes. Any not used for
        :data:`WARM_QUIET` may go: no request came meanwhile."""
        store = self.view.store
        try:
            size = store.files.lstat(path).st_size
        except OSError:
            return
        await self._drop_paced(min(2 * size, store.cache_bytes), WARM_QUIET)

    async def _drop_paced(self, room: int, idle: float) -> None:
        """Drop sessions not used for ``idle`` seconds until ``room`` bytes fit under the
        cap, one at a time, each once the store wrote the one before (it refuses what
        comes faster: those were parsed again by the next walk).

        A session dropped makes its kept answers on the way out, in a thread: one drop after
        another on the loop held browsing up (p90 288 ms, 28 ms so). What it names in the
        view's inode table, it names under the table's lock (``View.ino``). The state goes
        on the loop, between requests: dropped by the thread, it went in the middle of an
        answer that was reading it (EIO)."""
        store = self.view.store
        while (leaving := await trio.to_thread.run_sync(store.leave, room, idle)) is not None:
            store.let_go(leaving)  # (one used meanwhile stays: the next is not used as late)
            while self._writing():
                await trio.sleep(0.01)

    def _writing(self) -> bool:
        """Whether the store in memory still writes what was dropped before (it refuses what
        comes faster: those would be parsed again by the next walk). The disk cache is not
        waited for: its writer takes 64 MiB of saves ahead, and waiting for it after every
        drop made a first --warm of a year of sessions take 2.3 times as long."""
        cache = self.view.disk
        return cache is not None and cache.memory and cache.busy()

    async def _list_below(self, ino: int) -> None:
        """List folder ``ino`` and every folder below it, not following links, as ``grep -r``
        does (a session's ``leaves/`` and ``nodes/`` too: their listings are kept with it)."""
        for _, a in await self.ops.listing(ino):
            if stat.S_ISDIR(a.mode):
                await self._list_below(a.ino)

    async def _warm_order(self) -> list[v.Key]:
        """Every session folder, the most recently changed first (what ``ls`` of the root
        and of each project folder lists)."""
        found: list[tuple[int, v.Key]] = []
        for _, a in await self.ops.listing(v.ROOT_INO):
            if a.key.kind == Kind.PROJECT:
                try:
                    listed = await self.ops.listing(self.view.ino(a.key))
                except (v.ViewError, Unreadable, OSError):
                    continue
                found += [(b.mtime_ns, b.key) for _, b in listed if b.key.kind == Kind.SESSION]
            elif a.key.kind == Kind.SESSION:
                found.append((a.mtime_ns, a.key))
        found.sort(key=lambda item: item[0], reverse=True)
        return [key for _, key in found]
