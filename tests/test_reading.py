"""Every message reads like Pi's own export (DESIGN.md, "What a message file contains").

Real mounts of every fixture and example: each message file is read through its leaf's
link and held against its entry in the real JSONL. No file shows an escape (``\\n``,
``\\"``) or a base64 run that is not in the data itself, or an opaque call id; every tool
result names the call it answers; an edit's diff is the one Pi recorded; every file with a
header says when; two mounts give the same bytes. A made-up session covers the kinds the
fixtures lack: compactions and summaries naming files, context edits in the one-file
views, unknown tools, blocks, roles and entry types.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, SHARED_FIXTURES, Mount, mounted

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

FENCE = re.compile(r"^(`{3,})(\w*)\n(.*?)^\1$", re.M | re.S)
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{120,}")


def strings(v: object) -> Iterator[str]:
    """Every string of a parsed JSON value, keys included."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def sessions_of(mnt: Path) -> list[Path]:
    return sorted(p.parent for p in mnt.glob("*/*/conversation.md"))


def entries(session: Path) -> dict[str, dict[str, Any]]:
    real = Path(os.getxattr(session, "user.pi.file").decode())
    out: dict[str, dict[str, Any]] = {}
    for n, raw in enumerate(real.read_bytes().splitlines(), 1):
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        if isinstance(d, dict):  # a line without an id (Pi v1) is L<line number>
            out.setdefault(d["id"] if isinstance(d.get("id"), str) else f"L{n}", d)
    return out


def message_files(session: Path) -> dict[str, tuple[str, str]]:
    """Each entry's message file (read through the leaf links): id -> (name, text)."""
    out: dict[str, tuple[str, str]] = {}
    leaves = session / "leaves"
    for leaf in sorted(os.listdir(leaves)):
        if leaf.endswith(".md"):
            continue
        for p in sorted((leaves / leaf).iterdir()):
            if p.name.endswith(".md"):
                eid = os.getxattr(p, "user.pi.id").decode()
                out.setdefault(eid, (p.name, p.read_text()))
    return out


def message(d: dict[str, Any]) -> dict[str, Any]:
    m = d.get("message")
    return m if isinstance(m, dict) else {}


def blocks(v: object) -> list[dict[str, Any]]:
    return [b for b in v if isinstance(b, dict)] if isinstance(v, list) else []


def call_ids(d: dict[str, Any]) -> set[str]:
    msg = message(d)
    ids = {b["id"] for b in blocks(msg.get("content")) if isinstance(b.get("id"), str)}
    if isinstance(msg.get("toolCallId"), str):
        ids.add(msg["toolCallId"])
    return {i for i in ids if len(i) >= 8}


def calls_by_id(ents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for d in ents.values():
        for b in blocks(message(d).get("content")):
            if b.get("type") == "toolCall" and isinstance(b.get("id"), str):
                out[b["id"]] = b
    return out


def test_every_message_file_reads_as_text_not_json(mount: Mount) -> None:
    checked = results = diffs = 0
    for session in sessions_of(mount.path):
        ents = entries(session)
        calls = calls_by_id(ents)
        for eid, (name, text) in message_files(session).items():
            d = ents[eid]
            answered = calls.get(message(d).get("toolCallId"))  # type: ignore[arg-type]
            data = "\n".join([*strings(d), *strings(answered)])  # a result shows its call
            where = f"{session.name}/{name}"
            for esc in ("\\n", '\\"'):
                assert esc not in text or esc in data, f"{where}: an escape not in the data"
            for run in BASE64_RUN.findall(text):
                assert run in data and not any(
                    run in str(b.get("data")) for b in blocks(message(d).get("content"))
                ), f"{where}: a base64 run"
            for cid in call_ids(d):
                assert cid not in text, f"{where}: the call id {cid} is in the text"
            msg = message(d)
            if msg.get("role") != "user":
                assert re.match(r"\A(\w[\w ]*: .*\n)+\n", text), f"{where}: no header"
                if isinstance(d.get("timestamp"), str):
                    assert re.search(r"^time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", text, re.M), where
            if msg.get("role") == "toolResult":
                results += 1
                call = answered
                first = text.splitlines()[0]
                assert first.startswith("call: " if call else "tool: "), where
                args = call.get("arguments") if call else None
                if isinstance(args, dict) and call is not None:
                    said = args.get("command") if call.get("name") == "bash" else args.get("path")
                    if isinstance(said, str) and said:
                        assert said.splitlines()[0][:100] in first, f"{where}: {first!r}"
                details = msg.get("details")
                diff = details.get("diff") if isinstance(details, dict) else None
                if isinstance(diff, str) and diff:
                    shown = [m[2] for m in FENCE.findall(text) if m[1] == "diff"]
                    assert shown == [diff if diff.endswith("\n") else diff + "\n"], where
                    diffs += 1
            checked += 1
    assert checked > 100 and results > 10 and diffs >= 2, (checked, results, diffs)


def test_the_examples_tool_results_name_their_command_or_path(mount: Mount) -> None:
    recipe = next(s for s in sessions_of(mount.path) if "recipe-box" in str(s))
    files = dict(message_files(recipe).values())
    assert files["0004-tool-bash.md"].startswith(
        "call: $ python -m pytest -q tests/test_parser.py\ntime: 2026-03-02 09:15:23\nerror: yes\n"
    )
    assert files["0006-tool-read.md"].startswith("call: read recipe_box/parser.py\n")
    edit = next(t for n, t in files.items() if n.endswith("-assistant.md") and "→ edit" in t)
    assert "**→ edit** recipe_box/parser.py\nold text (1 of 2):\n```\n" in edit
    assert "oldText" not in edit and "\\d" not in edit.replace("\\d+", "")  # no JSON
    tool = next(p for p in (recipe / "current").iterdir() if p.name.endswith("-tool-bash.md"))
    assert os.getxattr(tool, "user.pi.call").startswith(b"toolu_")


def test_two_mounts_render_the_same_bytes(mount: Mount, sessions: Path) -> None:
    def everything(mnt: Path) -> dict[str, bytes]:
        out = {}
        for s in sessions_of(mnt):
            for name in ("conversation.md", "tree.txt", "current.md"):
                out[f"{s.name}/{name}"] = (s / name).read_bytes()
        return out

    first = everything(mount.path)
    with mounted(sessions) as again:
        assert everything(again.path) == first


# -- kinds the fixtures lack -------------------------------------------------------------------

T = "2026-11-20T10:00:0{}.000Z"


def line(eid: str, parent: str | None, n: int, **fields: Any) -> dict[str, Any]:
    return {"id": eid, "parentId": parent, "timestamp": T.format(n), **fields}


def msg(eid: str, parent: str | None, n: int, **m: Any) -> dict[str, Any]:
    return line(eid, parent, n, type="message", message=m)


MADE_UP = [
    {"type": "session", "version": 3, "id": "made-up", "timestamp": T.format(0), "cwd": "/w"},
    msg("u1", None, 1, role="user", content="first question"),
    msg(
        "a1",
        "u1",
        2,
        role="assistant",
        provider="p",
        model="m",
        stopReason="toolUse",
        content=[
            {
                "type": "toolCall",
                "id": "call_abcdef123456",
                "name": "deploy",
                "arguments": {
                    "target": "prod",
                    "script": 'echo "hi"\nexit 0',
                    "opts": {"dry": True, "tags": ["a", "b"]},
                },
            },
            {"type": "sparkle", "level": 3, "note": 'a "quoted"\nnote'},
        ],
    ),
    msg(
        "r1",
        "a1",
        3,
        role="toolResult",
        toolCallId="call_abcdef123456",
        toolName="deploy",
        content=[{"type": "text", "text": "deployed"}],
        isError=False,
        nestedCalls={
            "complete": True,
            "calls": [
                {"name": "bash", "status": "ok", "arguments": {"command": "make"}, "durationMs": 5}
            ],
        },
    ),
    line(
        "c1",
        "r1",
        4,
        type="compaction",
        summary="we deployed",
        firstKeptEntryId="a1",
        tokensBefore=1234,
    ),
    line(
        "e1",
        "c1",
        5,
        type="context_edit",
        targetId="r1",
        replacement={"content": [{"type": "text", "text": "deploy said: fine"}]},
    ),
    line("e2", "e1", 6, type="context_edit", targetId="u1", replacement=None),
    msg("x1", "e2", 7, role="oracle", content="a role Pi does not have", mood={"k": 'v "q"'}),
    line("z1", "x1", 8, type="hologram", payload={"beam": "l1\nl2"}),
    line("b1", "u1", 9, type="branch_summary", fromId="x1", summary="tried a deploy"),
    msg(
        "s1",
        "b1",
        9,
        role="system",
        toolsAdded=[
            {
                "name": "deploy",
                "description": "Ship it.",
                "parameters": {
                    "type": "object",
                    "required": ["target"],
                    "properties": {
                        "target": {"type": "string", "description": "where"},
                        "dry": {"type": "boolean"},
                    },
                },
            }
        ],
    ),
]


def test_made_up_kinds_read_as_text(tmp_path: Path) -> None:
    root = tmp_path / "sessions" / "--w--"
    root.mkdir(parents=True)
    (root / "s.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MADE_UP))
    with mounted(tmp_path / "sessions") as m:
        session = sessions_of(m.path)[0]
        files = {name: text for name, text in message_files(session).values()}
        conv = (session / "conversation.md").read_text()
        tree = (session / "tree.txt").read_text()
    call = files["0002-assistant.md"]
    assert "model: p/m\ntime: 2026-11-20 10:00:02\n" in call
    assert '**→ deploy**\ntarget: prod\nscript:\n```\necho "hi"\nexit 0\n```\n' in call
    assert "opts.dry: true\nopts.tags[0]: a\nopts.tags[1]: b\n" in call
    assert '[sparkle]\nlevel: 3\nnote:\n```\na "quoted"\nnote\n```' in call
    result = files["0003-tool-deploy.md"]
    assert result.startswith("call: deploy prod\ntime: 2026-11-20 10:00:03\n\n```\ndeployed\n```\n")
    assert "nested calls: 1\n✓ $ make (5 ms)\n" in result
    assert "call_abcdef" not in result
    assert "first kept entry: 0002-assistant.md (a1)\n" in files["0004-compaction.md"]
    summary = next(t for n, t in files.items() if n.endswith("-branch-summary.md"))
    assert "branch summary of: 0005-oracle.md (x1)\n" in summary
    oracle = files["0005-oracle.md"]
    assert oracle.startswith("role: oracle\ntime: 2026-11-20 10:00:07\n\na role Pi does not have")
    assert 'mood.k: v "q"' in oracle
    assert (
        "> context edit: the model sees 0003-tool-deploy.md (r1) replaced by: · e1 · "
        "2026-11-20 10:00:05 UTC\n> deploy said: fine\n"
    ) in conv
    assert "> context edit: the model no longer sees 0001-user.md (u1) · e2 ·" in conv
    hologram = "> [hologram] · z1 · 2026-11-20 10:00:08 UTC\n> payload.beam:\n> ```\n> l1\n> l2\n"
    assert hologram in conv  # every field of an unknown entry type, as text
    assert "[deploy: prod] → deployed\n" in tree  # the result says what it returned
    assert "# unnamed · /w · created 2026-11-20 10:00:00 UTC · 5 messages · $0.0000\n" in tree
    assert "# 10 entries, 2 leaves;" in tree
    assert files["0003-system.md"] == (
        "system: prompt update\ntime: 2026-11-20 10:00:09\n\n## tool added: deploy\nShip it.\n"
        "- target (string, required): where\n- dry (boolean, optional)\n"
    )


def test_the_fixtures_are_the_shared_ones() -> None:
    """tests/fixtures is the repository's copy of ../shared/fixtures (the sessions the real
    Pi wrote), so that a clean clone tests every one of them: when the shared folder is
    beside the checkout, the two hold the same files, byte for byte."""
    mine = {p.relative_to(FIXTURES): p.read_bytes() for p in FIXTURES.rglob("*") if p.is_file()}
    assert len([p for p in mine if p.suffix == ".jsonl"]) >= 20
    if not SHARED_FIXTURES.is_dir():
        return  # (a clean clone: the copy is what there is)
    shared = {p.relative_to(SHARED_FIXTURES): p for p in SHARED_FIXTURES.rglob("*") if p.is_file()}
    assert set(mine) == set(shared), "copy ../shared/fixtures to tests/fixtures again"
    for rel, p in shared.items():
        assert mine[rel] == p.read_bytes(), f"{rel}: copy ../shared/fixtures again"
