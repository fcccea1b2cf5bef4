"""Tokens and cost, summed the way people ask about them (DESIGN "Usage"): ``usage/`` holds
``daily.csv``, ``monthly.csv``, ``projects.csv``, ``models.csv`` and ``usage.md``.

Each entry is counted once, however many branches share it, as Pi 1.6 counts a session's
totals (``AgentSession.getSessionStats`` over every entry of the file, and
``getUsageCostBreakdown`` for the model of each): the ``usage`` of assistant messages, of tool
results that carry one, of ``usage`` entries, and of compactions and branch summaries that
carry one; ``messages`` counts assistant messages. A model row is keyed as Pi keys it:
provider and ``responseModel``, else ``model``; a ``usage`` entry by its own provider and
model; the rest under ``Tools/summaries``. An entry's day is its timestamp's UTC date.

No session is parsed for it. A parse the mount makes anyway counts each line it reads
(``count_parsed``) and offers the sums (:meth:`Usage.offer`); any other file is scanned line
by line (only the lines that can hold a usage or an assistant message are decoded), from the
offset reached the last time (the files only grow). What each file gave is kept in the store
(``usage`` and ``usage_files``), where SQL sums it. A value of the wrong type counts as 0
(Pi would count NaN).
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import re
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from .files import Unreadable, whole_lines
from .jsonl import MessageLine, decode_line, skim
from .model import iso_ms, parse_ts_ms

#: The files of ``usage/``, in listing order.
FILES = ("daily.csv", "monthly.csv", "projects.csv", "models.csv", "usage.md")
#: The columns after a row's key columns.
COLUMNS = ("messages", "input", "output", "cache_read", "cache_write", "total_tokens", "cost")
TOOLS = "Tools/summaries"  # Pi's key for usage no model answered
ROOT_PROJECT = "."  # the project of a session lying in the sessions root itself
#: Seconds between two looks at every session file's stat (a Pi append shows within 1 s).
FRESH = 0.5
OFFERS = 256  # parses' counts written in one transaction
PARSE_MAX = 64 << 20  # a file counted by its parse at most (a bigger one: its lines scanned)
_BLOCK = 4 << 20
TAIL = 4096  # bytes before the offset reached whose checksum says the file only grew
_BIG = 1 << 53  # a token count past this (only a hostile file has one) counts as 0

#: (day, model key) -> [messages, input, output, cache_read, cache_write, cost]
Sums = dict[tuple[str, str], list[float]]


@dataclass
class Scanned:
    """What the lines of one file from an offset gave: sums, and the offset after the last
    whole line read."""

    sums: Sums = field(default_factory=dict)
    offset: int = 0


def scan(read: Callable[[int, int], bytes], start: int, end: int) -> Scanned:
    """The usage of the whole lines between ``start`` and ``end`` (``read(size, offset)``:
    ``os.pread`` of the file). A line cut short at the end is left for the next scan."""
    out = Scanned(offset=start)
    for line, out.offset in whole_lines(read, start, end, _BLOCK):
        count_marked(out.sums, line)
    return out


def count_marked(sums: Sums, line: bytes) -> None:
    """:func:`count_line`, for a line that may count (a parse sees every line: most do not)."""
    if b"usage" in line or b"assistant" in line:
        count_line(sums, line)


#: The entry types whose own ``usage`` counts.
_COUNTED = frozenset({"usage", "compaction", "branch_summary"})


def count_parsed(
    sums: Sums, line: bytes, etype: object, kind: str | None, h: MessageLine | None
) -> None:
    """:func:`count_line`, for a line a parse made an entry of (``etype`` None: it made
    none), without looking for words in it: only an assistant message, a tool result (file
    kind ``tool-*``) and the types that carry their own usage may count. ``h``: the parse's
    skim of the line, if it skimmed it (the same skim :func:`count_line` makes)."""
    if etype is None:
        count_marked(sums, line)
    elif kind == "assistant" or etype in _COUNTED or (kind is not None and kind[:5] == "tool-"):
        if h is None:
            count_line(sums, line)
        else:
            _count_skimmed(sums, h)


def count_line(sums: Sums, line: bytes) -> None:
    """Add what one line of a session file counts for (Pi's rules, above)."""
    line = line.rstrip(b"\r")
    try:
        h = skim(line)
    except (msgspec.MsgspecError, RecursionError):  # (nested thousands deep: a hostile line)
        d, _ = decode_line(line, deep=False)  # (another shape: decoded whole, as Pi reads it)
        if isinstance(d, dict):
            _count_decoded(sums, d)
        return
    _count_skimmed(sums, h)


def _count_skimmed(sums: Sums, h: MessageLine) -> None:
    m = h.message
    msg = None if m is None else (m.role, m.provider, m.model, m.responseModel, m.usage)
    _count(sums, h.type, h.timestamp, (h.provider, h.model, h.usage), msg)


def _count_decoded(sums: Sums, d: dict[str, Any]) -> None:
    m = d.get("message")
    msg = None
    if isinstance(m, dict):
        fields = ("role", "provider", "model", "responseModel", "usage")
        role, provider, model, response, usage = map(m.get, fields)
        msg = (role, provider, model, response, usage)
    own = (d.get("provider"), d.get("model"), d.get("usage"))
    _count(sums, d.get("type"), d.get("timestamp"), own, msg)


def _count(
    sums: Sums,
    kind: object,
    stamp: object,
    own: tuple[object, object, object],
    msg: tuple[object, object, object, object, object] | None,
) -> None:
    """Add one line's usage: its ``type`` and ``timestamp``, its own provider, model and
    usage (a ``usage`` entry's), and its message's role, provider, model, responseModel and
    usage (None: no message object)."""
    assistant = False
    if kind == "usage":
        provider, model, usage = own
        key = f"{_text(provider)}/{_text(model)}"
    elif kind in ("compaction", "branch_summary"):
        usage, key = own[2], TOOLS
    elif kind == "message" and msg is not None:
        role, provider, model, response, usage = msg
        if role == "assistant":
            key = f"{_text(provider)}/{_text(response if response is not None else model)}"
            assistant = True
        elif role == "toolResult":
            key = TOOLS
        else:
            return
    else:
        return
    if not usage and not assistant:
        return
    # (a lone surrogate JSON may hold: stored and shown as "?", never an error)
    key = key.encode("utf-8", "replace").decode("utf-8", "replace")
    row = sums.setdefault((_day(stamp), key), [0, 0, 0, 0, 0, 0.0])
    row[0] += assistant
    if isinstance(usage, dict):
        get = usage.get
        row[1] += _tokens(get("input"))
        row[2] += _tokens(get("output"))
        row[3] += _tokens(get("cacheRead"))
        row[4] += _tokens(get("cacheWrite"))
        cost = get("cost")
        row[5] += _number(cost.get("total")) if isinstance(cost, dict) else 0.0


def _text(value: object, depth: int = 0) -> str:
    """A provider or model as Pi's template string writes it (``${x}``, JavaScript's
    ``String(x)``; a field that is missing and one that is null both read ``undefined``
    here: ``dict.get`` cannot tell them apart)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "undefined" if depth == 0 else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, list) and depth < 8:  # (an array: its items joined by commas)
        return ",".join(_text(v, depth + 1) for v in value)
    return "[object Object]"


def _tokens(value: object) -> int:
    if type(value) is int and -_BIG <= value <= _BIG:  # (the common case, first)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or abs(value) > _BIG:
        return 0
    return int(value)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    number = float(value) if abs(value) < 1e300 else 0.0
    return number if math.isfinite(number) else 0.0


#: The time Pi writes (``2026-03-02T09:14:05.123Z``): its day is its first ten characters,
#: when that is a date (every other form is parsed).
_PI_TIME = re.compile(r"\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{3}Z")


def _day(stamp: object) -> str:
    if type(stamp) is str and len(stamp) == 24 and _PI_TIME.fullmatch(stamp):
        return _date(stamp[:10])
    return _parsed_day(stamp)


@functools.lru_cache(maxsize=1024)
def _date(day: str) -> str:
    """``YYYY-MM-DD`` when it is a date of the calendar, else ``unknown``."""
    return _parsed_day(day + "T00:00:00.000Z")


def _parsed_day(stamp: object) -> str:
    ms = parse_ts_ms(stamp)
    if ms is None:
        return "unknown"
    try:
        day = iso_ms(ms)[:10]
    except ValueError:
        return "unknown"
    return day if day[:1].isdigit() else "unknown"


# -- the sums, made readable -------------------------------------------------------------------


@dataclass
class Table:
    """Rows of sums by one key, oldest (or first) first: key columns, then :data:`COLUMNS`."""

    keys: tuple[str, ...]
    rows: list[tuple[tuple[str, ...], list[float]]]

    def total(self) -> list[float]:
        out = [0.0] * 6
        for _, values in self.rows:
            out = [a + b for a, b in zip(out, values, strict=True)]
        return out


def csv_text(table: Table) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([*table.keys, *COLUMNS])
    for key, values in table.rows:
        w.writerow([*key, *_cells(values)])
    return out.getvalue().encode("utf-8", "surrogateescape")


def _cells(values: list[float]) -> list[str]:
    messages, inp, out, read, write, cost = values
    ints = [int(messages), int(inp), int(out), int(read), int(write)]
    return [*map(str, ints), str(sum(ints[1:])), f"{cost:.6f}"]


def markdown(tables: dict[str, Table], sessions: int, unread: list[str]) -> bytes:
    """``usage.md``: the tables as readable text, each with its total."""
    lines = [f"# Usage of {sessions:,} session{'' if sessions == 1 else 's'}", ""]
    titles = {
        "daily.csv": "The last 31 days",
        "monthly.csv": "Every month",
        "projects.csv": "Every project",
        "models.csv": "Every model",
    }
    for name, title in titles.items():
        table = tables[name]
        rows = table.rows[-31:] if name == "daily.csv" else table.rows
        head = [*table.keys, *COLUMNS]
        lines += [f"## {title}", "", _md_row(head), _md_row(["---"] * len(head))]
        lines += [_md_row([*key, *_cells(values)]) for key, values in rows]
        blank = [""] * (len(table.keys) - 1)
        lines += [_md_row(["**total**", *blank, *_cells(table.total())]), ""]
    if unread:
        lines += ["Left out (their files cannot be read):", ""]
        lines += [f"- {path}" for path in unread] + [""]
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


# -- the sums of every session, kept up to date --------------------------------------------


@dataclass
class Seen:
    """A session file as the usage of it was last counted: its stat, up to ``offset``, and
    a checksum of the bytes before it (a file rewritten in place, Pi's migration of an old
    one, is counted anew however it grew)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    offset: int
    project: str
    tail: int = 0


Done = Callable[[], None]
#: What a count of a file gave: its path, the file as counted, the sums, and the offset the
#: count began at (None: its start).
Counting = tuple[str, "Seen", Sums, int | None]


class Counted(Protocol):
    """Where what each file gave is kept (``sums.UsageTable``, in the store)."""

    def seen(self) -> dict[str, Seen]: ...
    def put(
        self, path: str, seen: Seen, sums: Sums, start: int | None, then: Done | None = None
    ) -> None: ...
    def put_all(self, counted: list[Counting], then: Done | None = None) -> None: ...
    def forget(self, paths: list[str]) -> None: ...
    def table(self, name: str) -> Table: ...


def _copy(sums: Sums) -> Sums:
    """Sums as they are now (a parse's go on counting the lines appended)."""
    return {k: list(v) for k, v in sums.items()}


def _tail(fd: int, offset: int) -> int:
    """The checksum of the :data:`TAIL` bytes before ``offset``."""
    start = max(0, offset - TAIL)
    return zlib.crc32(os.pread(fd, offset - start, start))


class Usage:
    """The usage of every session the mount shows, summed in the store.

    ``sessions()`` lists them (path, project); ``table`` is the store's side. :meth:`update`
    is the work that brings the sums up to date (blocking: run off the loop), :meth:`render`
    one file of ``usage/``."""

    def __init__(
        self,
        sessions: Callable[[], list[tuple[str, str]]],
        lstat: Callable[[str], os.stat_result],
        opened: Callable[[str], int],
        table: Counted,
        *,
        project_of: Callable[[str], str] = lambda path: ROOT_PROJECT,
        parse: Callable[[str], tuple[Seen, Sums] | None] | None = None,
    ) -> None:
        self.sessions, self.lstat, self.opened, self.table = sessions, lstat, opened, table
        self.project_of, self.parse = project_of, parse
        self._offered = False  # a parse's count was written since the files were made
        self._offers: list[Counting] = []  # parses' counts not written yet
        self._offers_lock = threading.Lock()
        self._checked = -math.inf  # (time.monotonic) of the last look at every file
        self._lock = threading.Lock()  # one update at a time
        self._made: dict[str, bytes] = {}  # the files as the sums are now
        self.unread: list[str] = []
        self.count = 0  # sessions counted
        self.mode = 0o444  # what every session file lets read: no more of the sums
        self.changed_ns = 0  # the newest session file's mtime: the sums are of then

    def fresh(self) -> bool:
        return time.monotonic() - self._checked < FRESH

    def update(self) -> None:
        """(Blocking.) Count what each session file gained since it was counted; forget the
        sessions that are gone."""
        with self._lock:
            if self.fresh():
                return
            self.flush()
            seen = self.table.seen()
            now: dict[str, tuple[os.stat_result, str]] = {}
            unread, mode, newest = [], 0o444, 0
            for path, project in self.sessions():
                try:
                    st = self.lstat(path)
                except (OSError, Unreadable):
                    unread.append(path)
                    continue
                now[path] = (st, project)
                mode &= stat.S_IMODE(st.st_mode)
                newest = max(newest, st.st_mtime_ns)
            changed = self._count(now, seen, unread)
            gone = [p for p in seen if p not in now]
            if gone:
                self.table.forget(gone)
            offered, self._offered = self._offered, False
            moved = changed or gone or offered or unread != self.unread or len(now) != self.count
            self.unread, self.mode, self.count = unread, mode, len(now)
            if moved or not self._made:
                # (made here, in the worker: summing a year of sessions is no work for the loop)
                self._made = self._render()
            self.changed_ns = newest
            self._checked = time.monotonic()

    def _count(
        self,
        now: dict[str, tuple[os.stat_result, str]],
        seen: dict[str, Seen],
        unread: list[str],
    ) -> bool:
        """Count each file whose stat moved on since, and write what they gave in one
        transaction; whether any did."""
        done: list[Counting] = []
        for path, (st, project) in now.items():
            was = seen.get(path)
            if was is not None and (was.size, was.mtime_ns) == (st.st_size, st.st_mtime_ns):
                continue
            grown = (
                was is not None
                and (was.dev, was.ino) == (st.st_dev, st.st_ino)
                and st.st_size >= was.offset
            )
            got = self._parsed(path, project) if not grown and st.st_size <= PARSE_MAX else None
            got = got or self._scanned(path, st, project, was if grown else None)
            if got is None:
                unread.append(path)
            else:
                done.append(got)
        if done:
            self.table.put_all(done)
        return bool(done)

    def _parsed(self, path: str, project: str) -> Counting | None:
        """A whole count of ``path`` by its parse: a walk parses it next (a walk that meets
        ``usage/`` first, as rg's threads do, read every file twice when it was scanned),
        and a parse is no slower than the scan."""
        if self.parse is None:
            return None
        try:
            got = self.parse(path)
        except Exception:  # (unreadable: the scan says so)
            return None
        if got is None:
            return None
        seen, sums = got
        seen.project = project
        return path, seen, _copy(sums), None

    def _scanned(
        self, path: str, st: os.stat_result, project: str, was: Seen | None
    ) -> Counting | None:
        """A count of ``path`` by its lines from where ``was`` stopped (None: its start)."""
        try:
            fd = self.opened(path)
        except (OSError, Unreadable):
            return None
        try:
            grown = was is not None and _tail(fd, was.offset) == was.tail
            start = was.offset if grown and was is not None else None
            got = scan(functools.partial(os.pread, fd), start or 0, st.st_size)
            tail = _tail(fd, got.offset)
        except OSError:
            return None
        finally:
            os.close(fd)
        at = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, got.offset)
        return path, Seen(*at, project, tail), got.sums, start

    def offer(self, path: str, seen: Seen, sums: Sums) -> None:
        """What a parse of ``path`` counted as it read every line (``seen``: the file as it
        was read, to its last whole line): written in its turn, so that the count of a
        session the mount parsed reads nothing again (the first walk of a year of sessions
        meets ``usage/`` after them). ``seen.project`` is filled here."""
        seen.project = self.project_of(path)
        with self._offers_lock:
            self._offers.append((path, seen, _copy(sums), None))
            full = len(self._offers) >= OFFERS
            batch, self._offers = (self._offers, []) if full else ([], self._offers)
        if batch:
            self.table.put_all(batch, then=self._was_offered)

    def flush(self) -> None:
        """(Blocking.) The counts offered and not written yet, written now."""
        with self._offers_lock:
            batch, self._offers = self._offers, []
        if batch:
            self.table.put_all(batch)
            self._offered = True

    def _was_offered(self) -> None:
        self._offered = True

    def render(self, name: str) -> bytes:
        """File ``name`` of ``usage/`` as the last :meth:`update` made it."""
        made = self._made.get(name)
        return made if made is not None else self._render()[name]

    def _render(self) -> dict[str, bytes]:
        tables = {n: self.table.table(n) for n in FILES[:4]}
        made = {n: csv_text(t) for n, t in tables.items()}
        made["usage.md"] = markdown(tables, self.count, self.unread)
        return made
