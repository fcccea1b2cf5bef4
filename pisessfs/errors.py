"""The errors of the FUSE-free core, each standing for one errno (the table is in
``fuse_ops``), and :class:`Busy`, which is no error: work to run first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .sessions import YIELD, Work

R = TypeVar("R")

#: How many times a request lets blocking work run (or other requests pass) before it is
#: given up (EAGAIN): a session that never stops changing does not hold a request forever.
MAX_STEPS = 100_000


class ViewError(Exception):
    """Base of the errors the adapter maps to errno (one table, in ``fuse_ops``)."""


class NotFound(ViewError):
    pass


class NotADir(ViewError):
    pass


class IsADir(ViewError):
    pass


class Denied(ViewError):
    """EACCES: the session cannot be read, or the file is not writable."""


class NotALink(ViewError):
    pass


class NotPermitted(ViewError):
    """EPERM: deleting or renaming a message file for real."""


class Exists(ViewError):
    pass


class CrossFolder(ViewError):
    """EXDEV: a message file renamed into another folder."""


class Invalid(ViewError):
    pass


class Changed(ViewError):
    """ESTALE: a file opened from answers kept for its session changed before it was read
    (what the kernel was told of it no longer holds)."""


class Busy(Exception):
    """Not an error: the request needs ``work`` done first (blocking: run it off the event
    loop; :data:`~pisessfs.sessions.YIELD`: let other requests run), then to be asked again."""

    def __init__(self, work: Work) -> None:
        super().__init__("busy")
        self.work = work


def settled(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)``, with the blocking work it hands back (:class:`Busy`) done here, inline,
    and the call made again: how scripts and the core's tests drive the core, one step at a
    time as the adapter does (``fuse_ops.Operations._core``, which runs the work off its
    event loop instead)."""
    for _ in range(MAX_STEPS):
        try:
            return fn(*args)
        except Busy as busy:
            if busy.work is not YIELD:
                busy.work()
    raise RuntimeError(f"{getattr(fn, '__name__', fn)}: never settled")
