"""The session generator of scripts/bench: realistic v3 sessions of a given size.

Owns ``SessionWriter`` (Pi's shapes: a long chain with tool rounds, edits that branch, branch
summaries, labels, compactions, model changes), ``generate_session`` and the text pools it
draws from. Used by the big-session part (scripts/bench_big.py), the live part's big session
and scripts/bench_scale.py.
"""

from __future__ import annotations

import base64
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

_WORDS = (  # noqa: SIM905 (a word list reads best as text)
    "the a to of and in is for that it with on as be this by not are from or at an was "
    "file test tests function return value error list dict string path session entry "
    "parent leaf branch tree mount kernel cache timeout buffer parse render index json "
    "line bytes offset update fix refactor module import class method argument config "
    "build check lint type async await thread lock queue retry flaky memory leak grep "
    "docker kubernetes deploy"
).split()
#: Words that are not ASCII, and how often a sentence has one: a line of the generated
#: sessions is not ASCII a little less often than one of the fixtures' (18%; 6% of the
#: real Pi's lines). Every word drawn from one list made 91% of lines non-ASCII, which made the
#: parse and the render (UTF-8 checks, wide strings) look slower than real sessions are.
_FOREIGN = ["ünïcödé", "日本語", "naïve", "café", "résumé"]
FOREIGN_SHARE = 0.01  # (13% of the lines of bench_scale.py's corpus)
_IDENTS = (  # noqa: SIM905 (a word list reads best as text)
    "parse_line render_tree load_session build_index read_bytes walk_path make_entry "
    "SessionFile Index Parser Store View Entry Header fuse_ops lookup getattr readdir "
    "open read release flush self.cache self.index self.buf os.path.join orjson.loads "
    "len range"
).split()


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = rng.choices(_WORDS, k=rng.randint(lo, hi))
    if rng.random() < FOREIGN_SHARE:
        words[rng.randrange(len(words))] = rng.choice(_FOREIGN)
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "?", "!"))


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng, 5, 16) for _ in range(sentences))


def _line_pool(rng: random.Random, n: int) -> list[str]:
    """Lines that look like tool output: code, logs, test runs, diffs, JSON."""
    out: list[str] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.35:
            ind = " " * (4 * rng.randint(0, 3))
            a, b, c = rng.choices(_IDENTS, k=3)
            out.append(f'{ind}{a} = {b}({c}, "{rng.choice(_WORDS)}")  # {_sentence(rng, 2, 6)}')
        elif kind < 0.55:
            lvl = rng.choice(("INFO", "DEBUG", "WARNING", "ERROR"))
            out.append(
                f"2026-11-29 10:{i % 60:02d}:{(i * 7) % 60:02d},{i % 1000:03d} {lvl} "
                f"pisessfs.{rng.choice(_IDENTS)}: {_sentence(rng, 4, 12)}"
            )
        elif kind < 0.7:
            res = rng.choice(("PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"))
            out.append(
                f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_IDENTS).lower()}"
                f"_{i} {res} [{i % 100:3d}%]"
            )
        elif kind < 0.85:
            sign = rng.choice("+- ")
            out.append(f"{sign}    {rng.choice(_IDENTS)}({rng.choice(_IDENTS)}) \\t '\"quoted\"'")
        else:
            out.append(
                orjson.dumps(
                    {"id": f"{rng.getrandbits(32):08x}", "n": i, "msg": _sentence(rng, 3, 8)}
                ).decode()
            )
    return out


class SessionWriter:
    """Writes a v3 session the way Pi shapes it: a long chain with branches."""

    def __init__(self, path: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.f = open(path, "wb")  # noqa: SIM115 (closed in close())
        self.size = 0
        self.lines = 0
        self.ids: set[str] = set()
        self.t_ms = 1_795_946_400_000  # 2026-11-29T10:00:00Z
        self.pool = _line_pool(self.rng, 6000)
        self.buf: list[bytes] = []
        self.counts: dict[str, int] = {}

    def close(self) -> None:
        self._flush()
        self.f.close()

    def _flush(self) -> None:
        self.f.write(b"".join(self.buf))
        self.buf.clear()

    def new_id(self) -> str:
        while True:
            i = f"{self.rng.getrandbits(32):08x}"
            if i not in self.ids:
                self.ids.add(i)
                return i

    def tick(self, lo: int = 50, hi: int = 20_000) -> tuple[str, int]:
        self.t_ms += self.rng.randint(lo, hi)
        ms = self.t_ms
        iso = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{iso}.{ms % 1000:03d}Z", ms

    def write(self, d: dict[str, Any]) -> None:
        line = orjson.dumps(d) + b"\n"
        self.buf.append(line)
        self.size += len(line)
        self.lines += 1
        key = str(d.get("type"))
        if key == "message":
            key = "message/" + str(d["message"].get("role"))
        self.counts[key] = self.counts.get(key, 0) + 1
        if len(self.buf) >= 2000:
            self._flush()

    def entry(self, etype: str, parent: str | None, **payload: Any) -> str:
        eid = self.new_id()
        ts, _ = self.tick()
        self.write({"type": etype, "id": eid, "parentId": parent, "timestamp": ts, **payload})
        return eid

    def message(self, parent: str | None, msg: dict[str, Any], lo: int = 50) -> str:
        eid = self.new_id()
        ts, ms = self.tick(lo)
        msg["timestamp"] = ms
        self.write(
            {"type": "message", "id": eid, "parentId": parent, "timestamp": ts, "message": msg}
        )
        return eid

    def output(self, lo: int = 15, hi: int = 110) -> str:
        n = self.rng.randint(lo, hi)
        i = self.rng.randrange(0, len(self.pool) - n)
        return "\n".join(self.pool[i : i + n])

    def _usage(self) -> dict[str, Any]:
        r = self.rng
        inp, out, cr, cw = r.randint(5, 60), r.randint(20, 900), r.randint(2000, 90000), 500
        return {
            "input": inp,
            "output": out,
            "cacheRead": cr,
            "cacheWrite": cw,
            "totalTokens": inp + out + cr + cw,
            "cost": {
                "input": inp * 3e-6,
                "output": out * 15e-6,
                "cacheRead": cr * 3e-7,
                "cacheWrite": cw * 3.75e-6,
                "total": inp * 3e-6 + out * 15e-6 + cr * 3e-7 + cw * 3.75e-6,
            },
        }

    def assistant(self, parent: str, content: list[dict[str, Any]], stop: str) -> str:
        return self.message(
            parent,
            {
                "role": "assistant",
                "content": content,
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "responseId": f"msg_{self.rng.getrandbits(96):024x}",
                "thinkingLevel": "medium",
                "usage": self._usage(),
                "stopReason": stop,
                "durationMs": self.rng.randint(800, 30000),
            },
            lo=2000,
        )

    def tool_round(self, parent: str) -> str:
        """An assistant turn with a tool call and its result; returns the result's id."""
        r = self.rng
        tool = r.choice(("bash", "bash", "read", "read", "edit"))
        call_id = "toolu_" + base64.b32encode(r.randbytes(15)).decode().lower()
        path = f"src/{r.choice(_WORDS)}/{r.choice(_IDENTS).lower()}.py"
        if tool == "bash":
            args: dict[str, Any] = {"command": f"python -m pytest -q tests/ -k {r.choice(_WORDS)}"}
        elif tool == "read":
            args = {"path": path}
        else:
            args = {
                "path": path,
                "edits": [{"oldText": self.output(2, 4), "newText": self.output(2, 5)}],
            }
        sig = base64.b64encode(r.randbytes(r.randint(40, 150))).decode()
        content: list[dict[str, Any]] = [
            {
                "type": "thinking",
                "thinking": _paragraph(r, r.randint(1, 4)),
                "thinkingSignature": sig,
            }
        ]
        if r.random() < 0.6:
            content.append({"type": "text", "text": _paragraph(r, r.randint(1, 3))})
        content.append({"type": "toolCall", "id": call_id, "name": tool, "arguments": args})
        a = self.assistant(parent, content, "toolUse")
        result: dict[str, Any] = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": tool,
            "content": [{"type": "text", "text": self.output()}],
            "isError": r.random() < 0.05,
            "durationMs": r.randint(10, 9000),
        }
        if tool == "edit":
            result["content"] = [
                {"type": "text", "text": f"Successfully replaced 1 block(s) in {path}."}
            ]
            diff = self.output(8, 40)
            result["details"] = {
                "diff": diff,
                "patch": f"--- {path}\n+++ {path}\n{diff}",
                "firstChangedLine": r.randint(1, 400),
            }
        return self.message(a, result)

    def turn(self, parent: str, text: str | None = None) -> tuple[str, str]:
        """A user prompt, tool rounds, a final answer; returns (user id, last id)."""
        r = self.rng
        text = text or _paragraph(r, r.randint(1, 5))
        u = self.message(
            parent, {"role": "user", "content": [{"type": "text", "text": text}]}, lo=10_000
        )
        cur = u
        for _ in range(r.choice((0, 1, 1, 2, 2, 3, 4, 6))):
            cur = self.tool_round(cur)
        if r.random() < 0.05:
            cur = self.message(
                cur,
                {
                    "role": "bashExecution",
                    "command": "git diff --stat",
                    "output": self.output(3, 12),
                    "exitCode": 0,
                    "cancelled": False,
                    "truncated": False,
                },
            )
        final = [{"type": "text", "text": _paragraph(r, r.randint(2, 8))}]
        cur = self.assistant(cur, final, "stop")
        return u, cur


def generate_session(path: Path, target_bytes: int, seed: int = 1) -> dict[str, Any]:
    """A realistic v3 session of about ``target_bytes``: Pi's shapes, written by us."""
    w = SessionWriter(path, seed)
    r = w.rng
    ts, _ = w.tick()
    w.write(
        {
            "type": "session",
            "version": 3,
            "id": str(uuid.UUID(int=r.getrandbits(128), version=4)),
            "timestamp": ts,
            "cwd": "/home/ana/src/big-project",
        }
    )
    cur = w.entry("model_change", None, provider="anthropic", modelId="claude-sonnet-4-5")
    cur = w.entry("thinking_level_change", cur, thinkingLevel="medium")
    users: list[tuple[str, str]] = []  # (user id, its parent) along the main chain
    turns = branches = 0
    while w.size < target_bytes:
        prev = cur
        u, cur = w.turn(cur)
        users.append((u, prev))
        turns += 1
        if turns == 3:
            cur = w.entry("session_info", cur, name="Big refactor of the parser")
        if r.random() < 1 / 40 and len(users) > 3:
            # Edit an earlier prompt (a sibling of it: a new branch), work a little there,
            # then go back to the main leaf, sometimes leaving a branch summary.
            _, parent = users[-r.randint(1, min(8, len(users)))]
            side = parent
            for i in range(r.randint(1, 3)):
                _, side = w.turn(side, _paragraph(r, 2) + (" (edited)" if i == 0 else ""))
            branches += 1
            if r.random() < 0.5:
                cur = w.entry(
                    "branch_summary", cur, fromId=side, summary=_paragraph(r, 6), fromHook=False
                )
        if r.random() < 1 / 60:
            cur = w.entry("label", cur, targetId=cur, label=f"checkpoint-{turns}")
        if r.random() < 1 / 250:
            summary = "## Goal\n" + _paragraph(r, 4) + "\n\n## Progress\n" + w.output(10, 30)
            cur = w.entry(
                "compaction",
                cur,
                summary=summary,
                firstKeptEntryId=users[-1][0],
                tokensBefore=r.randint(50_000, 180_000),
                details={"readFiles": ["a.py", "b.py"], "modifiedFiles": ["a.py"]},
            )
        if r.random() < 1 / 400:
            cur = w.entry("model_change", cur, provider="anthropic", modelId="claude-opus-4-5")
    w.close()
    return {
        "bytes": path.stat().st_size,
        "lines": w.lines,
        "turns": turns,
        "side_branches": branches,
        "by_type": w.counts,
    }
