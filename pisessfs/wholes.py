"""The whole-session files of a parsed session: ``conversation.md`` (grown at its end, held
in part, its groups made again when read), ``tree.txt`` and ``session.json``.

A rendering is kept in the session's memo with the version of the file it is of: every
answer about one of these files (a lookup's size, a listing's, ``stat``'s, the bytes of an
open) is of the file as it is, so ``stat``, ``tail`` and ``cat`` agree. A render of a big
session is work handed back to run off the loop, on a frozen copy of the session; renders
of one file run one at a time, and requests that come meanwhile take its result.
"""

from __future__ import annotations

import functools
import logging
import threading
import zlib
from collections.abc import Callable
from typing import Any

from . import onefile, summary
from .errors import Changed
from .handles import ConvSnapshot
from .inodes import Key
from .kind import Kind
from .loaded import INLINE_BYTES, Loaded, Work, no_gc
from .model import Entry
from .sessions import SessionFile
from .texts import Texts

log = logging.getLogger(__name__)

RENDER_LOCKS = 64  # stripes of the lock that makes one render of a file at a time


class Wholes:
    """Renders of whole-session files, one of a file at a time."""

    def __init__(self, texts: Texts, resized: Callable[[Key], None]) -> None:
        """``resized(key)``: the file ``key`` has another size now."""
        self.texts, self.resized = texts, resized
        self.made = 0  # whole-session files rendered (the mount trims the heap after them)
        # One render of a whole-session file at a time (striped: bounded however many)
        self._render_locks = [threading.Lock() for _ in range(RENDER_LOCKS)]

    def render_step(
        self,
        sf: SessionFile,
        s: Loaded,
        kind: Kind,
        waited: set[tuple[str, str, int]] | None = None,
    ) -> Work | None:
        """Render a whole-session file of ``s`` unless the rendering of its file as it is
        now exists: every answer about it (a lookup's size, a listing's, ``stat``'s, the
        bytes of an open) is of the file as it is, so ``stat``, ``tail`` and ``cat`` agree.
        ``waited``: the renderings this request already waited for (one per request: a
        session that grows meanwhile does not make it wait for another). conversation.md
        is rendered for its new entries only (cheap).
        """
        hit = s.memo.renders.get(kind)
        if hit is not None and (
            hit[0] == s.version or (s.path, kind, hit[0]) in (waited or ())  # one per request
        ):
            return None
        if s.size < INLINE_BYTES:
            self._render(s, kind)  # a small session: cheaper here than a thread hop
            return None
        if kind == Kind.CONVERSATION:
            # Its text is grown in place: made on the live state, every copy shares it, and
            # renders that overlap (a second request while the session grew) add to one
            # text and agree on its size.
            self.conversation(s)
        asked = s.version

        def work() -> None:
            # One render of a file at a time: requests that come while it runs (a lookup, a
            # stat, an open of one growing session) take its rendering, not one each.
            with self._render_locks[hash((s.path, kind)) % len(self._render_locks)]:
                hit = s.memo.renders.get(kind)
                if hit is not None and hit[0] >= asked:
                    if waited is not None:
                        waited.add((s.path, kind, hit[0]))
                    return
                make()

        def make() -> None:
            with no_gc():
                with sf.lock:  # a copy no append changes, made while none runs
                    if sf.loaded is not s:
                        return
                    frozen = s.frozen()
                    sf.working += 1  # not evicted while rendered
                rendered = False
                try:
                    self._render(frozen, kind)
                    rendered = True
                finally:
                    with sf.lock:  # kept in the same step: a drop then stores the render
                        sf.working -= 1
                        if rendered:
                            s.adopt(frozen)
            if waited is not None:
                waited.add((s.path, kind, frozen.version))
            # Its size changed. Its pages, if a handle from kept answers left any, are of
            # the same file (they were checked): a change of the file drops them.
            self.resized(Key(kind, s.path))

        return work

    def _conversation(self, s: Loaded) -> int:
        """``conversation.md``: the entries not shown yet are added at its end; its size."""
        conv = self.conversation(s)
        with conv.lock:
            entries = s.parser.entries  # complete lines only: a torn tail may still change
            problems = s.lasting_problems()
            # (new problems alone too: a malformed line appended after the last entry is
            # noted now, not once another entry comes)
            if conv.done < len(entries) or not conv.noted(problems):
                pieces = self._first_pieces(s)
                conv.add(entries, problems, self._numbers(s), pieces, self._sizer(s))
            return conv.size

    def _first_pieces(self, s: Loaded) -> Callable[[Entry], onefile.Piece]:
        """Pieces for entries conversation.md shows for the first time: each line is parsed
        once for them and for tree.txt's previews and session.json's stats (the listing that
        renders one renders the others)."""
        made = summary.previews_of(s)
        return lambda e: self.texts.piece(s, e, made.offer(s, e), keep=False)

    @staticmethod
    def _sizer(s: Loaded) -> Callable[[Entry, int], None]:
        """What keeps the size of ``nodes/<id>.md`` of each entry conversation.md shows
        (from its block's size there), when its parent's is known (file order: nearly
        always). ``rg`` stats where every link of a walk leads: without these, each
        branch's entries were rendered again for it."""
        sizes = s.memo.branch_sizes

        def sized(e: Entry, size: int) -> None:
            if e.id in sizes or s.index.by_id.get(e.id) is not e:
                return  # (a line whose id a later line took: its branch is the winner's)
            parent = s.index.parent.get(e.id)
            if parent is None or parent in sizes:
                sizes[e.id] = (sizes[parent] if parent is not None else 0) + size

        return sized

    @staticmethod
    def conversation(s: Loaded) -> onefile.Conversation:
        conv = s.memo.conversation
        if conv is None:
            conv = s.memo.conversation = onefile.Conversation()
        return conv

    @staticmethod
    def _numbers(s: Loaded) -> Callable[[str], int]:
        return lambda eid: s.index.num.get(eid, 0)

    def _pieces(self, s: Loaded) -> Callable[[Entry], onefile.Piece]:
        """Pieces for conversation.md's groups made again (each is held as a whole)."""
        return lambda e: self.texts.piece(s, e, keep=False)

    def conv_size(self, s: Loaded) -> int:
        """conversation.md's size as :meth:`ready` rendered it."""
        size: int = self._rendering(s, Kind.CONVERSATION)
        return size

    def conv_snapshot(self, s: Loaded, defer: bool = True) -> ConvSnapshot:
        """An open conversation.md: its size now, its bytes made again where not held
        (``defer``: a big part is :class:`Busy`, to be made off the loop)."""
        conv = self.conversation(s)
        remade = functools.partial(self.remade, s, conv)
        return ConvSnapshot(conv, self.conv_size(s), remade, defer)

    def conv_text(self, s: Loaded) -> bytes:
        """conversation.md whole (tests and scripts: the mount reads it by range)."""
        snap = self.conv_snapshot(s, defer=False)
        return snap.read(0, snap.size)

    def remade(self, s: Loaded, conv: onefile.Conversation, index: int) -> bytes:
        """Group ``index`` of conversation.md made again. It must come out as it was (an
        entry renders the same while the index keeps its meaning; a rebuilt index may not):
        else the read is answered ESTALE."""
        g, items = conv.items(index)
        data = onefile.remake(g, items, s.parser.entries, self._numbers(s), self._pieces(s))
        if len(data) != g.size or zlib.crc32(data) != g.crc:
            log.warning("%s: conversation.md came out different: answered ESTALE", s.path)
            raise Changed(s.path)
        return data

    def session_text(self, s: Loaded, kind: Kind) -> bytes:
        """tree.txt or session.json as :meth:`ready` rendered it (an older rendering, all of
        one version, rather than a render here when the file moved on meanwhile)."""
        data: bytes = self._rendering(s, kind)
        return data

    def _rendering(self, s: Loaded, kind: Kind) -> Any:
        """What the memo of whole-session file ``kind`` holds (rendered here if none)."""
        if kind not in s.memo.renders:
            self._render(s, kind)
        return s.memo.renders[kind][1]

    def _render(self, s: Loaded, kind: Kind) -> None:
        """Render a whole-session file of ``s`` (blocking in proportion to the session) and
        keep it in its memo with ``s``'s version: tree.txt's and session.json's bytes,
        conversation.md's size (its text is its :class:`~pisessfs.onefile.Conversation`'s).
        A frozen copy's rendering reaches the live state through ``Loaded.adopt``."""
        self.made += 1
        version = s.version
        folder_of = lambda eid: self.texts.folder_of(s, eid)  # noqa: E731
        data: bytes | int
        if kind == Kind.TREE:
            data = summary.tree_txt(s, folder_of)
        elif kind == Kind.CONVERSATION:
            data = self._conversation(s)
        else:
            data = summary.session_json(s, folder_of, set(self.texts.listed(s)))
        s.memo.renders[kind] = (version, data)
