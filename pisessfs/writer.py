"""Appending one line to a session file, safely: the only code that decides what goes in one.

This module owns the append recipe of pi-session-format.md ("Appending safely"): refuse
files Pi would rewrite or not understand, refuse a file that shrank or was replaced since it
was read and one whose live Pi writer holds a lock, build the line Pi itself would write (a
user message: fresh 8-hex id, ISO entry time, millisecond message time; a ``session_info``
or ``label`` line as Pi's ``appendSessionInfo`` and ``appendLabelChange`` write them), and
put it in the file with ``O_APPEND`` writes (a ``\\n`` first when the file lacks its final
newline; through ``appender`` on a mount, so the line is whole even when the daemon is
killed) and an ``fsync`` before returning. Nothing else about the file is ever changed.

It also reads back what Pi reads of such lines (the session's name, Pi's leaf), so that what
is written and what is shown follow one rule. It decides nothing about when to commit;
``edits`` and ``actions`` do.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from .appender import write_whole
from .files import Files, Unreadable
from .model import iso_ms, js_trim
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


class Emptied(Refused):
    kind = "emptied"  # EPERM: a message emptied is a message removed (Pi sends no empty one)


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
    ident = _appendable(s)
    if msg.parent_id is not None and msg.parent_id not in s.index.by_id:
        raise Stale(s.path, f"parent {msg.parent_id} is not in the file")
    entry_id = _fresh_id(s)
    line = build_line(entry_id, msg, time.time() if now is None else now)
    return Pending(s.files, s.path, ident, entry_id, line, s.window)


def prepare_entry(
    s: Loaded, etype: str, fields: dict[str, Any], now: float | None = None
) -> Pending:
    """The line Pi's ``SessionManager`` appends for an entry of ``etype`` that is not a
    message (``appendSessionInfo``: ``name``; ``appendLabelChange``: ``targetId`` and
    ``label``): its keys in Pi's order, a fresh id, Pi's leaf as parent (the file's last
    entry, as a Pi opening the file now would use), the ISO time, then ``fields``.

    Raises what :func:`prepare` raises.
    """
    ident = _appendable(s)
    entry_id = _fresh_id(s)
    ms = int((time.time() if now is None else now) * 1000)
    entry = {
        "type": etype,
        "id": entry_id,
        "parentId": pi_leaf(s),
        "timestamp": iso_ms(ms),
        **fields,
    }
    return Pending(s.files, s.path, ident, entry_id, orjson.dumps(entry) + b"\n", s.window)


def _appendable(s: Loaded) -> Identity:
    check_writable(s)
    check_unlocked(s)
    if s.ident is None:
        raise Stale(s.path, "the file was never read")
    return s.ident


def _fresh_id(s: Loaded) -> str:
    taken = s.index.by_id  # every id of the file (a duplicate's id is there once)
    tail = s.parser.tail
    return new_id(lambda i: i in taken or (tail is not None and tail.id == i))


# -- what Pi reads back ------------------------------------------------------------------------


def has_own_id(s: Loaded, eid: str) -> bool:
    """Whether entry ``eid`` has that id in its line (ids like ``L12`` are made up for lines
    without one: Pi cannot point at those)."""
    e = s.index.by_id.get(eid)
    return e is not None and s.parsed(e).get("id") == eid


def pi_leaf(s: Loaded) -> str | None:
    """Pi's leaf: the parent Pi gives the next entry it appends (the file's last entry, or
    none when that entry has no id of its own)."""
    eid = s.index.resume
    return eid if eid is not None and has_own_id(s, eid) else None


def pi_name(s: Loaded) -> str | None:
    """The name Pi shows (``getSessionName``): the last ``session_info`` line decides, its
    name trimmed as JavaScript trims; a blank or missing name is none (a clear)."""
    memo = s.memo.pi_name
    if memo is not None and memo[0] == s.version:
        return memo[1]
    name: str | None = None
    tail = s.parser.tail
    for e in itertools.chain((tail,) if tail is not None else (), reversed(s.parser.entries)):
        if e.type == "session_info":
            name = js_trim(e.note) or None if e.note is not None else None
            break
    s.memo.pi_name = (s.version, name)
    return name


Put = Callable[[int, bytes], None]  # appends bytes to an open file and fsyncs it


def write(p: Pending, put: Put = write_whole) -> None:
    """Append ``p.line`` to the file with ``put`` (the mount's ``Appender``, so a killed
    daemon cannot leave half a line; in-process by default) after checking it is still the
    file that was read. Blocking: off the loop.

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
        if _torn(fd, st.st_size):
            line = b"\n" + line  # the repair Pi itself makes before appending
        put(fd, line)
    finally:
        os.close(fd)


_SETTLE_S = 0.002  # how long a file's end must stay put to count as torn, not being written
_SETTLE_TRIES = 50


def _torn(fd: int, size: int) -> bool:
    """Whether the file ends without its newline for good (a torn tail to repair), not
    because another writer (Pi) is in the middle of writing a line: a long line reaches the
    file page by page, so its end is missing for a moment. Blocking: runs off the loop."""
    for _ in range(_SETTLE_TRIES):
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return False
        time.sleep(_SETTLE_S)
        now = os.fstat(fd).st_size
        if now == size:
            return True
        size = now
    return True


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
