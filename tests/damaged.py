"""Damaged and hostile session files, generated: each with the problem kinds it must report.

Used by the core tests and the real-mount tests (tests/test_damaged_*.py).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from tests.driven import Driven

HEADER = {
    "type": "session",
    "version": 3,
    "id": "dmg",
    "timestamp": "2026-11-20T10:00:00.000Z",
    "cwd": "/work",
}


def line(obj: object) -> bytes:
    return orjson.dumps(obj) + b"\n"


def user(eid: str, parent: str | None, text: str, sec: int = 1) -> dict[str, object]:
    return {
        "type": "message",
        "id": eid,
        "parentId": parent,
        "timestamp": f"2026-11-20T10:{sec // 60 % 60:02d}:{sec % 60:02d}.000Z",
        "message": {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "timestamp": 1795168800000 + sec,
        },
    }


def good(n: int = 3) -> bytes:
    out = line(HEADER)
    parent = None
    for i in range(n):
        eid = f"{i:08x}"
        out += line(user(eid, parent, f"message number {i}", i))
        parent = eid
    return out


def chain(n: int) -> bytes:
    return good(n)


def cases() -> dict[str, tuple[bytes, set[str]]]:
    """name -> (file bytes, problem kinds session.json must list)."""
    g = good()
    return {
        "torn-tail": (g + line(user("0000000a", "00000002", "half"))[:25], {"torn-tail"}),
        "malformed-middle": (
            line(HEADER)
            + line(user("00000001", None, "one"))
            + b'{"type": "message", oops\n'
            + line(user("00000002", "00000001", "two")),
            {"malformed-json"},
        ),
        "cycle": (
            line(HEADER)
            + line(user("0000000a", "0000000b", "a"))
            + line(user("0000000b", "0000000a", "b"))
            + line(user("0000000c", "0000000b", "c")),
            {"cycle"},
        ),
        "self-parent": (line(HEADER) + line(user("0000000a", "0000000a", "me")), {"self-parent"}),
        "duplicate-id": (g + line(user("00000001", "00000000", "again")), {"duplicate-id"}),
        "orphan": (g + line(user("0000000f", "deadbeef", "lost")), {"orphan"}),
        "bom": (b"\xef\xbb\xbf" + g, {"bom"}),
        "crlf": (g.replace(b"\n", b"\r\n"), set()),
        "no-header": (g.split(b"\n", 1)[1], {"no-header"}),
        "no-version": (
            line({k: v for k, v in HEADER.items() if k != "version"}) + g.split(b"\n", 1)[1],
            {"no-version"},
        ),
        "version-4": (line({**HEADER, "version": 4}) + g.split(b"\n", 1)[1], {"unknown-version"}),
        "invalid-utf8": (
            g + line(user("0000000e", "00000002", "XX")).replace(b"XX", b"\xff\xfe"),
            {"invalid-utf8"},
        ),
        "huge-line": (g + line(user("0000000d", "00000002", "x" * (30 << 20))), set()),
        "long-chain": (chain(20_000), set()),
        "empty": (b"", set()),
        "not-json": (b"hello, this is not a session\n", {"malformed-json"}),
    }


def write_all(folder: Path) -> dict[str, tuple[Path, set[str]]]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (data, kinds) in cases().items():
        path = folder / f"{name}.jsonl"
        path.write_bytes(data)
        out[name] = (path, kinds)
    return out


def enter(v: Driven, parent: int, stem: str) -> int:
    """A session folder by its file's stem: a link to the folder's name, when it has one."""
    a = v.lookup(parent, stem)
    return v.lookup(parent, v.readlink(a.ino).decode()).ino if stat.S_ISLNK(a.mode) else a.ino
