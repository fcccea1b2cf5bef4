"""Saves through the mount, on the adapter's side: one at a time per session file.

A flush, fsync, release or rename that commits a save (``edits.Editor`` prepares it), and a
name or label (``actions``), each append one line here, under the lock of its session file,
off the event loop (``writer.write``), retried when another writer took the new id
meanwhile; then the session is brought up to date, the kernel is told what changed, and the
save answers once it has dropped it (``Invalidator.settled``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from . import view as v
from . import writer
from .actions import Change
from .edits import Editor, Job
from .invalidator import Invalidator

log = logging.getLogger(__name__)

#: The adapter's way to call the core: its blocking work run off the loop (``Operations._core``).
Core = Callable[..., Awaitable[Any]]


class Saves:
    """The appends of saves and session actions, and their per-session locks."""

    def __init__(
        self,
        view: v.View,
        editor: Editor,
        appends: writer.Put,
        core: Core,
        invalidator: Invalidator,
    ) -> None:
        """``appends``: how a checked line reaches its file (the mount's ``Appender.put``)."""
        self.view, self.editor, self.appends = view, editor, appends
        self.core, self.invalidator = core, invalidator
        self._locks: dict[str, trio.Lock] = {}

    def lock(self, path: str) -> trio.Lock:
        """The lock of session ``path``'s appends (a trash takes it too)."""
        return self._locks.setdefault(path, trio.Lock())

    async def commit(self, fh: int, last: bool = False) -> None:
        """Claim, write and finish the save of ``fh``: one at a time per session file, so two
        flushes of one save (a dup'd descriptor) append one line, not two."""
        path = self.editor.session_of(fh)
        if path is None:
            return
        async with self.lock(path):
            await self.core(self.view.up_to_date, path)
            job = (self.editor.release if last else self.editor.prepare)(fh)
            if job is not None:
                await self.write(job)
        if job is not None and not last:
            # (outside the lock: the session's next save need not wait)
            await self.invalidator.settled()

    async def write(self, job: Job) -> None:
        """Write a prepared commit off the event loop, retrying when another writer raced;
        then bring the session up to date and finish (under the caller's lock)."""
        await self.put(job.binding.path, job.pending, lambda: self.editor.again(job).pending)
        await self.core(self.view.up_to_date, job.binding.path)
        self.editor.finish(job)
        self.invalidator.drain()

    async def put(
        self, path: str, pending: writer.Pending, again: Callable[[], writer.Pending]
    ) -> None:
        """``writer.write`` off the event loop; when another writer appended meanwhile and
        took the new id, bring the session up to date and write ``again()`` instead."""
        for _ in range(5):
            try:
                await trio.to_thread.run_sync(writer.write, pending, self.appends)
                return
            except writer.Grew:
                await self.core(self.view.up_to_date, path)
                pending = again()
        raise writer.Stale(path, "the file kept growing")

    async def apply(self, change: Change | None) -> None:
        """Append the line of a name or label change, through the same checks and the same
        one-write-and-fsync as a saved message, under the session's lock."""
        if change is None:
            return  # the value it already has: nothing appended
        path = change.path
        async with self.lock(path):
            s = await self.core(self.view.up_to_date, path)
            try:
                await self.put(path, change.build(s), lambda: change.build(self.view.state(path)))
            except writer.Refused as err:
                log.warning("%s refused (%s): %s", change.what, err.kind, err)
                raise
            await self.core(self.view.up_to_date, path)
        log.info("%s: appended %s", path, change.what)
        self.view.changes.session(path)
        self.invalidator.drain()
        await self.invalidator.settled()
