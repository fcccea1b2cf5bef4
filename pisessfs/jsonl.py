"""Session bytes -> header, entries and problems, incrementally.

This module owns the line grammar of a Pi session file and nothing else: it splits on
``\\n`` exactly as Pi does, parses each line on its own as ``JSON.parse`` would, and turns
every line Pi would skip into a recorded :class:`~pisessfs.model.Problem` instead of an
exception. It keeps the byte offset it has consumed, so a grown file costs only its new
bytes; a last line without its newline is parsed provisionally (Pi loads it) and parsed
again when more bytes arrive.

Every field of every line may hold any JSON value: a value of the wrong type is a problem
of its entry (or simply not used), never an exception. What Pi 1.6.0 itself does with odd
values was checked against its ``SessionManager``: a line that parses to ``null``, ``false``,
``0`` or ``""`` is skipped like a blank one, any other value is an entry (an array or a
number too: an entry without id); the first such value must be the session header; the
header's ``version`` is compared as JavaScript compares (``"3"`` and ``[3]`` are 3, a
missing or null version is 1).

It does not build the tree (``tree.py``) or read files (``sessions.py``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import msgspec
from orjson import JSONDecodeError
from orjson import loads as _loads

from .model import (
    CONVERSATION_TYPES,
    Entry,
    Harness,
    Header,
    Problem,
    iso_or_none,
    js_trim,
    ms_value,
    parse_ts_ms,
)

BOM = b"\xef\xbb\xbf"

#: Roles whose file kind is the role itself (DESIGN.md, "File names").
_ROLE_KINDS = {
    "user": "user",
    "assistant": "assistant",
    "bashExecution": "bash",
    "system": "system",
}
_MAX_KIND = 255  # a file name holds at most 255 bytes anyway


def _clean(name: object) -> str:
    return name[:_MAX_KIND] if isinstance(name, str) and name else "unknown"


_TOOL_KINDS: dict[str, str] = {}  # tool name -> "tool-<name>", one string per tool


def _tool_kind(name: object) -> str:
    """The kind of a tool result's file, from its ``toolName``: ``tool-<toolName>`` (one
    shared string per name: a big session has tens of thousands, of a dozen tools)."""
    if type(name) is str:
        kind = _TOOL_KINDS.get(name)
        if kind is None:
            kind = "tool-" + _clean(name)
            if len(name) <= 64 and len(_TOOL_KINDS) < 4096:  # (hostile names: it stays small)
                _TOOL_KINDS[name] = kind
        return kind
    return "tool-" + _clean(name)


class MessageHead(msgspec.Struct):
    """What the index and the usage count need of a message line's ``message``."""

    role: Any = None
    toolName: Any = None  # noqa: N815 (Pi's name)
    provider: Any = None
    model: Any = None
    responseModel: Any = None  # noqa: N815 (Pi's name)
    usage: Any = None


class MessageLine(msgspec.Struct):
    """What the index and the usage count (``usage``) need of a line: the rest is checked
    as JSON, never built."""

    type: Any = None
    id: Any = None
    parentId: Any = None  # noqa: N815 (Pi's name)
    timestamp: Any = None
    provider: Any = None
    model: Any = None
    usage: Any = None
    message: MessageHead | None = None


#: A line's header fields in one pass that validates the whole line as JSON and builds
#: nothing else (a big session's bytes are its messages' contents: 3x faster than decoding
#: them all). A repeated key is won by the last, as in ``JSON.parse``. One skim for both
#: the index and the usage count: a render worker skimmed each assistant line twice.
skim = msgspec.json.Decoder(MessageLine).decode


def file_kind(d: dict[str, Any]) -> str | None:
    """The ``<kind>`` of an entry's file name, or None when the entry takes no number."""
    etype = d.get("type")
    if type(etype) is not str or etype not in CONVERSATION_TYPES:
        return None
    if etype == "compaction":
        return "compaction"
    if etype == "branch_summary":
        return "branch-summary"
    if etype == "custom_message":
        return "custom-" + _clean(d.get("customType"))
    msg = d.get("message")
    role = msg.get("role") if isinstance(msg, dict) else None
    if not isinstance(msg, dict) or not isinstance(role, str) or not role:
        return "message"
    if role in _ROLE_KINDS:
        return _ROLE_KINDS[role]
    if role == "toolResult":
        return _tool_kind(msg.get("toolName"))
    if role in ("custom", "hookMessage"):
        return "custom-" + _clean(msg.get("customType"))
    return role[:_MAX_KIND]


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


def brief(v: object, limit: int = 60) -> str:
    """A short description of a JSON value for a problem's detail (never its whole size)."""
    if isinstance(v, dict):
        return "a JSON object"
    if isinstance(v, list):
        return "a JSON array"
    try:
        text = repr(v)
    except ValueError:  # an integer too long to print
        return "a huge number"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- JSON as JSON.parse reads it ------------------------------------------------------------


def _js_int(text: str) -> int | float:
    """An integer literal: exact within 64 bits (as orjson), else the double JavaScript
    makes of it (``1e400`` digits are Infinity there too)."""
    if len(text) <= 20:
        v = int(text)
        if -(1 << 63) <= v < (1 << 64):
            return v
    return float(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: JSON.parse rejects them


_DECODER = json.JSONDecoder(parse_int=_js_int, parse_constant=_no_constant)
_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def loads_js(text: str, deep: bool = True) -> Any:
    """``JSON.parse`` of a str: what orjson refuses but JavaScript accepts (lone surrogate
    escapes, numbers past 64 bits or past a double, any depth), and nothing more (NaN and
    Infinity are not JSON). Raises ValueError (or JSONDecodeError) when it is not JSON, and
    when ``deep`` is False and it nests past Python's recursion limit (parsing that takes
    a slow parser of our own)."""
    try:
        return _DECODER.decode(text)
    except RecursionError:  # V8's parser is iterative: nesting has no limit there
        if not deep:
            raise ValueError("nested too deep for a quick look") from None
        return _parse_deep(text)


def _key(s: str, i: int) -> tuple[str, int]:
    if s[i : i + 1] != '"':
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, i)
    key, i = _scanstring(s, i + 1, True)
    i = _WS.match(s, i).end()  # type: ignore[union-attr]
    if s[i : i + 1] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", s, i)
    return key, _WS.match(s, i + 1).end()  # type: ignore[union-attr]


def _scalar(s: str, i: int) -> tuple[Any, int]:
    c = s[i : i + 1]
    if c == '"':
        return _scanstring(s, i + 1, True)
    m = _NUMBER.match(s, i) if c and c in "-0123456789" else None
    if m is not None:
        text = m.group()
        return (float(text) if m.group(1) or m.group(2) else _js_int(text)), m.end()
    for word, value in _LITERALS:
        if s.startswith(word, i):
            return value, i + len(word)
    raise json.JSONDecodeError("Expecting value", s, i)


def _parse_deep(s: str) -> Any:
    """JSON of any depth, without recursion: a stack of open containers (and their key)."""
    ws = _WS.match
    stack: list[list[Any]] = []
    i = ws(s, 0).end()  # type: ignore[union-attr]
    while True:
        c = s[i : i + 1]
        value: Any
        if c in ("{", "[") and c:
            i = ws(s, i + 1).end()  # type: ignore[union-attr]
            if s[i : i + 1] == ("}" if c == "{" else "]"):
                value, i = ({} if c == "{" else []), i + 1
            elif c == "[":
                stack.append([[], None])
                continue
            else:
                key, i = _key(s, i)
                stack.append([{}, key])
                continue
        else:
            value, i = _scalar(s, i)
        while True:  # put the value into its container, closing those that end here
            i = ws(s, i).end()  # type: ignore[union-attr]
            if not stack:
                if i != len(s):
                    raise json.JSONDecodeError("Extra data", s, i)
                return value
            top = stack[-1]
            box = top[0]
            if isinstance(box, list):
                box.append(value)
            else:
                box[top[1]] = value
            c = s[i : i + 1]
            if c == ",":
                i = ws(s, i + 1).end()  # type: ignore[union-attr]
                if isinstance(box, dict):
                    top[1], i = _key(s, i)
                break
            if c != ("]" if isinstance(box, list) else "}") or not c:
                raise json.JSONDecodeError("Expecting ',' delimiter", s, i)
            stack.pop()
            value, i = box, i + 1


def parse_line(raw: bytes, deep: bool = True) -> tuple[bool, Any, str | None]:
    """Parse one line like Pi: ``(True, value, note)`` or ``(False, None, why)``.

    orjson first (the hot path); only a line it refuses is read again as ``JSON.parse``
    would. Pi decodes with replacement characters before parsing, so a line with invalid
    UTF-8 inside a string still loads there; it loads here too, with a note.
    """
    try:
        return True, _loads(raw), None
    except JSONDecodeError as exc:
        error = str(exc)
    note = None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        note = "invalid UTF-8 (replaced with U+FFFD, as Pi does)"
    try:
        return True, loads_js(text, deep), note
    except ValueError:  # json.JSONDecodeError is one
        return False, None, "invalid UTF-8, and not JSON" if note else error


def decode_line(raw: bytes, deep: bool = True) -> tuple[Any, str | None]:
    """(value, note) when the line parses (value None for a JSON ``null``), (None, why)
    when it does not (``deep=False``: nor when it nests past Python's recursion limit)."""
    ok, value, why = parse_line(raw, deep)
    return (value, why) if ok else (None, why)


def js_truthy(v: object) -> bool:
    """JavaScript's truthiness of a JSON value: Pi keeps a parsed line only when truthy."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, int | float):
        return v != 0
    if isinstance(v, str):
        return v != ""
    return True  # arrays and objects, even empty ones


_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def js_number(v: object) -> float:
    """JavaScript's ToNumber of a JSON value (what ``version < 2`` compares)."""
    while isinstance(v, list) and len(v) == 1:
        v = v[0]  # String([x]) is String(x)
        if v is None:
            return 0.0
        if isinstance(v, bool | dict):
            return math.nan  # "true", "[object Object]"
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, str):
        t = js_trim(v)
        if not t:
            return 0.0
        if len(t) < 400 and _DECIMAL.fullmatch(t):
            return float(t.replace("Infinity", "inf"))
        radix = _RADIX.fullmatch(t) if len(t) < 400 else None
        if radix is not None:
            digits = radix.group(1)
            return float(int(digits[1:], {"x": 16, "o": 8, "b": 2}[digits[0].lower()]))
        return math.nan
    if isinstance(v, list):
        return 0.0 if not v else math.nan  # "" or a string with a comma in it
    return math.nan


def pi_linear(fields: dict[str, Any]) -> bool:
    """Whether Pi migrates the file as v1 (new ids, one chain): ``(version ?? 1) < 2``."""
    v = fields.get("version")
    return (1.0 if v is None else js_number(v)) < 2


_BOOKKEEPING = frozenset({"lane", "fact", "record"})  # harness lines that are no entries


def _count(v: object) -> float | None:
    """A finite JSON number (not a bool), else None: a token count or a cost."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


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
            self.name = js_trim(name) or None if isinstance(name, str) else None
        elif etype == "message":
            self.messages += 1
            msg = d.get("message")
            if not isinstance(msg, dict):
                return
            role = msg.get("role")  # any JSON value: compared, never hashed
            if role in ("user", "assistant") and "content" in msg:
                self._activity(msg.get("timestamp"), d.get("timestamp"))
            if role == "assistant":
                self._add_assistant(msg)

    def _activity(self, msg_ts: object, entry_ts: object) -> None:
        # Pi: the message's number when it is one, else the entry's ISO time; times that
        # are no valid JavaScript Date (1e400, year 300000) are left out here.
        if isinstance(msg_ts, int | float) and not isinstance(msg_ts, bool):
            t: float | int | None = ms_value(msg_ts)
        else:
            t = parse_ts_ms(entry_ts)
        if t is not None:
            self.last_activity_ms = max(self.last_activity_ms or 0, int(t))

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
            v = _count(usage.get(src))
            if v is not None:
                self.tokens[dst] += int(v)
        cost = usage.get("cost")
        total = _count(cost.get("total") if isinstance(cost, dict) else None)
        if total is not None and math.isfinite(self.cost + total):
            self.cost += total


#: What a parser tells of each whole line: its bytes, the entry it made (or None), and its
#: skim when it was skimmed (a message line of a known role).
Each = Callable[[bytes, "Entry | None", "MessageLine | None"], None]


class Parser:
    """Consumes a session file's bytes, resuming where it stopped.

    ``entries`` holds every entry line in file order (duplicates included: the tree decides
    which wins). ``tail`` is the provisional entry of a last line without its newline (and
    ``header`` may be a provisional one, when the header is that line).

    A file of Pi's harness storage (``harness`` set, ``header`` None) keeps its ``entry``
    lines as entries; its ``lane``, ``fact`` and ``record`` lines are summed up in
    ``harness_info`` (lanes and where they point, the name, labels, line counts).
    """

    def __init__(self, path: str = "", each: Each | None = None) -> None:
        self.path = path
        # told every whole line, as read, with the entry it made and its skim, if it was
        # skimmed (the usage count: ``usage``)
        self.each = each
        self.skimmed: MessageLine | None = None  # the last line's skim, if it was skimmed
        self.offset = 0  # bytes consumed: always just after a newline
        self.lines = 0  # complete lines consumed
        self._header: Header | None = None
        self._tail_header: Header | None = None  # a header line still without its newline
        self.harness: Harness | None = None
        self.harness_info: dict[str, Any] = {}
        self.linear = False  # v1 (or a file without header version): ids are ours
        self.entries: list[Entry] = []
        self.problems: list[Problem] = []
        self.tail: Entry | None = None
        self.tail_problem: Problem | None = None
        self._pending = b""  # bytes after the last newline, parsed again with the next feed
        self._started = False  # the first line that Pi keeps (the header's place) was seen
        self._v1_ids_noted = False

    @property
    def header(self) -> Header | None:
        return self._header if self._header is not None else self._tail_header

    def feed(self, data: bytes) -> None:
        """Parse ``data``, the bytes appended to the file since the last feed (all of it the
        first time): its complete lines, then a last line without newline provisionally."""
        pos = self.offset  # file offset of the first byte not consumed (the pending line's)
        pending = self._pending
        find = data.find
        fast = self._fast
        each = self.each
        entries = self.entries
        at = 0
        line = self.lines
        # Line by line (not split()): each line's copy is freed at once, so a big file never
        # has a second copy of itself in memory. A line begun in an earlier feed is joined
        # with its end only (never the whole chunk).
        while (nl := find(b"\n", at)) >= 0:
            raw = pending + data[at:nl] if pending else data[at:nl]
            start = pos
            pos += len(raw) + 1
            pending = b""
            line += 1
            self.lines = line  # (the slow path reads it)
            made = len(entries) if each is not None else 0
            self.skimmed = None
            if not fast(raw, line, start, pos - 1):
                self._line(raw, line, start, pos - 1)
            if each is not None:
                each(raw, entries[-1] if len(entries) > made else None, self.skimmed)
            at = nl + 1
        tail = pending + data[at:] if pending else data[at:]
        self._pending = tail  # after the last newline: b"" or a line still being written
        self.offset = pos
        self.tail = None
        self.tail_problem = None
        self._tail_header = None
        if tail:
            self._tail(tail, pos, pos + len(tail))

    def _fast(self, raw: bytes, line: int, start: int, end: int) -> bool:
        """The common line (a well-formed v2/v3 entry) in one go; False: take the slow path.

        This is the hot loop of a 100 MB session: it does only what the tree needs.
        """
        if self._header is None or self.linear:
            return False
        # (a line without a "message" key is no message: decoded once, whole, not twice)
        if b'"message"' in raw and self._skimmed(raw, line, start, end):
            return True
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
                if role == "toolResult" and isinstance(msg, dict):
                    kind = _tool_kind(msg.get("toolName"))
                else:
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
                _TYPES.get(etype, etype),
                ts if type(ts) is str else None if ts is None else iso_or_none(ts),
                line,
                start,
                end,
                kind,
                target,
                note,
            )
        )
        return True

    def _skimmed(self, raw: bytes, line: int, start: int, end: int) -> bool:
        """A message line of a known role, its contents skipped (checked, not built); False:
        :meth:`_fast` decodes it whole.

        The skim does not check the UTF-8 of what it skips, so a line that is not ASCII is
        decoded first (a fifth of the cost of the whole decode): one with invalid UTF-8 is a
        line Pi loads with replacement characters, which the slow path loads and records.
        Any value of an unexpected type goes the whole way too, so a line skimmed makes
        exactly the entry a whole decode would.
        """
        try:
            if not raw.isascii():
                raw.decode()
            h = skim(raw)
        except Exception:  # (invalid UTF-8, not JSON, a field of the wrong type, too deep)
            return False  # the whole decode decides, and records what it finds
        msg, eid, parent, ts = h.message, h.id, h.parentId, h.timestamp
        if (
            h.type != "message"
            or msg is None
            or type(eid) is not str
            or not eid
            or not (parent is None or type(parent) is str)
            or not (ts is None or type(ts) is str)
            or type(msg.role) is not str
        ):
            return False
        kind = _ROLE_KINDS.get(msg.role)
        if kind is None:
            if msg.role != "toolResult":
                return False
            kind = _tool_kind(msg.toolName)
        entry = Entry(eid, parent or None, "message", ts, line, start, end, kind, None, None)
        self.entries.append(entry)
        self.skimmed = h
        return True

    def _role(self, value: Any) -> str:
        """What a parsed line is to Pi: ``falsy`` (skipped), ``first`` (must be the header),
        ``extra`` (another session header: ignored), ``bookkeeping`` (a harness line that is
        no entry) or ``entry``."""
        if not js_truthy(value):
            return "falsy"
        if not self._started:
            return "first"
        if isinstance(value, dict):
            if self.harness is not None:
                if value.get("kind") in _BOOKKEEPING:
                    return "bookkeeping"
            elif value.get("type") == "session":
                return "extra"
        return "entry"

    def _tail(self, raw: bytes, start: int, end: int) -> None:
        """Parse a last line that has no newline yet, without committing it to the state.

        Pi loads such a line when it parses; the next feed parses it again, complete or not.
        """
        line = self.lines + 1
        detail = "last line has no final newline (torn write?)"
        ok, value, why = parse_line(raw) if raw.strip() else (False, None, "blank")
        role = self._role(value) if ok else ""
        if not ok:
            detail += "; " + (why or "not JSON")
        elif role == "falsy":
            detail += f"; JSON {brief(value)}, which Pi skips"
        elif role == "first":
            detail += "; the only line is not terminated"
            if isinstance(value, dict) and _is_header(value):
                self._tail_header = Header(value, line)
        elif role == "entry":
            self.tail, _ = self._make_entry(value, line, start, end, commit=False)
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
        ok, value, why = parse_line(raw)
        if not ok:
            self.problems.append(Problem(line, "malformed-json", why or "not JSON"))
            return
        if why:
            self.problems.append(Problem(line, "invalid-utf8", why))
        role = self._role(value)
        if role == "falsy":
            detail = f"line is JSON {brief(value)}: Pi skips it"
            self.problems.append(Problem(line, "not-an-object", detail))
            return
        if role == "first":
            self._started = True
            if self._first(value, line):
                return
        elif role == "extra":
            self.problems.append(Problem(line, "extra-header", "second session header ignored"))
            return
        elif role == "bookkeeping":
            self._bookkeep(value)
            return
        entry, problems = self._make_entry(value, line, start, end, commit=True)
        self.problems.extend(problems)
        self.entries.append(entry)
        if self.harness is not None:
            self._bookkeep_entry(value, entry)

    def _first(self, value: Any, line: int) -> bool:
        """The first line Pi keeps: True when it is a header (of a session or a harness)."""
        d = value if isinstance(value, dict) else None
        if d is not None and _is_header(d):
            self._header = Header(d, line)
            self.linear = pi_linear(d)
            v = d.get("version")
            if "version" in d and not (type(v) is int and 1 <= v <= 3):
                how = "v1 (new ids, one chain)" if self.linear else "a tree"
                detail = f"header version {brief(v)}: Pi reads the file as {how}"
                self.problems.append(Problem(line, "unknown-version", detail))
            return True
        if d is not None and d.get("kind") == "header":
            self.harness = Harness(d, line)
            self.harness_info = {"lanes": {}, "name": None, "labels": {}, "lines": {}}
            detail = (
                f"pi harness storage (version {brief(self.harness.version)}): shown "
                "read-only, never appended to; Pi 1.6 does not load it as a session"
            )
            self.problems.append(Problem(line, "harness-storage", detail))
            return True
        self.problems.append(
            Problem(line, "no-header", "first line is not a session header: Pi does not load it")
        )
        self.linear = not (d is not None and isinstance(d.get("id"), str))
        return False

    def _bookkeep(self, d: dict[str, Any]) -> None:
        """A harness ``lane``, ``fact`` or ``record`` line: what it says, in harness_info."""
        info = self.harness_info
        kind = d["kind"]
        info["lines"][kind] = info["lines"].get(kind, 0) + 1
        if kind == "lane" and isinstance(d.get("lane"), str):
            leaf = d.get("leafId")
            info["lanes"][d["lane"]] = leaf if isinstance(leaf, str) else None
        elif kind == "fact" and d.get("fact") == "name":
            name = d.get("name")
            info["name"] = name if isinstance(name, str) else None
        elif kind == "fact" and d.get("fact") == "label" and isinstance(d.get("targetId"), str):
            label = d.get("label")
            if isinstance(label, str) and label:
                info["labels"][d["targetId"]] = label
            else:
                info["labels"].pop(d["targetId"], None)

    def _bookkeep_entry(self, value: Any, entry: Entry) -> None:
        info = self.harness_info
        kind = value.get("kind") if isinstance(value, dict) else None
        kind = kind if isinstance(kind, str) else "?"
        info["lines"][kind] = info["lines"].get(kind, 0) + 1
        lane = value.get("lane") if isinstance(value, dict) else None
        if isinstance(lane, str):
            info["lanes"][lane] = entry.id  # an entry appended to a lane moves it

    def _make_entry(
        self, value: Any, line: int, start: int, end: int, commit: bool
    ) -> tuple[Entry, list[Problem]]:
        """An entry for a parsed line; reads the state (the v1 chain), changes it only when
        ``commit`` (the line is complete)."""
        problems: list[Problem] = []
        if isinstance(value, dict):
            d = value
            etype = d.get("type")
            if type(etype) is not str:
                why = "entry has no type" if etype is None else f"type is {brief(etype)}"
                problems.append(Problem(line, "no-type", why))
                etype = "unknown"
        else:  # an array, a number, a string, true: Pi keeps it as an entry without id
            d = {}
            etype = "unknown"
            detail = f"line is JSON {brief(value)}, not an object: Pi loads it, without an id"
            problems.append(Problem(line, "not-an-object", detail))
        eid, parent = self._ids(d, line, problems if d is value else [], commit)
        target = d.get("targetId")
        ts = d.get("timestamp")
        entry = Entry(
            eid,
            parent,
            _TYPES.get(etype, etype),
            ts if isinstance(ts, str) else iso_or_none(ts),
            line,
            start,
            end,
            file_kind(d),
            target if isinstance(target, str) else None,
            _note(etype, d),
        )
        return entry, problems

    def _ids(
        self, d: dict[str, Any], line: int, problems: list[Problem], commit: bool
    ) -> tuple[str, str | None]:
        if self.linear and "id" in d and not self._v1_ids_noted:
            self._v1_ids_noted = commit
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
            detail = "entry has no id" if eid is None else f"id {brief(eid)} is no id"
            problems.append(Problem(line, "no-id", detail + ": shown as a root"))
            eid = f"L{line}"
        parent = d.get("parentId")
        if parent is not None and not isinstance(parent, str):
            detail = f"parentId {brief(parent)} is not a string: a root, as in Pi"
            problems.append(Problem(line, "bad-parent", detail))
            parent = None
        return eid, parent or None


def _is_header(value: Any) -> bool:
    """A v1-v3 session header, as Pi checks it: ``type`` "session" and a string ``id``."""
    return (
        isinstance(value, dict)
        and value.get("type") == "session"
        and isinstance(value.get("id"), str)
    )
