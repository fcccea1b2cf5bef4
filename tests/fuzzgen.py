"""A seeded generator of hostile Pi session files, for tests/test_fuzz.py.

``session(seed)`` gives the bytes of one file: mostly a plausible session (v3, v2, v1, a
header without version, Pi's harness v4 storage, no header at all) in which any field of any
line may hold any JSON type of any size, with lone surrogate escapes, invalid UTF-8, numbers
past a double, deep nesting, hostile ids (``/``, NUL, leading ``-``/``.``, ``..``, 300 bytes,
``x.md``, ``L3``), duplicate ids, cycles, orphans, self-parents, forward parents, huge tool
names, odd timestamps, unknown types, roles and blocks; and line damage: blank and garbage
lines, ``null``/``0``/``5``/``[]`` lines, a BOM, CRLF, a torn or cut tail. The same seed
always gives the same bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

# Markers put into values as strings, replaced in the serialized line by what orjson cannot
# write: a lone surrogate escape, raw invalid UTF-8, numbers past a double, deep nesting.
_SUR = "@@SUR@@"
_BADUTF = "@@BADUTF@@"
_BIG = "@@BIG@@"
_DEEP = "@@DEEP@@"
_NAN = "@@NAN@@"

ENTRY_TYPES = (
    "message",
    "message",
    "message",
    "message",
    "custom_message",
    "compaction",
    "branch_summary",
    "model_change",
    "thinking_level_change",
    "label",
    "session_info",
    "custom",
    "usage",
    "context_edit",
    "leaf",
    "mystery",
)
ROLES = (
    "user",
    "user",
    "assistant",
    "assistant",
    "toolResult",
    "bashExecution",
    "system",
    "custom",
    "hookMessage",
    "branchSummary",
    "weird-role",
)


# Lines put between others: Pi skips the blank, malformed and falsy ones and keeps the truthy
# ones as entries without an id.
_TRUTHY = (b"5", b"[]", b"[1,2]", b'"a string"', b"true")
_EXTRA_LINES = (
    b"",
    b"   ",
    b"\t",
    b"not json",
    b"null",
    b"0",
    b"false",
    b'""',
    *_TRUTHY,
    b'{"a":NaN}',
    b"[Infinity]",
    b"\xef\xbb\xbf{}",
    b'{"type":"session","id":"again","version":3}',
    b"{\x00}",
    b'{"type":"message"',
    b'{"a":1}\r',
    b"\x0c{}",
)


_INSERTS = (
    b" ",
    b"\t",
    b"\r",
    b"\x0b",
    b"\x0c",
    b"\x00",
    b"\x1f",
    b"\x7f",
    b"\xc2\xa0",
    b"\xe2\x80\xa8",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\\",
    b'"',
    b",",
    b":",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\ud800\\udc00",
    b"\\u00e9",
    b"\\x41",
    b"\\'",
    b"\\/",
    b"0",
    b"-",
    b"+",
    b".",
    b"e",
    b"E5",
    b"1e400",
    b"00",
    b"0x1",
    b"NaN",
    b"Infinity",
    b"true",
    b"null",
    b"//",
    b"/**/",
)


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.seed = seed
        self.ids: list[str] = []
        # Half the files keep every entry an object with a string id (Pi's view of those is
        # fully defined, so they are compared in full); the other half lose some.
        self.harsh = self.chance(0.5)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    # -- values -------------------------------------------------------------------------------

    def text(self) -> str:
        r = self.r
        pick = r.random()
        if pick < 0.5:
            return r.choice(["hello", "fix the parser", "", "多言語 ✓", "line\nbreak", "`x`"])
        if pick < 0.6:
            return "a" + _SUR + "b"
        if pick < 0.68:
            return "bad " + _BADUTF + " utf8"
        if pick < 0.73:
            return "x" * r.choice([300, 5000])
        if pick < 0.78:
            return "\ud83d\ude00 emoji, \u2028 \u0000 \x7f \r\n"
        return " ".join(r.choice(["pytest", "fails", "on", "the", "parser", "¾"]) for _ in range(6))

    def hostile(self, depth: int = 0) -> Any:
        """Any JSON value, of any size."""
        r = self.r
        pick = r.randrange(16)
        if pick == 0:
            return None
        if pick == 1:
            return r.choice([True, False])
        if pick == 2:
            return r.choice([0, -1, 7, 2**53, 2**63, 2**64 + 1, 10**30, -(10**25)])
        if pick == 3:
            return r.choice([0.5, -0.0, 1e308, 1e-320, 3.0])
        if pick == 4:
            return _BIG
        if pick == 5:
            return _DEEP
        if pick in (6, 7, 8):
            return self.text()
        if pick in (9, 10) and depth < 3:
            return [self.hostile(depth + 1) for _ in range(r.randrange(4))]
        if pick in (11, 12) and depth < 3:
            keys = ["type", "text", "id", "name", "content", "arguments", "data", _SUR]
            return {r.choice(keys): self.hostile(depth + 1) for _ in range(r.randrange(4))}
        if pick == 13:
            return r.choice([[], {}, "", [None], {"": None}])
        return self.text()

    def maybe(self, value: Any, p: float = 0.08) -> Any:
        """``value``, or (with probability ``p``) a hostile value of any type in its place."""
        return self.hostile() if self.chance(p) else value

    def new_id(self) -> str:
        r = self.r
        if self.chance(0.88):
            return f"{r.getrandbits(32):08x}"
        return r.choice(
            [
                "a/b",
                "a\0b",
                "-dash",
                ".dot",
                "..",
                ".",
                "x.md",
                "i" * 300,
                "é" * 150,
                "L3",
                "L7",
                "id with space",
                "sur" + _SUR,
                "bad" + _BADUTF,
                "019cadd3-7fc0-75ea-a894-d2664c1f3463",
                "current",
                "leaves",
            ]
        )

    def timestamp(self) -> Any:
        r = self.r
        sec = r.randrange(0, 3600)
        ok = f"2026-11-20T10:{sec // 60:02d}:{sec % 60:02d}.{r.randrange(1000):03d}Z"
        if self.chance(0.85):
            return ok
        return r.choice(
            [
                "2026-11-20T10:00:00.123456789Z",
                "+010000-01-01T00:00:00.000Z",
                "-000001-01-01T00:00:00.000Z",
                "0000-01-01T00:00:00.000Z",
                "not a time",
                "",
                "2026-11-20",
                1795168800000,
                -5,
                1e300,
                None,
                _BIG,
                {"t": 1},
                "9" * 400,
            ]
        )

    def ms(self) -> Any:
        r = self.r
        if self.chance(0.85):
            return 1795168800000 + r.randrange(10**7)
        return r.choice(
            [253402300800000, 1795168800000 * 10**6, -(10**20), _BIG, 1.5, True, "1795168800000"]
        )

    # -- entries ------------------------------------------------------------------------------

    def parent(self) -> Any:
        r = self.r
        ids = self.ids
        pick = r.random()
        if not ids or pick < 0.04:
            return None
        if pick < 0.72:
            return ids[-1]
        if pick < 0.86:
            return r.choice(ids)
        if pick < 0.9:
            return "deadbeef"  # an orphan's parent
        if pick < 0.94:
            return "FUTURE"  # replaced later by an id that comes after: forward refs, cycles
        if pick < 0.96:
            return "SELF"
        return self.hostile()

    def blocks(self, kinds: tuple[str, ...]) -> Any:
        r = self.r
        out: list[Any] = []
        for _ in range(r.randrange(4)):
            kind = r.choice(kinds)
            if kind == "text":
                out.append({"type": "text", "text": self.maybe(self.text())})
            elif kind == "thinking":
                b = {"type": "thinking", "thinking": self.maybe(self.text())}
                if self.chance(0.3):
                    b["redacted"] = self.maybe(True)
                out.append(b)
            elif kind == "toolCall":
                out.append(
                    {
                        "type": "toolCall",
                        "id": self.maybe(f"call_{r.randrange(99)}"),
                        "name": self.maybe(r.choice(["bash", "read", "edit", "t" * 300])),
                        "arguments": self.maybe({"command": self.text(), "x": self.hostile()}),
                    }
                )
            elif kind == "image":
                out.append(
                    {
                        "type": "image",
                        "data": self.maybe(r.choice(["aGk=", "!!!notbase64", "", _SUR])),
                        "mimeType": self.maybe(r.choice(["image/png", "image/jpeg", "x/y"])),
                    }
                )
            else:
                out.append(self.hostile())
        return self.maybe(out, 0.1)

    def message(self) -> dict[str, Any]:
        r = self.r
        role: Any = self.maybe(r.choice(ROLES), 0.05)
        m: dict[str, Any] = {"role": role, "timestamp": self.ms()}
        if role == "user":
            m["content"] = self.text() if self.chance(0.3) else self.blocks(("text", "image"))
        elif role == "assistant":
            m["content"] = self.blocks(("text", "thinking", "toolCall", "mystery"))
            m["provider"] = self.maybe("anthropic")
            m["model"] = self.maybe("claude-x")
            m["stopReason"] = self.maybe(r.choice(["stop", "toolUse", "error", "aborted"]))
            m["usage"] = self.maybe(
                {"input": self.maybe(10), "totalTokens": self.maybe(20), "cost": {"total": 0.1}}
            )
            if self.chance(0.2):
                m["errorMessage"] = self.hostile()
        elif role == "toolResult":
            m["toolCallId"] = self.maybe(f"call_{r.randrange(99)}")
            m["toolName"] = self.maybe(r.choice(["bash", "read", "a/b", "t" * 300, "é" * 200]))
            m["content"] = self.blocks(("text", "image"))
            m["isError"] = self.maybe(False)
        elif role == "bashExecution":
            m.update(command=self.maybe("ls"), output=self.maybe(self.text()))
            m["exitCode"] = self.maybe(0)
        elif role == "system":
            m["content"] = self.maybe(self.text())
            m["sections"] = self.maybe({"intro": self.text(), "gone": None})
            m["toolsAdded"] = self.maybe([{"name": "t", "parameters": self.hostile()}], 0.3)
            m["toolsRemoved"] = self.maybe([{"name": "t"}], 0.3)
        else:
            m["content"] = self.maybe(self.blocks(("text",)))
            m["customType"] = self.maybe("ext")
        return m

    def payload(self, etype: Any) -> dict[str, Any]:
        r = self.r
        if etype == "message":
            return {"message": self.maybe(self.message(), 0.04)}
        if etype == "custom_message":
            return {
                "customType": self.maybe(r.choice(["note", "x" * 300])),
                "content": self.maybe(self.blocks(("text", "image"))),
                "display": self.maybe(True),
            }
        if etype == "compaction":
            return {
                "summary": self.maybe(self.text()),
                "tokensBefore": self.maybe(r.choice([54000, _BIG, -1])),
                "firstKeptEntryId": self.maybe(r.choice([*self.ids[-3:], "nope"])),
            }
        if etype == "branch_summary":
            return {"summary": self.maybe(self.text()), "fromId": self.maybe("root")}
        if etype == "label":
            target = r.choice(self.ids) if self.ids else "x"
            return {"targetId": self.maybe(target), "label": self.maybe(r.choice(["cp", ""]))}
        if etype == "session_info":
            return {"name": self.maybe(self.text())}
        if etype == "model_change":
            return {"provider": self.maybe("anthropic"), "modelId": self.maybe("m")}
        if etype == "thinking_level_change":
            return {"thinkingLevel": self.maybe("high")}
        return {"data": self.hostile(), "customType": self.maybe("state")}

    def entry(self, linear: bool) -> dict[str, Any]:
        r = self.r
        etype: Any = r.choice(ENTRY_TYPES)
        if self.chance(0.03):
            etype = self.hostile()
        d: dict[str, Any] = {"type": etype}
        if not linear or self.chance(0.2):
            if self.ids and self.chance(0.05):
                eid: Any = r.choice(self.ids)  # a duplicate id
            else:
                eid = self.new_id()
            if self.harsh and self.chance(0.03):
                eid = self.hostile()
            d["id"] = eid
            d["parentId"] = self.parent()
            if isinstance(eid, str):
                self.ids.append(eid)
        d["timestamp"] = self.timestamp()
        d.update(self.payload(etype if isinstance(etype, str) else "custom"))
        if self.chance(0.03):
            del d["type"]
        if self.harsh and self.chance(0.03):
            d.pop("id", None)
        return d

    # -- files --------------------------------------------------------------------------------

    def header(self) -> tuple[Any, bool]:
        """(first line, whether Pi reads the entries as v1)."""
        r = self.r
        base = {
            "type": "session",
            "id": self.maybe("019cadd3-7fc0-75ea-a894-d2664c1f3463", 0.03),
            "timestamp": self.timestamp(),
            "cwd": self.maybe("/home/ana/src/app", 0.05),
        }
        pick = r.random()
        if pick < 0.62:
            return {**base, "version": 3}, False
        if pick < 0.68:
            return {**base, "version": 2}, False
        if pick < 0.75:
            return base, True  # no version: v1, even with ids
        if pick < 0.8:
            return {**base, "version": 1}, True
        if pick < 0.86:
            v: Any = r.choice(["3", [3], 2.5, 3.5, 4, 100, {}, "abc", [], "1", None, True, [[2]]])
            return {**base, "version": v}, False
        if pick < 0.9:
            return self.harness_header(), False
        if pick < 0.93:
            return self.hostile(), False  # no header at all
        return {**base, "version": 3, "parentSession": self.hostile()}, False

    def harness_header(self) -> dict[str, Any]:
        if self.chance(0.5):
            return {"kind": "header", "version": 4, "id": "h1", "createdAt": 1, "cwd": "/w"}
        return {"v": 4, "kind": "header", "storageVersion": 1, "id": "h2", "createdAt": 1}

    def harness_line(self, seq: int) -> dict[str, Any]:
        r = self.r
        pick = r.random()
        if pick < 0.6 or not self.ids:
            eid = self.new_id()
            parent = self.ids[-1] if self.ids and self.chance(0.9) else None
            self.ids.append(eid)
            line: dict[str, Any] = {"kind": "entry", "type": "message", "id": eid}
            line.update(parentId=parent, seq=seq, timestamp=1795168800000 + seq)
            line["message"] = self.message()
            if self.chance(0.7):
                line["lane"] = "main"
            return line
        if pick < 0.75:
            return {"kind": "lane", "seq": seq, "lane": "main", "leafId": r.choice(self.ids)}
        if pick < 0.85:
            return {"kind": "fact", "seq": seq, "fact": "name", "name": self.text()}
        if pick < 0.9:
            target = r.choice(self.ids)
            return {"kind": "fact", "seq": seq, "fact": "label", "targetId": target, "label": "x"}
        return {"kind": "record", "type": "operation_started", "id": f"r{seq}", "seq": seq}

    def lines(self) -> list[Any]:
        r = self.r
        header, linear = self.header()
        harness = isinstance(header, dict) and header.get("kind") == "header"
        out: list[Any] = [header]
        for i in range(r.randrange(0, 40)):
            out.append(self.harness_line(i + 1) if harness else self.entry(linear))
        for n, item in enumerate(out):  # resolve FUTURE and SELF parents now all ids exist
            if isinstance(item, dict) and item.get("parentId") == "FUTURE":
                later = [x["id"] for x in out[n + 1 :] if isinstance(x, dict) and "id" in x]
                item["parentId"] = r.choice(later) if later else None
            elif isinstance(item, dict) and item.get("parentId") == "SELF":
                item["parentId"] = item.get("id")
        if self.chance(0.08) and len(out) > 3:  # a deliberate cycle among two entries
            a, b = r.sample(range(1, len(out)), 2)
            if isinstance(out[a], dict) and isinstance(out[b], dict):
                out[a]["parentId"], out[b]["parentId"] = out[b].get("id"), out[a].get("id")
        return out

    def damage(self, lines: list[bytes]) -> list[bytes]:
        """Line-level damage: what torn writes, editors and hostile hands leave."""
        r = self.r
        out: list[bytes] = []
        for i, line in enumerate(lines):
            if i > 0 and self.chance(0.05):
                extra = r.choice(_EXTRA_LINES)
                out.append(extra if self.harsh or extra not in _TRUTHY else b"null")
            cut = r.randrange(len(line) + 1) if self.chance(0.02) else len(line)
            kept = line[:cut]  # sometimes a line cut in the middle
            out.append(self.mutate(kept) if self.chance(0.04) else kept)
        return out

    def mutate(self, line: bytes) -> bytes:
        """A few byte edits: JSON.parse and our parser must agree on what still parses."""
        r = self.r
        for _ in range(r.randrange(1, 4)):
            at = r.randrange(len(line) + 1)
            pick = r.random()
            if pick < 0.5:
                line = line[:at] + r.choice(_INSERTS) + line[at:]
            elif pick < 0.8:
                line = line[:at] + line[at + r.randrange(1, 4) :]
            else:
                line = line[:at] + line[max(0, at - 8) : at] + line[at:]
        return line

    def session(self) -> bytes:
        lines = [self.serialize(x) for x in self.lines()]
        lines = self.damage(lines)
        r = self.r
        eol = b"\r\n" if self.chance(0.08) else b"\n"
        data = b"".join(line + eol for line in lines)
        if self.chance(0.05):
            data = b"\xef\xbb\xbf" + data
        if self.chance(0.1) and data:
            data = data[: -len(eol)]  # a last line without its newline (still JSON)
        elif self.chance(0.06) and data:
            data = data[: r.randrange(len(data))]  # torn anywhere
        return data

    def serialize(self, value: Any) -> bytes:
        # ASCII escapes or raw UTF-8 (surrogates written raw are invalid UTF-8 as well)
        text = json.dumps(value, ensure_ascii=self.chance(0.3), separators=(",", ":"))
        raw = text.encode("utf-8", "surrogatepass")
        raw = raw.replace(_SUR.encode(), rb"\ud83d")
        raw = raw.replace(_BADUTF.encode(), b"\xff\xfe\xed\xa0\xbd")
        big = self.r.choice([b"1e400", b"-1e400", b"9" * 30])
        raw = raw.replace(b'"' + _BIG.encode() + b'"', big)
        depth = self.r.choice([300, 1100, 3000])
        raw = raw.replace(b'"' + _DEEP.encode() + b'"', b"[" * depth + b"1" + b"]" * depth)
        return raw.replace(b'"' + _NAN.encode() + b'"', b"NaN")


def session(seed: int) -> bytes:
    """The bytes of hostile session file number ``seed`` (deterministic)."""
    return Gen(seed).session()
