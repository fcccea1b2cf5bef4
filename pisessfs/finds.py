"""The kinds of node of no session that sum or find across every session: ``usage/`` and
``search/`` (DESIGN "Usage" and "Search"). What they show is kept in the store and brought
up to date off the loop (``prepare``); every ``stat`` of them asks again (scratch
attributes), so a Pi append shows within a second.
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from typing import TYPE_CHECKING

from . import render, usage
from .errors import NotFound
from .files import Unreadable
from .inodes import Key
from .jsonl import decode_line
from .kind import Kind
from .model import iso_ms
from .names import VIEW_SUFFIX, id_name
from .nodekind import SESSION_NAMES, NodeKind
from .search import (
    LIMIT,
    BadQuery,
    Doc,
    Found,
    Hit,
    Indexed,
    Parsed,
    Query,
    marked_lines,
    parse_query,
)
from .sessions import Work

if TYPE_CHECKING:
    from .loaded import Loaded
    from .view import Attr, View

log = logging.getLogger(__name__)
PAGE_LINE_MAX = 1 << 20  # bytes of a hit's line its page reads at most (else no lines)


# -- usage/ --------------------------------------------------------------------------------


class UsageFolder(NodeKind):
    """``usage/``: tokens and cost summed by day, month, project and model (``usage``)."""

    name = Kind.USAGE
    fmt = stat.S_IFDIR
    sessionless = True

    def child(self, v: View, key: Key, name: str) -> Key:
        if name not in usage.FILES:
            raise NotFound(name)
        return key._replace(kind=Kind.USAGE_FILE, eid=name)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        return [(n, key._replace(kind=Kind.USAGE_FILE, eid=n)) for n in usage.FILES]

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        return _sums_due(v)  # (its listing shows the files' sizes)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        root = v.file_stat(v.store.root)
        return v.plain_attr(ino, stat.S_IFDIR | 0o555, root, 0, False)


class UsageFile(NodeKind):
    """One file of ``usage/``, as the sums are now: every stat asks (a Pi append shows in
    it within a second), and making the sums up to date is work off the loop."""

    name = Kind.USAGE_FILE
    sessionless = True

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        return _sums_due(v)

    def content(self, v: View, key: Key) -> bytes:
        return v.usage().render(key.eid)

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        sums = v.usage()
        root = v.file_stat(v.store.root)
        size = len(sums.render(key.eid))
        a = v.plain_attr(ino, stat.S_IFREG | sums.mode, root, size, False)
        return a._replace(mtime_ns=sums.changed_ns, scratch=True)  # (asked at every use)


def _sums_due(v: View) -> Work | None:
    """The work that brings the sums of ``usage/`` up to date, if due."""
    sums = v.usage()
    return None if sums.fresh() else sums.update


# -- search/ -------------------------------------------------------------------------------


class SearchFolder(NodeKind):
    """``search/`` (at the root, or in a project: ``key.path`` is its folder): lists
    nothing; any name is a query, ``<Q>`` its results as links and ``<Q>.md`` as a page."""

    name = Kind.SEARCH
    fmt = stat.S_IFDIR
    sessionless = True

    def never(self, name: str) -> bool:
        # rg, git and file managers look for .gitignore, .git, .hidden in every folder they
        # enter: no query (each would build the index), and no log line
        return name.startswith(".")

    def child(self, v: View, key: Key, name: str) -> Key:
        if self.never(name):
            raise NotFound(name)
        if name in SESSION_NAMES:  # (*/session.json, */conversation.md: sessions only)
            log.info('search: %r is a session\'s file name, no query (quote it: "%s")', name, name)
            raise NotFound(name)
        page = name.endswith(VIEW_SUFFIX) and len(name) > len(VIEW_SUFFIX)
        text = name[: -len(VIEW_SUFFIX)] if page else name
        _query(text)
        return key._replace(kind=Kind.SEARCH_PAGE if page else Kind.SEARCH_QUERY, eid=text)

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        return []

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        return v.plain_attr(ino, stat.S_IFDIR | 0o555, v.file_stat(key.path), 0, False)


def _query(text: str) -> Query:
    try:
        return parse_query(text)
    except BadQuery as err:
        log.info("search: %r is no query: %s", text, err)
        raise NotFound(text) from None


def _found(v: View, key: Key) -> Found:
    """What the query of a node of ``search/`` finds, as the index is now."""
    folder = None if key.path == v.store.root else key.path
    return v.search().find(_query(key.eid), folder)


def _refresh(v: View, key: Key) -> Work | None:
    """The index brought up to date, then the folders of the results' sessions listed (a
    project no one listed yet: reading each session's head for its name is no work for the
    loop)."""
    index = v.search()
    if not index.due():
        folders = _unlisted(v, key)
        return (lambda: _list(v, folders)) if folders else None

    def work() -> None:
        index.refresh()
        _list(v, _unlisted(v, key))

    return work


def _unlisted(v: View, key: Key) -> list[str]:
    """The folders of the results' sessions whose listing is not made (or is stale)."""
    folders = {posixpath.dirname(h.path) for h in _found(v, key).hits}
    return [f for f in sorted(folders) if v.store.unlisted(f)[1]]


def _list(v: View, folders: list[str]) -> None:
    for folder in folders:  # (made, the listing answers unlisted: no head twice)
        v.store.top() if folder == v.store.root else v.store.sessions_in(folder)


class SearchResults(NodeKind):
    """``search/<Q>/``: one link per hit, best first, to its message file."""

    name = Kind.SEARCH_QUERY
    fmt = stat.S_IFDIR
    sessionless = True

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        return _refresh(v, key)

    def child(self, v: View, key: Key, name: str) -> Key:
        rank, _, rest = name.partition("-")
        links = dict(self.listing(v, key)) if rank.isdigit() else {}
        if name in links:
            return links[name]
        # (listed under another rank before the index changed: the same message, if found)
        moved = [k for n, k in links.items() if n.partition("-")[2] == rest]
        if len(moved) != 1:
            raise NotFound(name)
        return moved[0]

    def listing(self, v: View, key: Key) -> list[tuple[str, Key]]:
        found = _found(v, key)
        width = max(3, len(str(len(found.hits))))
        out = []
        for rank, hit in enumerate(found.hits, 1):
            name = _hit_name(v, rank, width, hit)
            if name is not None:
                scope = 0 if key.path == v.store.root else 1
                out.append((name, Key(Kind.SEARCH_LINK, hit.path, 0, hit.eid, scope)))
        return out

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        found = _found(v, key)
        readable = found.mode & 0o444
        mode = stat.S_IFDIR | readable | readable >> 2  # (who may read them all may list)
        a = v.plain_attr(ino, mode, v.file_stat(key.path), 0, False)
        return a._replace(mtime_ns=found.mtime_ns, scratch=True)


def _hit_name(v: View, rank: int, width: int, hit: Hit) -> str | None:
    """``NNN-<session>-<MMMM-kind>.md`` (the session's part cut to keep it a name)."""
    session = _session_name(v, hit.path)
    if session is None:
        return None
    tail = "-" + hit.name
    room = 255 - width - 1 - len(tail.encode("utf-8", "surrogateescape"))
    cut = session.encode("utf-8", "surrogateescape")[: max(room, 0)]
    return f"{rank:0{width}d}-{cut.decode('utf-8', 'ignore')}{tail}"


def _session_name(v: View, path: str) -> str | None:
    """The name of the folder of session ``path`` in its project (None: not listed)."""
    for item in v.store.sessions_in(posixpath.dirname(path)):
        if item.path == path:
            return item.name
    for item in v.store.top():  # (a session lying in the root)
        if item.path == path:
            return item.name
    return None


class SearchLink(NodeKind):
    """``search/<Q>/NNN-…``: a relative link to the message file of entry ``eid`` of
    session file ``path`` (``k``: 1 from a project's ``search/``). A link names its message,
    not its rank: its target never changes, and the kernel may keep it."""

    name = Kind.SEARCH_LINK
    fmt = stat.S_IFLNK
    sessionless = True

    def target(self, v: View, key: Key) -> bytes:
        name = v.search().name_of(key.path, key.eid)
        if name is None:
            raise NotFound(key)
        where = _hit_path(v, key.path, key.eid, name)
        if key.k:  # (a project's search/: its sessions are one up)
            where = where.split("/", 1)[1]
        return f"../../{where}".encode("utf-8", "surrogateescape")

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        size = len(self.target(v, key))
        a = v.plain_attr(ino, stat.S_IFLNK | 0o777, v.file_stat(key.path), size, False)
        return a._replace(scratch=True)


def _page(v: View, key: Key, found: Found) -> bytes:
    """``<Q>.md``: the query, how many matched in how much, then each hit with its lines."""
    q = _query(key.eid)
    n = v.search().count(q, None if key.path == v.store.root else key.path)
    matches = f"{n:,} match{'' if n == 1 else 'es'}"
    indexed = f"{found.indexed:,} of {found.sessions:,} sessions"
    out = [f"# {q.text}: {matches} in {indexed}", ""]
    if n > len(found.hits) and len(found.hits) == LIMIT:
        out += [f"The best {LIMIT} are below.", ""]
    for rank, hit in enumerate(found.hits, 1):
        where = _hit_path(v, hit.path, hit.eid, hit.name)
        out += [f"## {rank} · {_when(hit.ts_ms)} · {where}", ""]
        lines = marked_lines(_hit_text(v, hit), q.words)
        out += [f"> {line}" for line in lines] + ([""] if lines else [])
    return "\n".join(out).encode("utf-8", "surrogateescape")


class SearchPage(NodeKind):
    """``search/<Q>.md``: the hits as one readable page, with the lines that match."""

    name = Kind.SEARCH_PAGE
    sessionless = True

    def prepare(self, v: View, key: Key, listing: bool) -> Work | None:
        return _refresh(v, key)

    def content(self, v: View, key: Key) -> bytes:
        found = _found(v, key)
        if found.page is None:  # (made once per version of the results: stat, then read)
            found.page = _page(v, key, found)
        return found.page

    def attr(self, v: View, ino: int, key: Key) -> Attr:
        found = _found(v, key)
        size = len(self.content(v, key))
        a = v.plain_attr(ino, stat.S_IFREG | found.mode, v.file_stat(key.path), size, False)
        return a._replace(mtime_ns=found.mtime_ns, scratch=True)


def hit_message(v: View, link: Key) -> tuple[Key, str]:
    """The folder of the entry a result of ``search/`` leads to, and its message file's name
    there (a save over the result saves that message)."""
    name = v.search().name_of(link.path, link.eid) if link.kind == Kind.SEARCH_LINK else None
    if name is None:
        raise NotFound(link)
    s = v.session(Key(Kind.SESSION, link.path))
    return Key(Kind.ENTRY, link.path, s.epoch, link.eid), name


def _when(ms: int | None) -> str:
    try:
        return iso_ms(ms)[:16].replace("T", " ") + " UTC" if ms is not None else "no time"
    except ValueError:
        return "no time"


def _hit_path(v: View, path: str, eid: str, name: str) -> str:
    """Where message file ``name`` of entry ``eid`` of session ``path`` is, from the mount's
    root."""
    session = _session_name(v, path) or posixpath.basename(path)
    at = f"{session}/nodes/{id_name(eid)}/{name}"
    if posixpath.dirname(path) == v.store.root:
        return at
    return f"{v.store.project_of(path)}/{at}"


def _hit_text(v: View, hit: Hit) -> str:
    """The text of a hit's entry, made from its line alone (a page shows the lines that
    match without parsing each hit's session: a tool result's title line, which its call
    gives, is not among them)."""
    if hit.end - hit.start > PAGE_LINE_MAX:
        return ""  # (a long message: its lines are in its file)
    try:
        fd = v.store.files.open(hit.path)
    except Unreadable:
        return ""
    try:
        raw = os.pread(fd, hit.end - hit.start, hit.start)
    except OSError:
        return ""
    finally:
        os.close(fd)
    d, _ = decode_line(raw, deep=False)
    if not isinstance(d, dict):
        return ""
    return render.render(d).decode("utf-8", "replace")


def parsed_docs(v: View, path: str, was: Indexed | None) -> Parsed:
    """(Blocking.) Session ``path`` parsed, and what to index of it: its entries past those
    ``was`` indexed, or all of them when the file is no longer the one indexed."""
    sf = v.store.session(path)
    sf.load()
    with sf.lock:  # (a copy that appends do not change, read without the lock)
        assert sf.loaded is not None
        s = sf.loaded.frozen()
    ident = s.ident
    assert ident is not None
    entries = s.parser.entries
    since = 0
    same = was is not None and was.ident[:2] == (ident.dev, ident.ino)
    if same and was is not None and 0 < was.entries <= len(entries):
        e = entries[was.entries - 1]
        since = was.entries if (e.id, e.end) == was.last else 0  # (else: rewritten since)
    last = (entries[-1].id, entries[-1].end) if entries else None
    now = Indexed((ident.dev, ident.ino, ident.size, ident.mtime_ns), len(entries), last)
    return Parsed(now, entry_docs(v, s, since), anew=since == 0)


def entry_docs(v: View, s: Loaded, since: int) -> list[Doc]:
    """The conversation entries of parsed session ``s`` from its ``since``-th entry line,
    each with the bytes of its message file (the index's text: a hit's file holds its
    words)."""
    out = []
    index = s.index
    for e in s.parser.entries[since:]:
        num = index.num.get(e.id, 0)
        if e.kind is None or not num or index.by_id.get(e.id) is not e:
            continue  # (no number, or a duplicate id the tree does not show)
        k = Key(Kind.MESSAGE, s.path, s.epoch, e.id)
        text = v.texts.rendered(s, k, keep=False)[0]
        name = render.file_name(num, render.number_width(num), e.kind)
        out.append(Doc(e.id, name, e.ts_ms, e.start, e.end, text))
    return out


KINDS = (UsageFolder(), UsageFile(), SearchFolder(), SearchResults(), SearchLink(), SearchPage())
