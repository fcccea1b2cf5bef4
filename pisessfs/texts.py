"""What a parsed session shows, entry by entry: the names of its folders and files, each
entry's message file and images (kept with the parsed session, ``Derived.renders_kept``,
which the parse cache counts), the one-file views of a branch
(``nodes/<id>.md``) and the pieces ``conversation.md`` is made of.

Everything here is a function of the parsed session (``sessions.Loaded``) and the entry: an
entry shows the same bytes in every folder that shows it, and only ancestors and ids decide
what a file says of other entries, so what is made once stays right while the session's
index keeps its meaning (``epoch``, ``rebuilds``). Nothing here blocks for long but a long
branch's view, which ``branch_step`` hands back as work to run off the loop.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

from . import onefile, render
from .errors import NotFound
from .inodes import Key
from .kind import Kind
from .loaded import INLINE_BYTES, Loaded, Rendered, Work
from .model import Entry
from .names import id_name, name_id

LISTINGS_KEPT = 16  # entry folders' listings kept per session (each is its whole path)
_NUMBER = re.compile(r"([0-9]{4,})-")  # ASCII only: int() would take any script's digits
CALL_SEARCH = 256  # entries looked at above a tool result for its call (results of one
# assistant message follow each other; a hostile file gets no further)


class Texts:
    """Names and texts of parsed sessions' entries, with the cache of message files."""

    def __init__(self, counted: Callable[[str, int], None] = lambda path, grew: None) -> None:
        """``counted(path, grew)``: session ``path`` holds ``grew`` bytes more of renders
        (the parse cache counts them against its cap)."""
        self._counted = counted

    def has_branch(self, s: Loaded, eid: str) -> bool:
        """Whether ``nodes/<eid>.md`` of ``s`` is made and kept."""
        return Key(Kind.BRANCH, s.path, s.epoch, eid) in s.memo.renders_kept

    def entry(self, s: Loaded, eid: str) -> Entry:
        e = s.index.by_id.get(eid)
        if e is None:
            raise NotFound(eid)
        return e

    def entry_ns(self, s: Loaded, eid: str) -> int:
        """An entry's time, as a node's mtime."""
        return (self.entry(s, eid).ts_ms or 0) * 1_000_000

    def rendered(
        self, s: Loaded, key: Key, d: dict[str, Any] | None = None, keep: bool = True
    ) -> Rendered:
        """An entry's message file and its images, from one parse (``d``, when the caller
        has it), kept in a byte-capped LRU. ``keep`` False: a render for conversation.md,
        neither looked up nor kept (a walk reads the text there, not in the message files:
        keeping each entry of a year of sessions cost a twentieth of a first walk, and
        pushed out what was read)."""
        hit = self._cached(key, s) if keep else None
        if hit is not None:
            return hit
        e = self.entry(s, key.eid)
        d = s.parsed(e) if d is None else d
        done = (render.render(d, self.context(s, e, d)), render.images(d))
        return self._keep(key, done, s) if keep else done

    def context(self, s: Loaded, e: Entry, d: dict[str, Any]) -> render.Context:
        """What entry ``e``'s file shows of other entries: the call a tool result answers
        (in the nearest assistant message above it) and the file names of the entries a
        compaction or branch summary names. Only ancestors and ids: fixed forever."""
        msg = render.message_of(d)
        call_id = msg.get("toolCallId")
        if e.kind == "assistant":  # its results come next: their calls, without a parse
            s.memo.calls = (e, render.tool_calls(d))
        if msg.get("role") == "toolResult" and isinstance(call_id, str):
            return render.Context(call=self._call_above(s, e, call_id))
        named = d.get("firstKeptEntryId") if e.type == "compaction" else d.get("fromId")
        if e.type not in ("compaction", "branch_summary") or not isinstance(named, str):
            return render.NO_CONTEXT
        name = self.file_of(s, named, e)
        return render.Context(names={named: name} if name else {})

    def _call_above(self, s: Loaded, e: Entry, call_id: str) -> dict[str, Any] | None:
        cur = e.parent_id
        for _ in range(CALL_SEARCH):
            above = s.index.by_id.get(cur) if cur is not None else None
            if above is None:
                return None
            if above.kind == "assistant":
                return self._calls_of(s, above).get(call_id)
            cur = above.parent_id
        return None

    def _calls_of(self, s: Loaded, e: Entry) -> dict[str, dict[str, Any]]:
        """The tool calls of assistant entry ``e`` by id; the last one's are kept, as the
        results of one message follow it (a render parses the message once, not per result)."""
        last = s.memo.calls
        if last is not None and last[0] is e:
            return last[1]
        calls = render.tool_calls(s.parsed(e))
        s.memo.calls = (e, calls)
        return calls

    def file_of(self, s: Loaded, eid: str, above: Entry) -> str | None:
        """The file name of entry ``eid`` in the folder of its own node, when it comes
        before ``above`` in the file: what ``above`` shows must not change when a later
        line brings the entry it names (its file is cached, conversation.md made again)."""
        e = s.index.by_id.get(eid)
        num = s.index.num.get(eid, 0)
        if e is None or e.kind is None or not num or e.line >= above.line:
            return None
        return render.file_name(num, render.number_width(num), e.kind)

    def _keep(self, key: Key, done: Rendered, s: Loaded) -> Rendered:
        """Keep a render with its session (an index built again meanwhile has renders of
        its own: this one, of the old index, goes with the old ones)."""
        grew = s.memo.renders_kept.put(key, done)
        if grew:
            self._counted(s.path, grew)
        return done

    def _cached(self, key: Key, s: Loaded) -> Rendered | None:
        """A render kept, made the most recently used."""
        return s.memo.renders_kept.get(key)

    def piece(
        self, s: Loaded, e: Entry, d: dict[str, Any] | None = None, keep: bool = True
    ) -> onefile.Piece:
        """What a one-file view shows of entry ``e`` (parsed as ``d``, when the caller has
        it; ``keep``: see :meth:`rendered`)."""
        if not e.numbered:
            d = s.parsed(e) if d is None else d
            if e.type == "context_edit":  # what the model stops seeing, said in full
                target = d.get("targetId")
                name = self.file_of(s, target, e) if isinstance(target, str) else None
                return onefile.Piece(e, 0, b"", (), *render.context_edit(d, name))
            return onefile.Piece(e, 0, b"", (), render.preview(d), render.note_detail(d))
        num = s.index.num.get(e.id, 0)
        key = Key(Kind.MESSAGE, s.path, s.epoch, e.id)
        # (a line whose id a later line took renders as the winner, as the entry folders do)
        body, images = self.rendered(s, key, d if s.index.by_id.get(e.id) is e else None, keep)
        width = render.number_width(num)  # its folder's: the entry is the last file there
        kind = e.kind or "message"
        names = [
            render.image_name(num, width, kind, k, ext) for k, (ext, _) in enumerate(images, 1)
        ]
        return onefile.Piece(e, num, body, names, "")

    def branch_text(self, s: Loaded, eid: str) -> bytes:
        """``nodes/<id>.md``: every entry of the path root→``eid``, in order."""
        key = Key(Kind.BRANCH, s.path, s.epoch, eid)
        hit = self._cached(key, s)
        if hit is not None:
            return hit[0]
        self.entry(s, eid)
        data = b"".join(self._branch_block(s, i) for i in s.index.path(eid))
        return self._keep(key, (data, []), s)[0]

    def _branch_block(self, s: Loaded, eid: str) -> bytes:
        return onefile.block(self.piece(s, s.index.by_id[eid]), "../nodes/" + id_name(eid))

    def branch_size(self, s: Loaded, eid: str) -> int:
        """The size of ``nodes/<id>.md`` without making it: the size of its parent's view
        plus its own block, kept per entry (``stat`` of every branch link, as ``rg`` does
        while it walks, costs one block per entry, not one path per leaf)."""
        sizes = s.memo.branch_sizes
        self.entry(s, eid)
        todo: list[str] = []
        cur: str | None = eid
        while cur is not None and cur not in sizes:
            todo.append(cur)
            cur = s.index.parent[cur]
        total = sizes[cur] if cur is not None else 0
        for i in reversed(todo):
            total += len(self._branch_block(s, i))
            sizes[i] = total
        return sizes[eid]

    def branch_step(self, s: Loaded, eid: str, whole: bool) -> Work | None:
        """A long path's size (``whole``: its text) is made off the loop, then kept."""
        if s.size < INLINE_BYTES:
            return None
        if whole:
            if self.has_branch(s, eid):
                return None
            return lambda: self.branch_text(s, eid)
        if eid in s.memo.branch_sizes:
            return None
        return lambda: self.branch_size(s, eid)

    def folder_name(self, s: Loaded, leaf: str) -> str:
        """``<id>-<slug of the branch's last user message>`` (just ``<id>`` without one)."""
        memo = s.memo.folder
        name = memo.get(leaf)
        if name is None:
            text = ""
            e = s.index.last_of_kind(leaf, "user")
            if e is not None:
                text = render.content_text(render.message_of(s.parsed(e)).get("content"))
            slug = render.slug(text)
            base = id_name(leaf)
            name = memo[leaf] = f"{base}-{slug}" if slug else base
        return name

    def folder_of(self, s: Loaded, eid: str) -> str:
        if s.index.is_leaf(eid):
            return "leaves/" + self.folder_name(s, eid)
        return "nodes/" + id_name(eid)

    def id_named(self, s: Loaded, name: str) -> str | None:
        """The entry id a name of ``nodes/`` or ``leaves/`` stands for, if it is one: its
        escaped name (``id_name``, what listings show), or the id itself when it is a name
        as it is (``-rf``, ``.7``, ``..12``) and no id's escaped name."""
        eid = name_id(name, s.index.by_id)
        if eid is not None and eid in s.index.by_id:
            return eid
        return name if name in s.index.by_id and name not in (".", "..") else None

    def leaf_by_name(self, s: Loaded, name: str) -> str:
        """The entry of a ``leaves/`` name: ``<id>`` or ``<id>-<slug>``.

        A former leaf (one that has children now) still resolves by its old name, so a path
        a shell or an editor holds keeps working after a commit below it.
        """
        eid = self.id_named(s, name)
        if eid is not None:
            return eid
        cut = name.find("-")
        while cut > 0:  # ids may contain "-" themselves (UUIDs): try each cut
            cand = self.id_named(s, name[:cut])
            if cand is not None and self.folder_name(s, cand) == name:
                return cand
            cut = name.find("-", cut + 1)
        raise NotFound(name)

    def file_named(self, s: Loaded, key: Key, name: str) -> Key:
        """A numbered file (or image) of entry folder ``key`` by its name, found from the
        number it starts with: never the whole listing, which renders every entry of the
        path (sed and editors look up names that are not there, in folders of 50,000 files
        whose leaf moves with every append)."""
        m = _NUMBER.match(name)
        last = s.index.files_on_path(key.eid)
        num = int(m.group(1)) if m else 0
        nid = s.index.numbered_at(key.eid, num) if 1 <= num <= last else None
        # A path that grows past 9,999 files numbers them with more digits (00001-user.md),
        # and the narrower names it had still lead there, unlisted: ``current/0001-user.md``
        # keeps resolving while the session Pi writes grows.
        width = len(m.group(1)) if m else 0
        if nid is None or width > render.number_width(last):
            raise NotFound(name)
        e = s.index.by_id[nid]
        kind = e.kind or "message"
        found = Key(Kind.MESSAGE, key.path, s.epoch, nid)
        if name == render.file_name(num, width, kind):
            return found
        for k, ext in enumerate(render.image_exts(s.parsed(e)), start=1):
            if name == render.image_name(num, width, kind, k, ext):
                return found._replace(k=k)
        raise NotFound(name)

    def files(self, s: Loaded, key: Key) -> list[tuple[str, Key]]:
        """The numbered files (and images) of entry folder ``key``, in path order (the last
        few listings kept: a folder's names never change)."""
        memo = s.memo.files
        out = memo.get(key.eid)
        if out is not None:
            with contextlib.suppress(KeyError):  # a render thread may have dropped it
                memo.move_to_end(key.eid)
            return out
        ids = s.index.numbered_path(key.eid)
        width = render.number_width(len(ids))
        out = []
        for nid in ids:
            e = s.index.by_id[nid]
            num, kind = s.index.num[nid], e.kind or "message"
            msg_key = Key(Kind.MESSAGE, key.path, s.epoch, nid)
            out.append((render.file_name(num, width, kind), msg_key))
            for k, (ext, _) in enumerate(self.rendered(s, msg_key)[1], start=1):
                out.append((render.image_name(num, width, kind, k, ext), msg_key._replace(k=k)))
        memo[key.eid] = out
        while len(memo) > LISTINGS_KEPT:
            with contextlib.suppress(KeyError):
                memo.popitem(last=False)
        return out

    def listed(self, s: Loaded) -> list[str]:
        listed = s.memo.listed
        if listed is None:
            listed = s.memo.listed = s.index.listed_leaves()
        return listed
