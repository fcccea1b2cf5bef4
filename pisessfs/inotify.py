"""A minimal Linux inotify binding (ctypes, no dependency): watch folders, read events.

This module owns the system calls and the event decoding only. Which folders are watched and
what an event means for the mount is ``watch``'s business; waiting on the file descriptor is
the caller's (``mount`` waits with trio).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from dataclasses import dataclass

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: What a sessions folder watch asks for: files growing, appearing, going, being replaced.
FOLDER_MASK = (
    IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


@dataclass(frozen=True, slots=True)
class Event:
    wd: int
    mask: int
    name: str

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


class Inotify:
    """An inotify instance in non-blocking mode."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def add(self, path: str, mask: int = FOLDER_MASK) -> int:
        """Watch ``path``; returns the watch descriptor (the same one for the same path)."""
        wd = self._add(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        return int(wd)

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)  # fails harmlessly when the kernel already dropped it

    def read(self) -> list[Event]:
        """The events ready now (empty when none)."""
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        except OSError as err:
            if err.errno == errno.EAGAIN:
                return []
            raise
        events = []
        pos = 0
        while pos + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, pos)
            pos += _HEADER.size
            raw = data[pos : pos + length].split(b"\0", 1)[0]
            pos += length
            events.append(Event(wd, mask, os.fsdecode(raw)))
        return events

    def close(self) -> None:
        os.close(self.fd)
