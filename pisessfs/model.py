"""Plain records shared by every layer: an entry, a header, a problem.

This module owns the vocabulary only. It knows nothing of files, FUSE or rendering; the
records are immutable once built, which is what lets rendered bytes and inode numbers be
computed once and cached forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
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


def iso_ms(ms: int) -> str:
    """Unix ms as the ISO string Pi writes (``2026-11-29T10:00:00.000Z``)."""
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def parse_ts_ms(value: object) -> int | None:
    """An ISO timestamp as Unix milliseconds, or None when it is not one."""
    if not isinstance(value, str):
        return None
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
