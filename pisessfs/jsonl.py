"""Session bytes -> header, entries and problems, incrementally.

This module owns the line grammar of a Pi session file and nothing else: it splits on
``\\n`` exactly as Pi does, parses each line on its own, and turns every line Pi would skip
into a recorded :class:`~pisessfs.model.Problem` instead of an exception. It keeps the byte
offset it has consumed, so a grown file costs only its new bytes; a last line without its
newline is parsed provisionally (Pi loads it) and parsed again when more bytes arrive.

It does not build the tree (``tree.py``) or read files (``sessions.py``).
"""

from __future__ import annotations

from typing import Any

import orjson
from orjson import JSONDecodeError
from orjson import loads as _loads

from .model import CONVERSATION_TYPES, Entry, Header, Problem, parse_ts_ms

BOM = b"\xef\xbb\xbf"

#: Roles whose file kind is the role itself (DESIGN.md, "File names").
_ROLE_KINDS = {
    "user": "user",
    "assistant": "assistant",
    "bashExecution": "bash",
    "system": "system",
}


def _clean(name: object) -> str:
    return name if isinstance(name, str) and name else "unknown"


def file_kind(d: dict[str, Any]) -> str | None:
    """The ``<kind>`` of an entry's file name, or None when the entry takes no number."""
    etype = d.get("type")
    if etype not in CONVERSATION_TYPES:
        return None
    if etype == "compaction":
        return "compaction"
    if etype == "branch_summary":
        return "branch-summary"
    if etype == "custom_message":
        return "custom-" + _clean(d.get("customType"))
    msg = d.get("message")
    role = msg.get("role") if isinstance(msg, dict) else None
    if not isinstance(role, str) or not role:
        return "message"
    if role in _ROLE_KINDS:
        return _ROLE_KINDS[role]
    if role == "toolResult":
        return "tool-" + _clean(msg.get("toolName") if isinstance(msg, dict) else None)
    if role in ("custom", "hookMessage"):
        return "custom-" + _clean(msg.get("customType") if isinstance(msg, dict) else None)
    return role


#: One shared string per known type instead of one per line (memory of big sessions).
_TYPES = {
    t: t
    for t in (
        "message",
        "custom_message",
        "compaction",
        "branch_summary",
        "model_change",
        "thinking_level_change",
        "usage",
        "context_edit",
        "label",
        "session_info",
        "custom",
    )
}

_NOTE_FIELDS = {
    "label": "label",
    "model_change": "modelId",
    "thinking_level_change": "thinkingLevel",
    "session_info": "name",
}


def _note(etype: str, d: dict[str, Any]) -> str | None:
    field = _NOTE_FIELDS.get(etype)
    value = d.get(field) if field else None
    return value if isinstance(value, str) else None


def decode_line(raw: bytes) -> tuple[Any, str | None]:
    """Parse one line like Pi: (value, note) on success, (None, why) on failure.

    Pi decodes with replacement characters before ``JSON.parse``, so a line with invalid
    UTF-8 inside a string still loads there; it loads here too, with a note.
    """
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        try:
            replaced = raw.decode("utf-8", "replace")
            return orjson.loads(replaced), "invalid UTF-8 (replaced with U+FFFD, as Pi does)"
        except orjson.JSONDecodeError:
            return None, "invalid UTF-8, and not JSON"
    return None, error


class Stats:
    """Facts gathered while indexing, so session.json needs no second pass."""

    __slots__ = ("by_type", "cost", "last_activity_ms", "messages", "models", "name", "tokens")

    def __init__(self) -> None:
        self.by_type: dict[str, int] = {}
        self.models: dict[str, int] = {}
        self.tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
        self.cost = 0.0
        self.name: str | None = None
        self.messages = 0
        self.last_activity_ms: int | None = None  # Pi's "modified": newest user/assistant turn

    def add(self, etype: str, d: dict[str, Any]) -> None:
        self.by_type[etype] = self.by_type.get(etype, 0) + 1
        if etype == "session_info":
            name = d.get("name")
            self.name = name.strip() or None if isinstance(name, str) else None
        elif etype == "message":
            self.messages += 1
            msg = d.get("message")
            if not isinstance(msg, dict):
                return
            if msg.get("role") in ("user", "assistant") and "content" in msg:
                ts = msg.get("timestamp")
                t = ts if isinstance(ts, int | float) else parse_ts_ms(d.get("timestamp"))
                if t is not None and not isinstance(t, bool):
                    self.last_activity_ms = max(self.last_activity_ms or 0, int(t))
            if msg.get("role") == "assistant":
                self._add_assistant(msg)

    def _add_assistant(self, msg: dict[str, Any]) -> None:
        model = msg.get("model")
        if isinstance(model, str):
            provider = msg.get("provider")
            key = f"{provider}/{model}" if isinstance(provider, str) else model
            self.models[key] = self.models.get(key, 0) + 1
        usage = msg.get("usage")
        if not isinstance(usage, dict):
            return
        for src, dst in (
            ("input", "input"),
            ("output", "output"),
            ("cacheRead", "cacheRead"),
            ("cacheWrite", "cacheWrite"),
            ("totalTokens", "total"),
        ):
            v = usage.get(src)
            if isinstance(v, int | float) and not isinstance(v, bool):
                self.tokens[dst] += int(v)
        cost = usage.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        if isinstance(total, int | float) and not isinstance(total, bool):
            self.cost += float(total)


class Parser:
    """Consumes a session file's bytes, resuming where it stopped.

    ``entries`` holds every entry line in file order (duplicates included: the tree decides
    which wins). ``tail`` is the provisional entry of a last line without its newline.
    """

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.offset = 0  # bytes consumed: always just after a newline
        self.lines = 0  # complete lines consumed
        self.header: Header | None = None
        self.linear = False  # v1 (or a file without header version): ids are ours
        self.entries: list[Entry] = []
        self.problems: list[Problem] = []
        self.tail: Entry | None = None
        self.tail_problem: Problem | None = None
        self._pending = b""  # bytes after the last newline, parsed again with the next feed
        self._v1_ids_noted = False

    def feed(self, data: bytes) -> None:
        """Parse ``data``, the bytes appended to the file since the last feed (all of it the
        first time): its complete lines, then a last line without newline provisionally."""
        pos = self.offset  # file offset of the first byte not consumed (the pending line's)
        pending = self._pending
        find = data.find
        fast = self._fast
        at = 0
        # Line by line (not split()): each line's copy is freed at once, so a big file never
        # has a second copy of itself in memory. A line begun in an earlier feed is joined
        # with its end only (never the whole chunk).
        while (nl := find(b"\n", at)) >= 0:
            raw = pending + data[at:nl] if pending else data[at:nl]
            start = pos
            pos += len(raw) + 1
            pending = b""
            self.lines += 1
            if not fast(raw, start, pos - 1):
                self._line(raw, self.lines, start, pos - 1)
            at = nl + 1
        tail = pending + data[at:] if pending else data[at:]
        self._pending = tail  # after the last newline: b"" or a line still being written
        self.offset = pos
        self.tail = None
        self.tail_problem = None
        if tail:
            self._tail(tail, pos, pos + len(tail))

    def _fast(self, raw: bytes, start: int, end: int) -> bool:
        """The common line (a well-formed v2/v3 entry) in one go; False: take the slow path.

        This is the hot loop of a 100 MB session: it does only what the tree needs.
        """
        if self.header is None or self.linear:
            return False
        try:
            d = _loads(raw)
        except JSONDecodeError:
            return False
        if type(d) is not dict:
            return False
        etype = d.get("type")
        eid = d.get("id")
        parent = d.get("parentId")
        if (
            type(etype) is not str
            or etype == "session"
            or type(eid) is not str
            or not eid
            or not (parent is None or type(parent) is str)
        ):
            return False
        if etype == "message":
            msg = d.get("message")
            role = msg.get("role") if type(msg) is dict else None
            kind = _ROLE_KINDS.get(role) if type(role) is str else None
            if kind is None:
                kind = file_kind(d)
            target = note = None
        else:
            kind = file_kind(d) if etype in CONVERSATION_TYPES else None
            target = d.get("targetId")
            target = target if type(target) is str else None
            note = _note(etype, d) if etype in _NOTE_FIELDS else None
        ts = d.get("timestamp")
        self.entries.append(
            Entry(
                eid,
                parent or None,
                etype,
                ts if type(ts) is str else None,
                self.lines,
                start,
                end,
                kind,
                target,
                note,
            )
        )
        return True

    def _tail(self, raw: bytes, start: int, end: int) -> None:
        """Parse a last line that has no newline yet, without committing it to the state.

        Pi loads such a line when it parses; the next feed parses it again, complete or not.
        """
        line = self.lines + 1
        detail = "last line has no final newline (torn write?)"
        value, why = decode_line(raw) if raw.strip() else (None, "blank")
        if isinstance(value, dict) and (self.header is not None or self.entries):
            if value.get("type") != "session":
                self.tail, _ = self._make_entry(value, line, start, end)
        elif isinstance(value, dict):
            detail += "; the only line is not terminated"
        elif why:
            detail += "; " + why
        self.tail_problem = Problem(line, "torn-tail", detail)

    def _line(self, raw: bytes, line: int, start: int, end: int) -> None:
        if line == 1 and raw.startswith(BOM):
            self.problems.append(
                Problem(1, "bom", "file starts with a UTF-8 BOM: Pi does not load this file")
            )
            raw = raw[len(BOM) :]
            start += len(BOM)
        if not raw.strip():
            return
        value, why = decode_line(raw)
        if value is None:
            self.problems.append(Problem(line, "malformed-json", why or "not JSON"))
            return
        if why:
            self.problems.append(Problem(line, "invalid-utf8", why))
        if not isinstance(value, dict):
            self.problems.append(Problem(line, "not-an-object", "line is JSON but not an object"))
            return
        if self.header is None and not self.entries:
            self._first(value, line)
            if self.header is not None:
                return
        elif value.get("type") == "session":
            self.problems.append(Problem(line, "extra-header", "second session header ignored"))
            return
        entry, problems = self._make_entry(value, line, start, end)
        self.problems.extend(problems)
        self.entries.append(entry)

    def _first(self, d: dict[str, Any], line: int) -> None:
        if d.get("type") == "session" and isinstance(d.get("id"), str):
            self.header = Header(d, line)
            version = self.header.version
            self.linear = version is None or version < 2
            if "version" in d and (version is None or version > 3):
                self.problems.append(
                    Problem(line, "unknown-version", f"header version {d.get('version')!r}")
                )
            return
        self.problems.append(
            Problem(line, "no-header", "first line is not a session header: Pi does not load it")
        )
        self.linear = not isinstance(d.get("id"), str)

    def _make_entry(
        self, d: dict[str, Any], line: int, start: int, end: int
    ) -> tuple[Entry, list[Problem]]:
        """An entry for line ``d``; reads the state (the v1 chain) but does not change it."""
        problems: list[Problem] = []
        etype = d.get("type")
        if not isinstance(etype, str):
            problems.append(Problem(line, "no-type", "entry has no type"))
            etype = "unknown"
        eid, parent = self._ids(d, line, problems)
        target = d.get("targetId")
        ts = d.get("timestamp")
        entry = Entry(
            eid,
            parent,
            etype,
            ts if isinstance(ts, str) else None,
            line,
            start,
            end,
            file_kind(d),
            target if isinstance(target, str) else None,
            _note(etype, d),
        )
        return entry, problems

    def _ids(self, d: dict[str, Any], line: int, problems: list[Problem]) -> tuple[str, str | None]:
        if self.linear and "id" in d and not self._v1_ids_noted:
            self._v1_ids_noted = True
            problems.append(
                Problem(
                    line,
                    "no-version",
                    "entries have ids but the header has no version: "
                    "Pi treats the file as v1, replaces every id and flattens the tree",
                )
            )
        if self.linear:
            # v1: no ids; Pi migrates to one chain in file order. Ours contain "L", which no
            # real 8-hex id does, and depend only on the line, so they are stable.
            prev = self.entries[-1].id if self.entries else None
            return f"L{line}", prev
        eid = d.get("id")
        if not isinstance(eid, str) or not eid:
            problems.append(Problem(line, "no-id", "entry has no id: shown as a root"))
            eid = f"L{line}"
        parent = d.get("parentId")
        if parent is not None and not isinstance(parent, str):
            problems.append(Problem(line, "bad-parent", f"parentId {parent!r} is not a string"))
            parent = None
        return eid, parent or None
