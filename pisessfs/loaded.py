"""A session file parsed: its parser and tree index (:class:`Loaded`), brought up to date by
``sessions.SessionFile``, and what the view derives from it (:class:`Derived`).

A state reads its file's lines through a descriptor pool (``files``), never holding the
whole file: an entry's line is read again when it is rendered, a block ahead at a time when
lines are read in file order. What it holds is counted against the parse cache's cap
(:meth:`Loaded.nbytes`). It knows nothing of inodes or FUSE.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import logging
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .files import Files
from .jsonl import MessageLine, Parser, Stats, decode_line
from .kind import Kind
from .model import Entry, Problem
from .tree import Index, NeedsRebuild
from .usage import TAIL, Seen, Sums, count_parsed

if TYPE_CHECKING:
    from .inodes import Key
    from .layout import Fork
    from .onefile import Conversation
    from .summary import Previews

log = logging.getLogger(__name__)

READ_AHEAD = 1 << 20  # bytes read at once for lines read in file order
_AHEAD = threading.local()  # the last block read ahead by this thread: file, start, bytes
#: Bytes per item of the per-entry memos (an estimate: a dict slot, a key, a short value).
PREVIEW_COST, BRANCH_SIZE_COST, FOLDER_NAME_COST = 250, 120, 150
LISTED_NAME_COST = 200  # bytes per name of an entry folder's listing kept (``Derived.files``)
#: Bytes of message files and branch views kept per session (``Renders``), least recently
#: used dropped first: a session's own share of the parse cache's cap, which counts them.
RENDERS_CAP = 16 << 20
RENDERED = (Kind.TREE, Kind.JSON)  # memos of whole-session renderings: (version, bytes)
WINDOW = TAIL  # bytes before the old end compared to detect a rewritten prefix
# Bytes read and parsed at a time by a whole read: above glibc's largest mmap threshold
# (32 MiB), so each chunk is its own mapping, given back to the system when parsed.
_CHUNK = 40 << 20
INLINE_BYTES = 512 << 10  # parsed on the event loop at a time (a few ms at most)
FREEZE_EVERY = 100_000  # appended entries after which the collector stops walking them

Work = Callable[[], object]  # blocking work a step hands back, to run off the loop


class _Collector:
    """The cyclic collector paused while a session is parsed, indexed or rendered whole.

    Such work makes millions of objects, none in a cycle, and a full collection would walk
    them all holding every thread (seconds on a 1 GB session: every request of the mount
    waits). Counted, because several threads may be doing it at once."""

    def __init__(self) -> None:
        self.holds = 0
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self.lock:
            self.holds += 1
            if self.holds == 1:
                gc.disable()
        try:
            yield
        finally:
            with self.lock:
                self.holds -= 1
                if self.holds == 0:
                    gc.enable()


no_gc = _Collector().paused


def _yield_marker() -> None:
    return None


#: A step that did a slice of work and wants to be called again after other requests ran.
YIELD: Work = _yield_marker


@dataclass(frozen=True, slots=True)
class Identity:
    """What a state was read from: the file (device, inode), how much of it, and its owner
    and permission bits (which bound what the mount shows of it)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    mode: int = 0
    uid: int = 0
    gid: int = 0

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(
            st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid
        )


Rendered = tuple[bytes, list[tuple[str, bytes]]]  # a message file's text and its images


class Renders:
    """The message files and branch views of one session made and kept (``Texts``), least
    recently used dropped first past ``cap``. A frozen copy of the session shares it (an
    entry shows the same bytes in every copy); an index built again starts a new one."""

    def __init__(self, cap: int = RENDERS_CAP) -> None:
        self._kept: OrderedDict[Key, Rendered] = OrderedDict()
        self.bytes, self.cap = 0, cap
        self._lock = threading.Lock()  # render threads keep renders while the loop reads

    def get(self, key: Key) -> Rendered | None:
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None:
                self._kept.move_to_end(key)
            return hit

    def __contains__(self, key: Key) -> bool:
        return key in self._kept

    def put(self, key: Key, done: Rendered) -> int:
        """Keep ``done`` as ``key``'s (a render made twice is counted once); the change of
        :attr:`bytes` (what the parse cache counts)."""
        with self._lock:
            before = self.bytes
            old = self._kept.pop(key, None)
            if old is not None:
                self.bytes -= weight(old)
            self._kept[key] = done
            self.bytes += weight(done)
            while self.bytes > self.cap and len(self._kept) > 1:
                self.bytes -= weight(self._kept.popitem(last=False)[1])
            return self.bytes - before

    def recounted(self) -> int:
        """:attr:`bytes` counted again from what is kept (tests)."""
        with self._lock:
            return sum(map(weight, self._kept.values()))


def weight(r: Rendered) -> int:
    return len(r[0]) + sum(len(data) for _, data in r[1])


@dataclass(slots=True)
class Derived:
    """What the view derives from a parsed session, kept with it (``Loaded.memo``).

    Entry-derived parts stay right while the file only grows, and a frozen copy a render
    works on shares them (entries never change); whole-session renderings carry the version
    of the file they are of, and the newest is kept. All of it goes when the index is built
    again (``Loaded.rebuild``)."""

    #: tree.txt and session.json: (version, bytes); conversation.md: (version, its size)
    renders: dict[Kind, tuple[int, Any]] = field(default_factory=dict)
    conversation: Conversation | None = None  # conversation.md's text, grown in place
    listed: list[str] | None = None  # the leaves ``leaves/`` lists (dropped at every change)
    previews: Previews | None = None  # tree.txt's one-line previews, per entry
    branch_sizes: dict[str, int] = field(default_factory=dict)  # size of nodes/<id>.md
    folder: dict[str, str] = field(default_factory=dict)  # a leaf's folder name
    #: The last entry folders' listings (their numbered files and images)
    files: OrderedDict[str, list[tuple[str, Key]]] = field(default_factory=OrderedDict)
    calls: tuple[Entry, dict[str, dict[str, Any]]] | None = None  # the last message's calls
    parent: Fork | None = None  # a fork's ``parent`` link, as last looked for
    pi_name: tuple[int, str | None] | None = None  # the name Pi shows, of a version
    renders_kept: Renders = field(default_factory=Renders)  # message files, branch views

    def for_a_copy(self) -> Derived:
        """What a frozen copy starts with: the entry-derived parts shared, the renderings
        its own (a copy first: the loop adds to them meanwhile), nothing volatile."""
        out = copy.copy(self)
        out.renders = self.renders.copy()
        out.listed = None
        return out

    def adopt(self, theirs: Derived) -> None:
        """Keep what a frozen copy made: of two renderings of a file, the newer version's;
        a part this one lacks."""
        for kind, made in theirs.renders.copy().items():
            mine = self.renders.get(kind)
            if mine is None or made[0] > mine[0]:
                self.renders[kind] = made
        if self.conversation is None:
            self.conversation = theirs.conversation
        if self.previews is None:
            self.previews = theirs.previews
        if self.parent is None:
            self.parent = theirs.parent
        if self.pi_name is None:
            self.pi_name = theirs.pi_name

    def nbytes(self) -> int:
        """What it holds, as counted against the parse cache's cap: the whole-session files
        rendered, what the view remembers per entry, at what a dict slot and a short string
        cost."""
        held = 0
        for kind in RENDERED:
            hit = self.renders.get(kind)
            if hit is not None:
                held += len(hit[1])
        if self.conversation is not None:
            held += self.conversation.held()  # what it holds of conversation.md, not its size
        if self.previews is not None:
            held += PREVIEW_COST * len(self.previews)
        held += BRANCH_SIZE_COST * len(self.branch_sizes) + FOLDER_NAME_COST * len(self.folder)
        # (list(): a render thread may change the dict meanwhile)
        held += LISTED_NAME_COST * sum(map(len, list(self.files.values())))
        return held + self.renders_kept.bytes


class Loaded:
    """A parsed session: parser and index, valid for one epoch.

    The file's bytes are not kept: an entry's line is read again (``pread``) when it is
    rendered, through a pooled descriptor of the very file (inode) that was parsed. A parsed
    100 MB session costs its index only, about half the file's size.
    """

    def __init__(self, files: Files, path: str, epoch: int) -> None:
        self.files = files
        self.path = path
        self.epoch = epoch
        self.size = 0  # bytes parsed
        self.window = b""  # the last bytes parsed: proof that the file only grew since
        self.usage: Sums = {}  # the usage of every whole line parsed (``usage``)
        self.parser = Parser(path, functools.partial(_count, self.usage))
        self.index = Index()
        self.ident: Identity | None = None
        self.ctime_ns = 0  # the file's ctime before the last read of it began
        self.version = 0  # grows with every change: whole-session renders are tied to one
        self.consumed = 0  # how many of parser.entries the index has seen
        self._tail: Entry | None = None  # a provisional last line the index holds
        self._stats = Stats()
        self._counted = 0
        self.reported: set[tuple[int, str]] = set()
        self.memo = Derived()  # what the view derives from this state
        self.rebuilds = 0  # times the index was built again (the memo cleared)
        self.frozen_at = 0  # entries consumed when the collector last froze its objects

    @property
    def entries(self) -> list[Entry]:
        """Entries in file order, with a provisional torn tail last."""
        tail = self.parser.tail
        return [*self.parser.entries, tail] if tail else self.parser.entries

    def problems(self) -> list[Problem]:
        """Every problem of the file as it is now (session.json and tree.txt list them)."""
        out = self.lasting_problems()
        if self.parser.tail_problem:
            out.append(self.parser.tail_problem)
        if not self.parser.lines:
            out += self._headless(out)
        return sorted(out, key=lambda p: p.line)

    def lasting_problems(self) -> list[Problem]:
        """The problems no later append takes back, which conversation.md notes (it only
        grows): not a torn last line's, which Pi may yet finish, nor the missing header of
        a file with no whole line yet (Pi writes its header first)."""
        out = [*self.parser.problems, *self.index.problems]
        if self.parser.lines:
            out += self._headless(out)
        return out

    def _headless(self, found: list[Problem]) -> list[Problem]:
        """A file without a session header, when no problem found says so already."""
        said = ("no-header", "bom", "harness-storage")
        if self.parser.header is not None or any(p.kind in said for p in found):
            return []
        return [Problem(0, "no-header", "no session header: Pi does not load this file")]

    def stats(self) -> Stats:
        """Counts, models, tokens and cost: gathered on demand (session.json), not while
        indexing, and only over the entries not counted yet."""
        entries = self.parser.entries
        for e in entries[self._counted :]:
            self._stats.add(e.type, self.parsed(e))
        self._counted = len(entries)
        return self._stats

    def count(self, i: int, e: Entry, d: dict[str, Any]) -> None:
        """Count entry ``i`` of the file (parsed as ``d``) into :meth:`stats` when it is the
        next one to count: a pass that parses every entry anyway (tree.txt's previews)
        saves the stats a second parse of the whole file."""
        entries = self.parser.entries
        if i == self._counted and i < len(entries) and entries[i] is e:
            self._stats.add(e.type, d)
            self._counted += 1

    def frozen(self) -> Loaded:
        """A copy of this state that appends do not change, for a whole-session render in
        another thread (called under the session's lock; the copy is read without it).
        Entry-derived memos are shared (entries never change); whole-session ones are not."""
        f = copy.copy(self)
        f.index = self.index.snapshot()
        parser = copy.copy(self.parser)
        parser.entries = list(parser.entries)
        parser.problems = list(parser.problems)
        f.parser = parser
        f._stats = copy.deepcopy(self._stats)
        f.memo = self.memo.for_a_copy()
        return f

    def adopt(self, f: Loaded) -> None:
        """Keep what a frozen copy counted and memoised (under the lock), so the next render
        goes on from there. Of two renderings of a file, the one of the newer version is
        kept, whichever thread finished last."""
        if f._counted > self._counted:
            self._stats, self._counted = f._stats, f._counted
        if f.rebuilds != self.rebuilds:
            return  # the index was built again meanwhile: what the copy made is of the old one
        self.memo.adopt(f.memo)

    def pread(self, size: int, offset: int) -> bytes:
        ident = self.ident
        if ident is None:
            return b""
        with self.files.reading(self.path, ident.dev, ident.ino) as fd:
            return os.pread(fd, size, offset)

    def raw(self, e: Entry) -> bytes:
        """The bytes of entry ``e``'s line. A line that follows the last one read comes from
        a block read ahead (a render reads every line in file order: a pread per line was a
        tenth of a cold walk); one read out of order is read alone."""
        size, start = e.end - e.start, e.start
        ident = self.ident
        if ident is None:
            return b""
        here = (self.path, self.epoch, ident.dev, ident.ino)
        mine = _AHEAD  # one block per thread, whatever the number of sessions
        block: bytes = getattr(mine, "block", b"")
        if getattr(mine, "file", None) == here:
            off = start - mine.start
            if off >= 0 and off + size <= len(block):
                mine.next = e.end
                return block[off : off + size]
            sequential = 0 <= start - mine.next <= 2  # just past the last line's \n or \r\n
        else:
            sequential = False
        mine.file, mine.next = here, e.end
        if not sequential or size >= READ_AHEAD:
            mine.start, mine.block = start, b""
            return self.pread(size, start)
        mine.start, mine.block = start, self.pread(READ_AHEAD, start)
        return mine.block[:size]  # type: ignore[no-any-return]

    def parsed(self, e: Entry) -> dict[str, Any]:
        """The entry's line parsed again in full (empty if it no longer parses)."""
        d, _ = decode_line(self.raw(e))
        return d if isinstance(d, dict) else {}

    def read_all(self) -> bytes:
        return self.pread(self.size, 0)

    def nbytes(self) -> int:
        """What this state holds, as counted against the cache's cap: the file's size (the
        index costs about half of it), the whole-session files rendered from it, and what
        the view remembers per entry (tree.txt's previews, branch views' sizes, entry
        folders' listings), at what a dict slot and a short string cost."""
        return self.size + self.memo.nbytes()

    def absorb(self, fd: int, ident: Identity, limit: int | None = None) -> bool:
        """Parse the bytes of ``fd`` after those parsed so far, up to ``ident.size``, at most
        ``limit`` of them (cut at a line's end); True when all are parsed. The index is not
        touched: :meth:`index_new` does that."""
        # (before reading: a ctime still this later means nothing changed since the read)
        self.ctime_ns = os.fstat(fd).st_ctime_ns
        with no_gc():
            offset = self.size
            while offset < ident.size:
                want = ident.size - offset
                if limit is not None:
                    want = min(want, limit)
                chunk = os.pread(fd, min(want, _CHUNK), offset)
                if not chunk:
                    break
                if limit is not None and offset + len(chunk) < ident.size:
                    cut = chunk.rfind(b"\n") + 1
                    chunk = chunk[:cut] if cut else chunk  # a slice ends at a line's end
                offset += len(chunk)
                self._feed(chunk)
                if limit is not None:
                    break
        done = self.size >= ident.size
        self.ident = dataclasses.replace(
            ident, size=self.size, mtime_ns=ident.mtime_ns if done else 0
        )
        self.version += 1
        self.memo.listed = None  # (the renders carry their version)
        return done

    def counted(self) -> tuple[Seen, Sums] | None:
        """The usage of the file as parsed, when it was parsed whole to a line's end: the
        file as :class:`~pisessfs.usage.Seen` has it (its project left to fill), and the
        sums."""
        ident = self.ident
        if ident is None or ident.mtime_ns == 0 or self.parser.offset != self.size:
            return None
        tail = zlib.crc32(self.window[-TAIL:])  # (the window is the bytes before the end)
        at = (ident.dev, ident.ino, ident.size, ident.mtime_ns, self.size)
        return Seen(*at, project="", tail=tail), self.usage

    def _feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        tail = chunk[-WINDOW:]
        self.window = tail if len(tail) == WINDOW else (self.window + tail)[-WINDOW:]
        self.parser.feed(chunk)

    def index_new(self) -> bool:
        """Apply the entries parsed since the last call to the index; False when they change
        the meaning of earlier ones (a duplicate id, a parent after its child, a provisional
        last line that came out different): then the index must be built anew."""
        new = self.parser.entries[self.consumed :]
        tail = self.parser.tail
        if self._tail is not None:
            held, self._tail = self._tail, None
            if new and _same(new[0], held):
                self._swap(held, new[0])
                new = new[1:]
            elif not new and tail is not None and _same(tail, held):
                self.parser.tail = held  # still the same provisional line
                tail = None
                self._tail = held
            else:
                return False
        try:
            for e in new:
                self.index.add(e)
            if tail is not None:
                self.index.add(tail)
                self._tail = tail
        except NeedsRebuild:
            return False
        self.consumed = len(self.parser.entries)
        self._lane()
        self._warn()
        return True

    def _lane(self) -> None:
        """Pi's harness storage resumes at its ``main`` lane, not at its last line."""
        if self.parser.harness is None:
            return
        main = self.parser.harness_info.get("lanes", {}).get("main")
        if isinstance(main, str) and main in self.index.by_id:
            self.index.resume = main

    def _swap(self, held: Entry, done: Entry) -> None:
        """The provisional last line the index holds is now a whole line: the same entry."""
        ix = self.index
        if ix.by_id.get(held.id) is held:
            ix.by_id[held.id] = done
        if ix.order and ix.order[-1] is held:
            ix.order[-1] = done

    def rebuild(self) -> None:
        """Build the index anew from every entry (blocking for a big session)."""
        with no_gc():
            self.index = Index(self.entries)
        self._tail = self.parser.tail
        self.consumed = len(self.parser.entries)
        self.version += 1
        self.memo = Derived()
        self.rebuilds += 1
        self._lane()
        self._warn()

    def _warn(self) -> None:
        for p in self.problems():
            if p.kind == "torn-tail":
                continue  # usually a writer caught mid-line; session.json still lists it
            key = (p.line, p.kind)
            if key not in self.reported:
                self.reported.add(key)
                log.warning("%s:%d: %s: %s", self.path, p.line, p.kind, p.detail)


def _count(usage: Sums, line: bytes, e: Entry | None, h: MessageLine | None) -> None:
    """(The parser's ``each``.) Count the usage of a line read (``e``: its entry, ``h``: its
    skim) into ``usage``. Not a method of :class:`Loaded`: the parser would hold its state, a cycle
    among objects :func:`gc.freeze` put out of the collector's reach, which then never freed
    a session let go, nor anything it held."""
    if e is None:
        count_parsed(usage, line, None, None, h)
    else:
        count_parsed(usage, line, e.type, e.kind, h)


def freeze_grown(cur: Loaded) -> None:
    """A session grown by appends to hundreds of thousands of entries is as big as one read
    whole: the collector's full passes over it (a second or more, on whichever thread
    allocates, often the loop) stop once its entries are frozen too."""
    if cur.consumed - cur.frozen_at >= FREEZE_EVERY:
        cur.frozen_at = cur.consumed
        gc.freeze()


def _same(a: Entry, b: Entry) -> bool:
    return (a.line, a.start, a.id, a.parent_id, a.type, a.kind) == (
        b.line,
        b.start,
        b.id,
        b.parent_id,
        b.type,
        b.kind,
    )
