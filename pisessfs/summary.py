"""The per-session files computed from the whole tree: ``tree.txt`` and ``session.json``.

This module owns their text. It reads a :class:`~pisessfs.sessions.Loaded` session and the
leaf folder names the view gives it; it does not decide the layout or touch the kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from . import render
from .jsonl import Parser
from .model import Entry, iso_or_none, parse_ts_ms, utc_clock
from .sessions import Loaded

FolderOf = Callable[[str], str]  # entry id -> "leaves/<name>" or "nodes/<id>"


class Previews:
    """Every entry's preview, made once: a growing session's tree.txt is rendered again
    after each change, and only the new lines are parsed for it (entries never change).

    Shared by the frozen copies a render works on (an entry-derived memo), hence the lock.
    Keyed by a line's start and end: a torn tail that is completed later is made again.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0  # entries of the file looked at, in file order
        self.texts: dict[int, tuple[int, str]] = {}  # line start -> (end, preview)
        # tool call id -> how a result shows its call (the preview, not the call: a
        # session's calls hold every edit and write it made)
        self.calls: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.texts)  # (what the parse cache counts it as, see Loaded.nbytes)

    def of(self, s: Loaded) -> dict[str, str]:
        """One preview per winning entry, tool results shown as their call."""
        with self.lock:
            entries = s.entries
            for i, e in enumerate(entries[self.done :], self.done):
                s.count(i, e, self._add(s, e))  # one parse for the preview and the stats
            self.done = len(s.parser.entries)  # a torn tail is looked at again next time
            out: dict[str, str] = {}
            for eid, e in s.index.by_id.items():
                hit = self.texts.get(e.start)
                if hit is None or hit[0] != e.end:
                    self._add(s, e)
                    hit = self.texts.get(e.start)
                if hit is not None:
                    out[eid] = hit[1]
            return out

    def offer(self, s: Loaded, e: Entry) -> dict[str, Any] | None:
        """Entry ``e`` parsed for conversation.md, which shows the file's entries in the order
        this makes previews: when it is the next one here, its preview and stats are made
        from that parse, which is given back for the render (one decode of a line for both
        files, where a listing's renders decoded each line twice). None when it is not the
        next."""
        with self.lock:
            entries = s.parser.entries
            i = self.done
            if i >= len(entries) or entries[i] is not e:
                return None
            d = self._add(s, e)
            s.count(i, e, d)
            self.done = i + 1
            return d

    def _add(self, s: Loaded, e: Entry) -> dict[str, Any]:
        d = s.parsed(e)
        if not d:
            return d
        msg = render.message_of(d)
        if msg.get("role") == "assistant":
            for cid, c in render.tool_calls(d).items():
                self.calls[cid] = render.call_preview(c)
        call_id = msg.get("toolCallId") if msg.get("role") == "toolResult" else None
        call = self.calls.get(call_id) if isinstance(call_id, str) else None
        self.texts[e.start] = (e.end, render.preview(d, call))
        return d


def previews_of(s: Loaded) -> Previews:
    """Session ``s``'s previews, as made so far."""
    made = s.memo.previews
    if made is None:
        made = s.memo.previews = Previews()
    return made


def previews(s: Loaded) -> dict[str, str]:
    """One preview per winning entry (see :class:`Previews`)."""
    return previews_of(s).of(s)


def tree_txt(s: Loaded, folder_of: FolderOf) -> bytes:
    """Every entry in tree order with connectors (indenting only at branch points)."""
    ix = s.index
    texts = previews(s)
    width = render.number_width(max(ix.num.values(), default=0))
    out = _Chunks()
    out.add(_about(s))
    head = f"# {_count(len(ix.order), 'entry', 'entries')}, "
    head += _count(len(ix.all_leaves()), "leaf", "leaves")
    if ix.resume:
        head += f"; resume leaf {ix.resume} ({folder_of(ix.resume)})"
    out.add(head)
    # stack items: (id, prefix for this line, prefix for what follows below it)
    roots = ix.roots
    stack: list[tuple[str, str, str]] = []
    for i, r in reversed(list(enumerate(roots))):
        stack.append(_branch(r, "", i == len(roots) - 1) if len(roots) > 1 else (r, "", ""))
    while stack:
        eid, lead, rest = stack.pop()
        out.add(_row(s, eid, _shown(lead), texts, width))
        kids = ix.children.get(eid, [])
        if len(kids) == 1:
            stack.append((kids[0], rest, rest))
        else:
            for i, k in reversed(list(enumerate(kids))):
                stack.append(_branch(k, rest, i == len(kids) - 1))
    problems = s.problems()
    if problems:
        out.add("")
        out.add(f"# problems ({len(problems)})")
        for p in problems:
            out.add(f"line {p.line}: {p.kind}: {p.detail}")
    return out.bytes()


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _about(s: Loaded) -> str:
    """The first line: the session's name, cwd, creation time, messages and cost."""
    stats = s.stats()
    header = _header_fields(s)
    cwd = header.get("cwd") if header else None
    created = _created(s)
    ms = parse_ts_ms(created)
    p = s.parser
    name = stats.name if p.harness is None else p.harness_info.get("name")
    bits = [
        " ".join(name.split()) if isinstance(name, str) and name.strip() else "unnamed",
        " ".join(cwd.splitlines()) if isinstance(cwd, str) and cwd else "no cwd",
        f"created {utc_clock(ms)} UTC" if ms is not None else "no creation time",
        _count(stats.messages, "message", "messages"),
        f"${stats.cost:.4f}",
    ]
    return "# " + " · ".join(bits)


def _header_fields(s: Loaded) -> dict[str, Any] | None:
    p = s.parser
    return p.header.fields if p.header else p.harness.fields if p.harness else None


def _created(s: Loaded) -> str | None:
    header = _header_fields(s)
    stamp = header.get("createdAt" if s.parser.harness else "timestamp") if header else None
    return stamp if isinstance(stamp, str) else iso_or_none(stamp)


#: Tree connectors shown in full down to this many branch levels; deeper rows show the
#: number of levels left out, then the last ones (a session forked 600 times along one line
#: would otherwise give each row a prefix of 1,800 characters: a tree.txt of 600 MB).
MAX_LEVELS = 16


def _shown(lead: str) -> str:
    cut = len(lead) - 3 * MAX_LEVELS
    return f"⋯{cut // 3} " + lead[cut:] if cut > 0 else lead


class _Chunks:
    """Lines encoded a few thousand at a time: no single call of a big session's rendering
    holds the interpreter for long (each C call keeps other threads, the request loop
    among them, waiting until it returns)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.done: list[bytes] = []

    def add(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) >= 4096:
            self._flush()

    def _flush(self) -> None:
        self.lines.append("")  # each chunk ends with its newline
        self.done.append(render.encode("\n".join(self.lines)))  # lone surrogates: U+FFFD
        self.lines = []

    def bytes(self) -> bytes:
        if self.lines:
            self._flush()
        return b"".join(self.done)


def _branch(eid: str, prefix: str, last: bool) -> tuple[str, str, str]:
    return (eid, prefix + ("└─ " if last else "├─ "), prefix + ("   " if last else "│  "))


def _row(s: Loaded, eid: str, lead: str, texts: dict[str, str], width: int) -> str:
    ix = s.index
    e = ix.by_id[eid]
    num = f"{ix.num[eid]:0{width}d}" if e.numbered else "·".rjust(width)
    row = f"{num} {eid:<8} {lead}{texts.get(eid, '[unreadable]')}"
    if eid in ix.labels:
        row += f"  [{ix.labels[eid]}]"
    if eid == ix.resume:
        row += "  ← resume"
    return row


def session_json(s: Loaded, folder_of: FolderOf, listed: set[str]) -> bytes:
    """Header fields and derived facts, as pretty JSON."""
    ix = s.index
    p = s.parser
    header = _header_fields(s)
    previews(s)  # its pass counts the stats: tree.txt, rendered next in a walk, parses nothing
    stats = s.stats()
    created = _created(s)
    last = stats.last_activity_ms
    modified = iso_or_none(last) if last else None  # Pi: only a time after 1970 counts
    doc: dict[str, Any] = {
        "file": s.path,
        "id": header.get("id") if header else None,
        "version": p.header.version if p.header else None,
        "storage": _storage(p),
        "cwd": header.get("cwd") if header else None,
        "name": stats.name if p.harness is None else p.harness_info.get("name"),
        "parentSession": header.get("parentSession") if header else None,
        "created": created,
        "modified": modified or created,
        "header": header,
        "counts": {
            "lines": p.lines + (1 if p.tail_problem else 0),
            "entries": len(ix.order),
            "messages": stats.messages,
            "byType": dict(sorted(stats.by_type.items())),
        },
        "models": stats.models,
        "tokens": stats.tokens,
        "cost": round(stats.cost, 6),
        "resumeLeaf": {"id": ix.resume, "folder": folder_of(ix.resume)} if ix.resume else None,
        "leaves": [
            {
                "id": leaf,
                "folder": folder_of(leaf),
                "listed": leaf in listed,
                "files": ix.files_on_path(leaf),
            }
            for leaf in ix.all_leaves()
        ],
        "labels": ix.labels if p.harness is None else p.harness_info.get("labels", {}),
        "problems": [pr.as_dict() for pr in s.problems()],
    }
    return render.dumps(doc) + b"\n"  # any value of the file, lone surrogates included


def _storage(p: Parser) -> dict[str, Any]:
    """Which format the file is in: a Pi session, or Pi's harness storage (read-only)."""
    if p.harness is None:
        return {"kind": "pi session"}
    info = p.harness_info
    return {
        "kind": "pi harness storage",
        "version": p.harness.version,
        "lanes": info.get("lanes", {}),
        "lines": info.get("lines", {}),
    }
