"""Appending one user message to a session file, safely: the only code that writes to one.

This module owns the append recipe of pi-session-format.md ("Appending safely"): refuse
files Pi would rewrite or not understand, refuse a file that shrank or was replaced since it
was read and one whose live Pi writer holds a lock, build the line Pi itself would write
(fresh 8-hex id, ISO entry time, millisecond message time), and put it in the file with one
``O_APPEND`` write (a ``\\n`` first when the file lacks its final newline) and an ``fsync``
before returning. Nothing else about the file is ever changed.

It decides nothing about when to commit; ``scratch`` does.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from .files import Files, Unreadable
from .model import iso_ms
from .sessions import Identity, Loaded

log = logging.getLogger(__name__)

DEFAULT_CAP = 8 << 20  # bytes of message text


class Refused(Exception):
    """A write the contract refuses; ``kind`` names the errno class (DESIGN.md, "Writing")."""

    kind = "refused"

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


class ReadOnlySession(Refused):
    kind = "read-only"  # EROFS: Pi would rewrite the file, or does not understand it


class NotUtf8(Refused):
    kind = "not-utf8"  # EILSEQ


class TooBig(Refused):
    kind = "too-big"  # EFBIG


class Stale(Refused):
    kind = "stale"  # ESTALE: the file shrank or was replaced since it was read


class Grew(Stale):
    """Another writer appended since the file was read: read it again and retry."""


class Locked(Refused):
    kind = "locked"  # EBUSY: a live Pi writer holds the lock


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A user message to append: its parent, its text, and image blocks carried over."""

    parent_id: str | None
    text: str
    images: tuple[dict[str, Any], ...] = ()


def check_writable(s: Loaded) -> None:
    """Raise :class:`ReadOnlySession` unless Pi would append to this file as it is."""
    header = s.parser.header
    if header is None or header.line != 1 or any(p.kind == "bom" for p in s.parser.problems):
        raise ReadOnlySession(s.path, "the file has no valid session header on line 1")
    if header.version not in (2, 3):
        shown = header.fields.get("version", "absent")
        raise ReadOnlySession(s.path, f"header version is {shown}: only 2 and 3 are appended to")


def decode_text(path: str, data: bytes, cap: int) -> str:
    """The message text of a saved file: UTF-8, at most ``cap`` bytes."""
    if len(data) > cap:
        raise TooBig(path, f"{len(data)} bytes is over the {cap}-byte cap")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotUtf8(path, f"not UTF-8 at byte {err.start}") from None


def lock_holder(files: Files, path: str) -> int | None:
    """The pid of a live process holding ``<path>.writer.lock``, if any (read without
    following a link, like every file under the root)."""
    try:
        fd = files.open(path + ".writer.lock")
    except Unreadable:
        return None
    try:
        raw = os.pread(fd, 4096, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    pid: object = None
    try:
        doc = orjson.loads(raw)
        pid = doc.get("pid") if isinstance(doc, dict) else doc
    except orjson.JSONDecodeError:
        m = re.search(rb"\d+", raw)
        pid = int(m.group()) if m else None
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by someone else
    return pid


def new_id(taken: Callable[[str], bool]) -> str:
    """8 lowercase hex chars that no entry of the file has (Pi's shape)."""
    while True:
        candidate = secrets.token_hex(4)
        if not taken(candidate):
            return candidate


def build_line(entry_id: str, msg: NewMessage, now: float) -> bytes:
    """The JSON line of a user message, as Pi writes one (compact, one line, ``\\n``)."""
    ms = int(now * 1000)
    content: list[dict[str, Any]] = [{"type": "text", "text": msg.text}, *msg.images]
    entry = {
        "type": "message",
        "id": entry_id,
        "parentId": msg.parent_id,
        "timestamp": iso_ms(ms),
        "message": {"role": "user", "content": content, "timestamp": ms},
    }
    return orjson.dumps(entry) + b"\n"


@dataclass(frozen=True, slots=True)
class Pending:
    """A line ready to append to ``path``, valid while the file is still ``ident``."""

    files: Files
    path: str
    ident: Identity
    entry_id: str
    line: bytes
    tail: bytes  # the last bytes that were read: still there if the file only grew


def check_unlocked(s: Loaded) -> None:
    """Raise :class:`Locked` when a live Pi writer holds the session's lock."""
    holder = lock_holder(s.files, s.path)
    if holder is not None:
        raise Locked(s.path, f"Pi process {holder} holds the writer lock")


def prepare(s: Loaded, msg: NewMessage, now: float | None = None) -> Pending:
    """Check ``s`` (brought up to date by the caller) and build the line for ``msg``.

    Raises:
        ReadOnlySession: Pi would rewrite or not understand the file.
        Locked: a live Pi writer holds the lock.
        Stale: the parent is not in the file, or the file was never read.
    """
    check_writable(s)
    check_unlocked(s)
    if msg.parent_id is not None and msg.parent_id not in s.index.by_id:
        raise Stale(s.path, f"parent {msg.parent_id} is not in the file")
    if s.ident is None:
        raise Stale(s.path, "the file was never read")
    taken = s.index.by_id  # every id of the file (a duplicate's id is there once)
    tail = s.parser.tail
    entry_id = new_id(lambda i: i in taken or (tail is not None and tail.id == i))
    line = build_line(entry_id, msg, time.time() if now is None else now)
    return Pending(s.files, s.path, s.ident, entry_id, line, s.window)


def write(p: Pending) -> None:
    """Append ``p.line`` with one ``O_APPEND`` write and fsync it (blocking: off the loop).

    Another writer (a running Pi) may have appended since the file was read: that is fine,
    as long as the bytes that were read are still there and none of the new lines took our id.

    Raises:
        Stale: the file was replaced, shrank, or its prefix was rewritten since it was read.
        Grew: a line appended meanwhile uses our new id; prepare again and retry.
        OSError: the write itself failed.
    """
    try:
        fd = p.files.open(p.path, os.O_RDWR | os.O_APPEND)  # no link followed, ever
    except Unreadable as err:
        raise Stale(p.path, f"it cannot be opened as the file that was read ({err})") from None
    try:
        st = os.fstat(fd)
        _check_same(p, fd, st)
        line = p.line
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            line = b"\n" + line  # the repair Pi itself makes before appending
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_same(p: Pending, fd: int, st: os.stat_result) -> None:
    known = p.ident
    if (st.st_dev, st.st_ino) != (known.dev, known.ino):
        raise Stale(p.path, "the file was replaced since it was read")
    if st.st_size < known.size:
        raise Stale(p.path, f"the file shrank from {known.size} to {st.st_size} bytes")
    if st.st_size == known.size:
        return
    if os.pread(fd, len(p.tail), known.size - len(p.tail)) != p.tail:
        raise Stale(p.path, "the file was rewritten since it was read")
    grown = os.pread(fd, st.st_size - known.size, known.size)
    if f'"{p.entry_id}"'.encode() in grown:
        raise Grew(p.path, f"a line appended meanwhile uses id {p.entry_id}")
