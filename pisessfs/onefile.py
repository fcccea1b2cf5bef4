"""The text of the one-file views: ``conversation.md`` and a branch as one file.

This module owns how entries are put together into one file (DESIGN.md, "One-file views"):
each conversation entry as a heading (number, kind, id, UTC time) followed by exactly the
bytes of its message file and Markdown links to its images; every other entry as a one-line
note. It is pure: the view hands it each entry's message bytes, image names and preview.

:class:`Conversation` builds ``conversation.md`` in file order and only ever adds to its end,
so a session that grows is rendered for its new lines only, and what a reader already read
(the kernel's page cache) stays valid. It holds the text of a big session in part only: a
read of a part not held makes that group of entries again.
"""

from __future__ import annotations

import bisect
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

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


SEP = " · "  # between the parts of a heading or a note


def when(ms: int | None) -> str:
    """``2026-03-02 09:14:05 UTC`` ("" for no valid time)."""
    shown = "" if ms is None else utc_clock(ms)
    return shown + " UTC" if shown else ""


def block(p: Piece, folder: str, after: str | None = None) -> bytes:
    """One entry of a one-file view. ``folder``: the relative path of the folder whose
    files are the entry's images (``nodes/<id>`` from the session folder); ``after``: what a
    heading says it continues from, when that is not the entry above it."""
    return b"".join(_block(p, folder, after))


def in_branch(p: Piece, size: int, after: str | None) -> int:
    """The size of entry ``p``'s block in a branch view, from its ``size`` in
    conversation.md (made with ``after``): the same bytes but for the heading's "continues
    from" and the image links, which start ``../nodes/`` there and ``nodes/`` here."""
    if not p.entry.numbered:
        return size
    said = len(encode(SEP + after)) if after is not None else 0
    return size - said + len(b"../") * len(p.images)


def _block(p: Piece, folder: str, after: str | None) -> tuple[bytes, ...]:
    e = p.entry
    stamp = when(e.ts_ms)
    if not e.numbered:
        bits = [p.preview, e.id] + ([stamp] if stamp else [])  # (encode: lone surrogates)
        more = "".join(f"> {line}".rstrip() + "\n" for line in p.detail.splitlines())
        return (encode("> " + SEP.join(bits) + "\n" + more + "\n"),)
    bits = [f"{p.number:04d} {e.kind}", e.id] + ([stamp] if stamp else [])
    if after is not None:
        bits.append(after)
    head = encode("## " + SEP.join(bits) + "\n\n")
    links = "".join(f"![{name}]({folder}/{name})\n" for name in p.images)
    tail = encode(links + "\n") if links else b"\n"
    newline = b"" if p.body.endswith(b"\n") or not p.body else b"\n"
    return head, p.body, newline, tail


def _said(pr: Problem) -> tuple[int, str, str]:
    """What tells problem notes apart (``Conversation.said``)."""
    return (pr.line, pr.kind, pr.detail)


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


#: conversation.md is made in groups of entries of about this many bytes: a read the page
#: cache cannot answer makes its group again, not the whole file.
GROUP_BYTES = 64 << 10
#: Of each conversation, this many bytes of made groups are held (all of a small one);
#: older ones are held compressed, up to PACKED_BYTES (a 100 MB session's 73 MiB take 23);
#: the rest is made again when read (about as long as rendering it took).
HELD_BYTES = 2 << 20
PACKED_BYTES = 32 << 20
GROUP_COST = 200  # bytes a group's record costs (counted against the parse cache's cap)


@dataclass(slots=True)
class Group:
    """Consecutive entries (and problem notes) of conversation.md, from byte ``offset``."""

    offset: int
    before: Entry | None  # the entry above its first one (what a heading continues from)
    items: list[range | bytes] = field(default_factory=list)  # runs of entries, notes
    size: int = 0
    crc: int = 0


class Missing(Exception):
    """A read needs group ``index`` of a conversation, which is no longer held."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class Conversation:
    """``conversation.md`` of one session, built incrementally in file order.

    ``add`` takes the next complete entries (never a torn tail: its bytes could still change)
    and the problems found so far; problems not shown yet are placed among the new entries
    by line number, or after them when their line was shown already. The text is kept as
    :class:`Group` records (where each starts, which entries and notes it has, its size and
    checksum), the bytes of the last groups made (:data:`HELD_BYTES` at most) and older ones
    compressed (:data:`PACKED_BYTES` at most): a 100 MB session's conversation is not held
    whole, and a group held in neither way is made again when read (the view checks that it
    comes out the same). Shared by the frozen copies a render works on, hence ``lock``;
    readers take only ``_mu``, which ``add`` holds for each entry's step, never for all.
    """

    #: Bytes of made groups held (:data:`HELD_BYTES`). A render worker holds them all: it
    #: saves the session at once and lets it go, so packing them only to unpack them for
    #: the store was a sixth of its render.
    held_bytes = HELD_BYTES

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held by ``add``'s caller: one render at a time
        self._mu = threading.Lock()  # the groups and their bytes: held for short steps only
        self.done = 0  # entries shown
        self.size = 0
        self.last: Entry | None = None
        self.said: set[tuple[int, str, str]] = set()
        self.groups: list[Group] = []
        self._starts: list[int] = []  # each group's offset (bisected by reads)
        self._made: OrderedDict[int, bytes] = OrderedDict()  # closed groups' bytes held
        self._made_bytes = 0
        self._packed: dict[int, bytes] = {}  # groups' bytes compressed (zlib, level 1)
        self._packed_bytes = 0
        self._open: list[bytes] = []  # the last group's bytes, while it fills
        # Whether the text is still what one render of the whole file gives (see
        # ``exact``): it stops being so when a problem is found about a line shown by an
        # earlier ``add``, as it is then noted after the new entries, not at its line.
        # (A line that changes what earlier ones mean, such as one that takes an earlier
        # line's id, makes the index be built anew, and with it a new Conversation.)
        self.late = False
        self._line = -1  # the last line shown (an entry's or a problem's)

    def add(
        self,
        entries: Sequence[Entry],
        problems: Sequence[Problem],
        number: Callable[[str], int],
        piece: Callable[[Entry], Piece],
        sized: Callable[[Entry, int], None] | None = None,
    ) -> None:
        """Show ``entries[done:]`` (call under ``lock``); ``sized`` is told the size of each
        entry's block in a branch view (so no branch is rendered to learn its size)."""
        fresh = [p for p in problems if _said(p) not in self.said]
        fresh.sort(key=lambda p: p.line)
        if fresh and fresh[0].line <= self._line:
            self.late = True
        k = 0
        for i in range(self.done, len(entries)):
            e = entries[i]
            while k < len(fresh) and fresh[k].line < e.line:
                note = problem_note(fresh[k])
                self._put(note, note)
                k += 1
            shown = piece(e)
            after = continues_from(e, self.last, number)
            data = entry_block(shown, e, after)
            self._put(data, i)
            if sized is not None:
                sized(e, in_branch(shown, len(data), after))
            self.last = e
        for p in fresh[k:]:
            note = problem_note(p)
            self._put(note, note)
        self.said.update(map(_said, fresh))
        if self.last is not None:
            self._line = max(self._line, self.last.line)
        if fresh:
            self._line = max(self._line, fresh[-1].line)
        self.done = max(self.done, len(entries))

    def length(self) -> int:
        """Its size now: every byte below it can be read (a render may be adding more)."""
        with self._mu:
            return self.size

    def noted(self, problems: Sequence[Problem]) -> bool:
        """Whether every one of ``problems`` is noted already."""
        return all(_said(p) in self.said for p in problems)

    def exact(self, problems: Sequence[Problem]) -> bool:
        """Whether the text is what one render of the whole file, whose problems are
        ``problems``, gives (the disk cache keeps only such a text): no problem was noted
        late, and those noted are those there are (none went away since it was noted,
        none is still to be noted)."""
        return not self.late and self.said == set(map(_said, problems))

    def _put(self, data: bytes, item: int | bytes) -> None:
        with self._mu:
            if not self._open:  # (a closed group, or none yet: a new one starts here)
                self.groups.append(Group(self.size, self.last))
                self._starts.append(self.size)
            g = self.groups[-1]
            runs = g.items
            if isinstance(item, bytes):
                runs.append(item)
            elif runs and isinstance(runs[-1], range) and runs[-1].stop == item:
                runs[-1] = range(runs[-1].start, item + 1)
            else:
                runs.append(range(item, item + 1))
            g.size += len(data)
            g.crc = zlib.crc32(data, g.crc)
            self.size += len(data)
            self._open.append(data)
            if g.size < GROUP_BYTES:
                return
            gone = self._hold(len(self.groups) - 1, b"".join(self._open))
            self._open = []
        self._pack(gone)

    def _hold(self, index: int, data: bytes) -> list[tuple[int, bytes]]:
        """Hold a group's bytes (under ``_mu``); the groups this pushes out, to pack."""
        self._made[index] = data
        self._made_bytes += len(data)
        gone = []
        while self._made_bytes > self.held_bytes and self._made:
            old = self._made.popitem(last=False)
            self._made_bytes -= len(old[1])
            if old[0] not in self._packed:
                gone.append(old)
        return gone

    def _pack(self, gone: list[tuple[int, bytes]]) -> None:
        """Keep groups pushed out compressed, while there is room (a third of their size).
        Compressed outside ``_mu``: a reader on the event loop never waits for it."""
        for index, data in gone:
            packed = zlib.compress(data, 1)  # 70 MB/s: a tenth of what rendering them took
            with self._mu:
                if self._packed_bytes + len(packed) <= PACKED_BYTES:
                    self._packed[index] = packed
                    self._packed_bytes += len(packed)

    def held(self) -> int:
        """Bytes held: the made groups, the packed ones, the open one, a record per group."""
        made = self._made_bytes + self._packed_bytes + sum(map(len, self._open))
        return made + GROUP_COST * len(self.groups)

    def chunk(self, off: int, end: int, mine: Mapping[int, bytes]) -> bytes:
        """Bytes from ``off`` (< ``end``) to the end of its group or ``end``: from the groups
        held, held compressed, or in ``mine`` (a reader's own, made again for it); raises
        :class:`Missing` for a group in none of them. Never waits for ``add`` (only for its
        short steps)."""
        packed = None
        with self._mu:
            index = bisect.bisect_right(self._starts, off) - 1
            g = self.groups[index]
            data = mine.get(index)
            if index == len(self.groups) - 1 and self._open:
                data = b"".join(self._open)
            elif data is None:
                data = self._made.get(index)
                if data is not None:
                    self._made.move_to_end(index)
                else:
                    packed = self._packed.get(index)
        if data is None:
            if packed is None:
                raise Missing(index)
            data = zlib.decompress(packed)  # (64 KiB: 0.3 ms)
        return data[off - g.offset : end - g.offset]

    def keep(self, index: int, data: bytes) -> None:
        """Hold group ``index``, made again, unless it is big (its reader holds it)."""
        if len(data) > 4 * GROUP_BYTES:
            return
        gone: list[tuple[int, bytes]] = []
        with self._mu:
            if index not in self._made:
                gone = self._hold(index, data)
        self._pack(gone)

    def parts(
        self, again: Callable[[int], Callable[[], bytes]] | None = None
    ) -> list[tuple[int, bytes | Callable[[], bytes], bool]] | None:
        """Every group's bytes from its offset, compressed (``True``) where held so, for the
        store; a group held in neither way (a big session's old groups)
        is what ``again(index)`` makes of it, or else there are no parts (None)."""
        with self._mu:
            out: list[tuple[int, bytes | Callable[[], bytes], bool]] = []
            last = len(self.groups) - 1
            for index, g in enumerate(self.groups):
                if index == last and self._open:
                    out.append((g.offset, b"".join(self._open), False))
                elif index in self._made:
                    out.append((g.offset, self._made[index], False))
                elif index in self._packed:
                    out.append((g.offset, self._packed[index], True))
                elif again is not None:
                    out.append((g.offset, again(index), False))
                else:
                    return None
            return out

    def items(self, index: int) -> tuple[Group, list[range | bytes]]:
        """Group ``index`` and what it shows, to make it again."""
        with self._mu:
            g = self.groups[index]
            return g, list(g.items)


def entry_block(p: Piece, e: Entry, after: str | None) -> bytes:
    """An entry of conversation.md (``after``: what it continues from, when that is not the
    entry above it): its images are in its own node's folder."""
    return block(p, "nodes/" + id_name(e.id), after)


def remake(
    g: Group,
    items: Sequence[range | bytes],
    entries: Sequence[Entry],
    number: Callable[[str], int],
    piece: Callable[[Entry], Piece],
) -> bytes:
    """The bytes of group ``g`` made again (the caller checks them against its size and
    checksum: an entry renders the same while the index keeps its meaning)."""
    out: list[bytes] = []
    last = g.before
    for item in items:
        if isinstance(item, bytes):
            out.append(item)
            continue
        for i in item:
            e = entries[i]
            out.append(entry_block(piece(e), e, continues_from(e, last, number)))
            last = e
    return b"".join(out)
