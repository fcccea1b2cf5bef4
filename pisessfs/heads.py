"""Session folder names for people, from the head of each session file.

DESIGN.md "Session names": ``<UTC date and time of the header, to the minute>-<slug>-<first
8 characters of the session id>``, e.g. ``2026-03-02T0914-fix-fraction-parsing-019cadd3``.
The slug is of the session's name (the last ``session_info`` line with a name, Pi's
``/name``, as Pi's own picker shows it) when it has one, else of its first user message.
Naming the sessions of a project parses none of them: the head of a file is read (the header
line, then lines up to the first user message, at most :data:`HEAD_BYTES`), and its bytes
are searched for ``session_info`` from its end (a file of more than :data:`NAME_SCAN` bytes:
its last :data:`NAME_SCAN` bytes only, where a name given late is; one given earlier in a
very long session does not show in its folder's name).

Also what else the head says that a folder shows without parsing: the working directory
(``user.pi.cwd`` of a project) and the session id (an alias of the folder).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Any

from . import render
from .files import whole_lines
from .jsonl import decode_line
from .model import iso_ms, parse_ts_ms
from .names import id_name

HEAD_BYTES = 256 << 10  # a first user message further in than this: no slug
NAME_SCAN = 16 << 20  # bytes searched for the session's name, from the end of the file
_SCAN_BLOCK = 1 << 20
_NAME_LINE = 64 << 10  # a session_info line longer than this is no name (a hostile one)
_NEEDLE = b"session_info"
_CHUNK = 64 << 10
_FIRST = 8 << 10  # (most heads end within it: splitting 64 KiB was a third of a head)
#: What is read of a head at most: whole chunks until :data:`HEAD_BYTES` is reached.
_HEAD_READ = _FIRST + -(-(HEAD_BYTES - _FIRST) // _CHUNK) * _CHUNK
SLUG_CHARS = 40


@dataclass(frozen=True, slots=True)
class Head:
    """What the head of one session file says."""

    name: str  # the folder name (before it is made unique in its folder)
    session_id: str | None
    cwd: str | None
    hidden: bool  # made without the slug: some who may list its folder may not read it
    #: the file had a whole first line (Pi writes its header first): a name made before
    #: that is the file's stem for now, made again once the line is there
    final: bool = True


def read_head(fd: int, stem: str, slug: bool = True) -> Head:
    """The head of the open session file ``fd`` (``stem``: the file's name without
    ``.jsonl``, the name of a file without a usable header). ``slug=False``: the name says
    nothing of the first message (a file some who can list its folder may not read)."""
    header: dict[str, Any] | None = None
    text: str | None = None
    for raw, _ in whole_lines(functools.partial(os.pread, fd), 0, _HEAD_READ, _CHUNK, _FIRST):
        d = _object(raw)
        if header is None:
            header = d if d is not None else {}
            continue
        if d is not None and _is_user_message(d):
            text = render.content_text(render.message_of(d).get("content"))
            break
    if slug and header is not None:
        named = last_name(fd, os.fstat(fd).st_size)
        text = named if named is not None else text
    head = _head(header or {}, text if slug else "", stem, slug)
    return head if header is not None else replace(head, final=False)


def last_name(fd: int, size: int) -> str | None:
    """The session's name as Pi shows it: the last ``session_info`` line whose ``name`` is
    a string that is not blank, searched for in the last :data:`NAME_SCAN` bytes."""
    end, floor = size, max(0, size - NAME_SCAN)
    while end > floor:
        start = max(floor, end - _SCAN_BLOCK)
        block = os.pread(fd, end - start, start)
        at = block.rfind(_NEEDLE)
        while at >= 0:
            name = _name_at(fd, start + at, size)
            if name is not None:
                return name
            at = block.rfind(_NEEDLE, 0, at)
        # (the next block ends where a match across the two would end)
        end = start + len(_NEEDLE) - 1 if start > floor else floor
    return None


def _name_at(fd: int, at: int, size: int) -> str | None:
    """The name of the ``session_info`` line around byte ``at``, if it is one."""
    lo = max(0, at - _NAME_LINE)
    hi = min(size, at + _NAME_LINE)
    around = os.pread(fd, hi - lo, lo)
    cut = at - lo
    first = around.rfind(b"\n", 0, cut) + 1
    last = around.find(b"\n", cut)
    if (first == 0 and lo > 0) or (last < 0 and hi < size):
        return None  # a line longer than we read: no session_info Pi writes
    d = _object(around[first : last if last >= 0 else len(around)])
    if d is None or d.get("type") != "session_info":
        return None
    name = d.get("name")
    return name if isinstance(name, str) and name.strip() else None


def private(file_mode: int, folder_mode: int) -> bool:
    """Whether a class (owner, group, others) that may list the folder may not read the file:
    then the folder's name must not show the first message (everyone who lists the project
    sees it)."""
    return any((folder_mode >> s) & 4 and not (file_mode >> s) & 4 for s in (6, 3, 0))


def _object(raw: bytes) -> dict[str, Any] | None:
    # A line nested thousands deep (only a hostile file has one) is skipped, not parsed:
    # the slow parser that reads it took seconds for a folder of fuzzed files, while one of
    # their names waited. A name depends on the file alone, so it still never changes.
    d, _ = decode_line(raw.rstrip(b"\r"), deep=False)
    return d if isinstance(d, dict) else None


def _is_user_message(d: dict[str, Any]) -> bool:
    msg = d.get("message")
    return d.get("type") == "message" and isinstance(msg, dict) and msg.get("role") == "user"


def _head(header: dict[str, Any], text: str | None, stem: str, slug: bool) -> Head:
    sid = header.get("id") if isinstance(header.get("id"), str) else header.get("sessionId")
    sid = sid if isinstance(sid, str) and sid else None
    cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
    when = _minute(header.get("timestamp") or header.get("createdAt"))
    if when is None or sid is None:
        return Head(stem, sid, cwd, not slug)  # no usable header: the file's own name
    parts = [when, render.slug(text or "", SLUG_CHARS), id_name(sid)[:8].rstrip("%")]
    return Head("-".join(p for p in parts if p), sid, cwd, not slug)


def _minute(stamp: object) -> str | None:
    """``2026-03-02T09:14:05.120Z`` -> ``2026-03-02T0914`` (UTC), None for no valid time."""
    ms = parse_ts_ms(stamp)
    if ms is None:
        return None
    try:
        iso = iso_ms(ms)
    except ValueError:
        return None
    if not iso[:1].isdigit():
        return None  # a year past 9999 (+010000-…): no name starts with a sign
    return iso[:11] + iso[11:13] + iso[14:16]
