"""The errors of the FUSE-free core, each standing for one errno (the table is in
``fuse_ops``), and :class:`Busy`, which is no error: work to run first."""

from __future__ import annotations

from .sessions import Work


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
