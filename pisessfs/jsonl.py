"""Session bytes -> header, entries and problems, incrementally.

This module owns the line grammar of a Pi session file and nothing else: it splits on
``\\n`` exactly as Pi does, parses each line on its own, and turns every line Pi would skip
into a recorded :class:`~pisessfs.model.Problem` instead of an exception. It keeps the byte
offset it has consumed, so a grown file costs only its new bytes; a last line without its
newline is parsed provisionally (Pi loads it) and parsed again when more bytes arrive.

It does not build the tree (``tree.py``) or read files (``sessions.py``).
"""

from __future__ import annotations

import gc
from datetime import datetime
from typing import Any

import orjson

from .model import CONVERSATION_TYPES, Entry, Header, Problem

BOM = b"\xef\xbb\xbf"

#: Roles whose file kind is the role itself (DESIGN.md, "File names").
_ROLE_KINDS = {
    "user": "user",
    "assistant": "assistant",
    "bashExecution": "bash",
    "system": "system",
}


def parse_ts_ms(value: object) -> int | None:
    """An ISO timestamp as Unix milliseconds, or None when it is not one (Pi: NaN)."""
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        return None


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
        self.stats = Stats()
        self.tail: Entry | None = None
        self.tail_problem: Problem | None = None
        self.first_entry_line = 0  # line of the first parsed non-header line
        self._v1_ids_noted = False

    def feed(self, buf: bytes | bytearray) -> None:
        """Parse the complete lines of ``buf[self.offset:]`` and the provisional tail."""
        was_enabled = gc.isenabled()
        gc.disable()  # millions of small objects: the collector only slows the bulk parse
        try:
            self._feed(buf)
        finally:
            if was_enabled:
                gc.enable()

    def _feed(self, buf: bytes | bytearray) -> None:
        pos = self.offset
        find = buf.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            self.lines += 1
            self._line(bytes(buf[pos:nl]), self.lines, pos, nl)
            pos = nl + 1
        self.offset = pos
        self.tail = None
        self.tail_problem = None
        if pos < len(buf):
            self._tail(bytes(buf[pos:]), pos, len(buf))

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
        self.stats.add(entry.type, value)
        if not self.first_entry_line:
            self.first_entry_line = line

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
        entry = Entry(
            id=eid,
            parent_id=parent,
            type=etype,
            ts_ms=parse_ts_ms(d.get("timestamp")),
            line=line,
            start=start,
            end=end,
            kind=file_kind(d),
            target_id=target if isinstance(target, str) else None,
            note=_note(etype, d),
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
