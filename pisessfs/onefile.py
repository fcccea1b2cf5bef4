"""The text of the one-file views: ``conversation.md`` and a branch as one file.

This module owns how entries are put together into one file (DESIGN.md, "One-file views"):
each conversation entry as a heading (number, kind, id, UTC time) followed by exactly the
bytes of its message file and Markdown links to its images; every other entry as a one-line
note. It is pure: the view hands it each entry's message bytes, image names and preview.

:class:`Conversation` builds ``conversation.md`` in file order and only ever adds to its end,
so a session that grows is rendered for its new lines only, and what a reader already read
(the kernel's page cache) stays valid.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .model import Entry, Problem, utc_clock
from .names import id_name
from .render import encode


@dataclass(frozen=True, slots=True)
class Piece:
    """What the view knows of one entry, for a one-file view."""

    entry: Entry
    number: int  # its number (0: an entry that takes none)
    body: bytes  # its message file's bytes (conversation entries), else b""
    images: Sequence[str]  # its image files' names, in order
    preview: str  # one line, like a row of tree.txt (for a note)
    detail: str = ""  # what a note says below its line (a context edit's replacement)


def when(ms: int | None) -> str:
    """``2026-03-02 09:14:05 UTC`` ("" for no valid time)."""
    shown = "" if ms is None else utc_clock(ms)
    return shown + " UTC" if shown else ""


def block(p: Piece, folder: str, after: str | None = None) -> bytes:
    """One entry of a one-file view. ``folder``: the relative path of the folder whose
    files are the entry's images (``nodes/<id>`` from the session folder); ``after``: what a
    heading says it continues from, when that is not the entry above it."""
    e = p.entry
    stamp = when(e.ts_ms)
    if not e.numbered:
        bits = [p.preview, e.id] + ([stamp] if stamp else [])  # (encode: lone surrogates)
        more = "".join(f"> {line}".rstrip() + "\n" for line in p.detail.splitlines())
        return encode("> " + " · ".join(bits) + "\n" + more + "\n")
    bits = [f"{p.number:04d} {e.kind}", e.id] + ([stamp] if stamp else [])
    if after is not None:
        bits.append(after)
    head = encode("## " + " · ".join(bits) + "\n\n")
    links = "".join(f"![{name}]({folder}/{name})\n" for name in p.images)
    tail = encode(links + "\n") if links else b"\n"
    body = p.body if p.body.endswith(b"\n") or not p.body else p.body + b"\n"
    return head + body + tail


def problem_note(pr: Problem) -> bytes:
    return encode(f"> problem: line {pr.line}: {pr.kind}: {pr.detail}\n\n")


def continues_from(e: Entry, above: Entry | None, number: Callable[[str], int]) -> str | None:
    """What a heading of conversation.md says about its parent, when that is not the entry
    just above it (so branches read as branches)."""
    if above is not None and e.parent_id == above.id:
        return None
    if e.parent_id is None:
        return "a new root" if above is not None else None
    n = number(e.parent_id)
    return f"continues from {n:04d} {e.parent_id}" if n else f"continues from {e.parent_id}"


class Conversation:
    """``conversation.md`` of one session, built incrementally in file order.

    ``add`` takes the next complete entries (never a torn tail: its bytes could still change)
    and the problems found so far; problems not shown yet are placed among the new entries
    by line number, or after them when their line was shown already. Shared by the frozen
    copies a render works on, hence the lock.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0  # entries shown
        self.chunks: list[bytes] = []
        self.size = 0
        self.last: Entry | None = None
        self.said: set[tuple[int, str, str]] = set()

    def add(
        self,
        pieces: Sequence[Piece],
        problems: Sequence[Problem],
        number: Callable[[str], int],
    ) -> None:
        fresh = [p for p in problems if (p.line, p.kind, p.detail) not in self.said]
        fresh.sort(key=lambda p: p.line)
        k = 0
        out: list[bytes] = []
        for piece in pieces:
            e = piece.entry
            while k < len(fresh) and fresh[k].line < e.line:
                out.append(problem_note(fresh[k]))
                k += 1
            out.append(block(piece, "nodes/" + id_name(e.id), continues_from(e, self.last, number)))
            self.last = e
        out.extend(problem_note(p) for p in fresh[k:])
        self.said.update((p.line, p.kind, p.detail) for p in fresh)
        self.done += len(pieces)
        data = b"".join(out)
        if data:
            self.chunks.append(data)
            self.size += len(data)

    def bytes(self) -> bytes:
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0] if self.chunks else b""
