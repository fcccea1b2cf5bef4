"""Plain records shared by every layer: an entry, a header, a problem.

This module owns the vocabulary only. It knows nothing of files, FUSE or rendering; the
records are immutable once built, which is what lets rendered bytes and inode numbers be
computed once and cached forever.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: Entry types that take a number (a file) in a leaf or node folder. Everything else shows
#: only in tree.txt and session.json (DESIGN.md, "Numbered files").
CONVERSATION_TYPES = frozenset({"message", "custom_message", "compaction", "branch_summary"})


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with a session file, reported in tree.txt and session.json."""

    line: int  # 1-based physical line number, 0 for the file as a whole
    kind: str  # short machine-readable tag, e.g. "malformed-json", "cycle"
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "detail": self.detail}


_NOT_YET = -(1 << 62)  # Entry._ms before its timestamp is parsed


class Entry:
    """One non-header line of a session, reduced to what the tree needs.

    The raw bytes stay in the session's buffer (``start``/``end``); the full JSON is parsed
    again only when the entry is rendered. ``__slots__`` keeps a parsed session close to the
    size of its file.
    """

    __slots__ = (
        "_ms",
        "end",
        "id",
        "kind",
        "line",
        "note",
        "parent_id",
        "start",
        "target_id",
        "ts",
        "type",
    )

    def __init__(  # noqa: PLR0917 (positional: built 100,000 times per big session)
        self,
        id: str,
        parent_id: str | None,
        type: str,
        ts: str | None,
        line: int,
        start: int,
        end: int,
        kind: str | None,
        target_id: str | None = None,
        note: str | None = None,
    ) -> None:
        self.id = id
        self.parent_id = parent_id
        self.type = type
        self.ts = ts  # the entry's ISO timestamp as written (parsed only when needed)
        self.line = line
        self.start = start
        self.end = end
        self.kind = kind  # file kind ("user", "tool-bash", ...) or None: no number
        self.target_id = target_id  # label / context_edit target
        self.note = note  # label text, model id, thinking level, session name: tree previews
        self._ms: int | None = _NOT_YET  # ts_ms, parsed on first use

    @property
    def numbered(self) -> bool:
        return self.kind is not None

    @property
    def ts_ms(self) -> int | None:
        """The timestamp in Unix ms, None when missing or invalid (Pi: NaN)."""
        ms = self._ms
        if ms == _NOT_YET:
            ms = self._ms = parse_ts_ms(self.ts)
        return ms

    def __repr__(self) -> str:
        return f"Entry({self.id!r}, parent={self.parent_id!r}, {self.type}, line {self.line})"


#: The range of a JavaScript Date (ms from the epoch): beyond it Pi's times are invalid.
JS_MAX_MS = 8_640_000_000_000_000
_DAY_MS = 86_400_000


def _civil(days: int) -> tuple[int, int, int]:
    """Days since 1970-01-01 -> (year, month, day), proleptic Gregorian, any year."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def iso_ms(ms: int) -> str:
    """Unix ms as the ISO string Pi writes (``2026-11-29T10:00:00.000Z``), as JavaScript's
    ``toISOString`` does for any valid time (years past 9999 as ``+010000``).

    Raises ValueError outside the range of a JavaScript Date (``RangeError`` there).
    """
    ms = int(ms)
    if abs(ms) > JS_MAX_MS:
        raise ValueError(f"{ms} ms is outside the range of a JavaScript Date")
    days, rest = divmod(ms, _DAY_MS)
    year, month, day = _civil(days)
    secs, milli = divmod(rest, 1000)
    clock = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{milli:03d}Z"
    shown = f"{year:04d}" if 0 <= year <= 9999 else f"{'+' if year > 0 else '-'}{abs(year):06d}"
    return f"{shown}-{month:02d}-{day:02d}T{clock}"


_YEAR_10000_MS = 253_402_300_800_000


@functools.lru_cache(maxsize=512)
def _utc_minute(minute: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:", time.gmtime(minute * 60))


def utc_clock(ms: int) -> str:
    """Unix ms as ``2026-03-02 09:14:05`` (UTC, to the second); "" outside a Date's range."""
    if 0 <= ms < _YEAR_10000_MS:  # two per entry rendered: a session's are minutes apart
        sec = ms // 1000
        return f"{_utc_minute(sec // 60)}{sec % 60:02d}"
    try:
        iso = iso_ms(ms)
    except ValueError:
        return ""
    day, _, rest = iso.partition("T")
    return f"{day} {rest[:8]}"


def ms_value(value: object) -> float | None:
    """A JSON number that is a valid JavaScript time in ms, else None (bools, NaN, ±inf,
    numbers past the Date range: Pi gets an Invalid Date from them)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        ms = float(value)
    except OverflowError:  # an integer past any float
        return None
    return ms if abs(ms) <= JS_MAX_MS else None  # False for NaN too


def iso_or_none(value: object) -> str | None:
    """The ISO string of a time in ms, None when the value is no valid time."""
    ms = ms_value(value)
    return None if ms is None else iso_ms(int(ms))


def parse_ts_ms(value: object) -> int | None:
    """An ISO timestamp as Unix milliseconds, or None when it is not one."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    return _iso_ms(value)


@functools.lru_cache(maxsize=256)
def _iso_ms(value: str) -> int | None:
    # (An entry's time is read by its index, its file's header, its heading in the one-file
    # views and session.json's stats, one after the other: parsed once for all of them.)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        return None


@dataclass(frozen=True, slots=True)
class Header:
    """The session header line (line 1 of a healthy file)."""

    fields: dict[str, Any]
    line: int

    @property
    def version(self) -> int | None:
        v = self.fields.get("version")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def session_id(self) -> str:
        v = self.fields.get("id")
        return v if isinstance(v, str) else ""


@dataclass(frozen=True, slots=True)
class Harness:
    """The first line of Pi's newer "harness" storage (``{"kind":"header","version":4,…}``
    or ``{"v":4,"kind":"header","storageVersion":1,…}``): not a v3 session. Such a file is
    shown read-only (its ``entry`` lines as entries) and never appended to."""

    fields: dict[str, Any]
    line: int

    @property
    def version(self) -> object:
        return self.fields.get("version", self.fields.get("v"))


#: What JavaScript's ``String.prototype.trim`` removes (WhiteSpace and LineTerminator of
#: ECMA-262): Pi trims names and labels with it. Python's ``str.strip`` differs (it strips
#: U+001C..U+001F and U+0085, keeps U+FEFF).
JS_SPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """``text.trim()`` as JavaScript does it."""
    return text.strip(JS_SPACE)
