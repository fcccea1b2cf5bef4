"""Damaged and hostile sessions through a real mount: what ``conversation.md`` shows of a
damaged session, and where the mount's links may point (DESIGN.md, "Layout" and "Reading
damaged or hostile input").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests import damaged
from tests.conftest import FORK, RECIPE, RECIPE_STEM, mounted

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)

NUMBERED = re.compile(r"^(\d{4,})-(.+)\.md$")
SEP = " · "


def session_folders(project: Path) -> dict[str, Path]:
    """Each session folder of ``project`` (not its links) by its real file's path."""
    out = {}
    for name in os.listdir(project):
        p = project / name
        if p.is_symlink():
            continue
        out[os.fsdecode(os.getxattr(p, "user.pi.file"))] = p
    return out


Heading = tuple[int, str, str]  # an entry's number, kind and id


def headings(conv: bytes) -> dict[Heading, list[int]]:
    """``conversation.md``'s headings (``## NNNN kind · id · time``): where the text under
    each starts (after the heading line and its blank line)."""
    out: dict[Heading, list[int]] = {}
    for m in re.finditer(rb"^## (\d+) ([^ ]+) \xc2\xb7 (.*)\n\n", conv, re.M):
        eid = m.group(3).decode("utf-8", "surrogateescape").split(SEP)[0]
        out.setdefault((int(m.group(1)), m.group(2).decode(), eid), []).append(m.end())
    return out


def shown_entries(folder: Path) -> dict[Heading, Path]:
    """Every numbered message file the session's listed leaves show (through their links),
    by the heading it must have (a file's number is wider past 9999, a heading's is not)."""
    out: dict[Heading, Path] = {}
    leaves = folder / "leaves"
    branches = [leaves / n for n in os.listdir(leaves) if not n.endswith(".md")]
    if os.path.lexists(folder / "current"):
        branches.append(folder / "current")
    for branch in branches:
        for name in os.listdir(branch):
            m = NUMBERED.match(name)
            if m is None:
                continue
            f = branch / name
            eid = os.getxattr(f, "user.pi.id").decode("utf-8", "surrogateescape")
            out.setdefault((int(m.group(1)), m.group(2), eid), f)
    return out


@pytest.mark.warns  # (the damaged sessions' problems)
def test_a_damaged_sessions_conversation_shows_its_entries_and_notes_its_problems(
    tmp_path: Path,
) -> None:
    root = tmp_path / "sessions"
    written = damaged.write_all(root / "--work--")
    failures: list[str] = []
    with mounted(root) as m:
        folders = session_folders(m.path / "work")
        for case, (path, kinds) in written.items():
            folder = folders.get(str(path))
            assert folder is not None, (case, sorted(folders))
            assert (m.path / "work" / path.stem).resolve() == folder.resolve(), case
            conv = (folder / "conversation.md").read_bytes()
            text = conv.decode("utf-8", "replace")
            doc = orjson.loads((folder / "session.json").read_bytes())
            problems: list[dict[str, Any]] = doc["problems"]
            listed = {p["kind"] for p in problems}
            if not kinds <= listed:
                failures.append(f"{case}: session.json lists {problems}, not {sorted(kinds)}")

            # every problem session.json lists is noted in conversation.md, with its line,
            # but for those a later append takes back (conversation.md only grows): a torn
            # last line Pi may yet finish, the missing header of a file with no whole line
            passing = {"torn-tail"} | ({"no-header"} if not path.read_bytes() else set())
            lasting = [p for p in problems if p["kind"] not in passing]
            if not conv and not lasting:
                continue  # (the empty file: nothing to show yet)
            for p in lasting:
                note = f"> problem: line {p['line']}: {p['kind']}: {p['detail']}\n"
                if note not in text:
                    failures.append(f"{case}: conversation.md lacks {note!r}")
            for kind in kinds - passing:
                if not re.search(rf"^> problem: line \d+: {re.escape(kind)}: ", text, re.M):
                    failures.append(f"{case}: conversation.md notes no {kind!r} problem")
            # and notes no problem session.json does not list
            said = {(p["line"], p["kind"], p["detail"]) for p in problems}
            for n in re.finditer(r"^> problem: line (\d+): ([^:]+): (.*)$", text, re.M):
                got = (int(n.group(1)), n.group(2), n.group(3))
                if got not in said:
                    failures.append(f"{case}: conversation.md notes {got}, not in session.json")

            # every entry a branch shows has its heading, followed by its file's bytes
            heads = headings(conv)
            for (number, kind, eid), f in shown_entries(folder).items():
                starts = heads.get((number, kind, eid))
                if not starts:
                    failures.append(f"{case}: no heading '## {number:04d} {kind}{SEP}{eid}'")
                    continue
                body = f.read_bytes()
                if not any(conv.startswith(body, at) for at in starts):
                    failures.append(f"{case}: {f.name}'s bytes are not under its heading")
    assert not failures, "\n".join(failures)
    assert "Traceback" not in m.log_text(), m.log_text()


# -- links stay where they belong ---------------------------------------------------------------


#: Entry ids no file name may be: a path, a dot name, an option, an extension, too long,
#: escaped-looking, lone surrogates (JSON escapes, as Pi's JSON.parse reads them).
HOSTILE_IDS = [
    "..",
    ".",
    "a/b",
    "../../x",
    "/",
    "-x",
    ".hidden",
    "x.md",
    "y" * 300,
    "é" * 200,
    "a%2Fb",
    "a~b",
    "\ud83d",
    "\udcff-x",
]


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    """Rows as Pi writes them (lone surrogates as JSON escapes)."""
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8", "surrogatepass")


def hostile_sessions(sessions: Path) -> None:
    """test_hardening's hostile-id session and odd folder names, a session whose own id,
    cwd and file name hold lone surrogates, and forks whose ``parentSession`` is across
    projects, flat, or a path that leads out of the sessions root."""
    head: dict[str, Any] = dict(damaged.HEADER)
    rows: list[dict[str, Any]] = [head]
    rows += [damaged.user(eid, None, f"root {i}", i) for i, eid in enumerate(HOSTILE_IDS)]
    parent = None
    for i, eid in enumerate(HOSTILE_IDS):  # the same ids again, as one chain of a branch
        rows.append(damaged.user(eid + "~chain", parent, f"chain {i}", i))
        parent = eid + "~chain"
    (sessions / "--hostile--").mkdir()
    (sessions / "--hostile--" / "h.jsonl").write_bytes(jsonl(rows))
    (sessions / "flat.jsonl").write_bytes(damaged.good(1))
    (sessions / "flat").mkdir()  # a folder of the same name
    (sessions / "--.--").mkdir()
    (sessions / "--..--").mkdir()
    bad = Path(os.fsdecode(os.fsencode(sessions) + b"/--bad\xff--"))
    bad.mkdir()
    (bad / "s\udcfe.jsonl").write_bytes(damaged.good(1))
    odd = {**damaged.HEADER, "id": "s\udc00/..", "cwd": "/w\ud800/.."}
    (bad / "odd.jsonl").write_bytes(jsonl([odd, damaged.user("..", None, "odd \ud800")]))

    # forks: across projects, from the flat root, and parents named outside the root
    recipe = sessions / f"--{RECIPE.split('/')[0]}--" / f"{RECIPE_STEM}.jsonl"
    assert recipe.exists()
    outside = sessions.parent / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_bytes(damaged.good(1))
    (sessions.parent / "y.jsonl").write_bytes(damaged.good(1))
    parents = {
        "across": str(recipe),
        "to-flat": str(sessions / "flat.jsonl"),
        "up-relative": "../y.jsonl",
        "up-absolute": f"{sessions}/../y.jsonl",
        "outside": str(outside / "x.jsonl"),
        "dotdot-tail": f"{sessions}/--hostile--/../../outside/x.jsonl",
        "root-parent": "/../../etc/x.jsonl",
        "self": str(sessions / "--forks--" / "self.jsonl"),
        "dot-name": "/.jsonl",
        "dotdot-name": "..jsonl",
    }
    (sessions / "--forks--").mkdir()
    for stem, target in parents.items():
        fork = {**damaged.HEADER, "id": f"fork-{stem}", "parentSession": target}
        data = damaged.line(fork) + damaged.good(1).split(b"\n", 1)[1]
        (sessions / "--forks--" / f"{stem}.jsonl").write_bytes(data)
    flat_fork = {**damaged.HEADER, "id": "fork-flat", "parentSession": str(recipe)}
    (sessions / "flat-fork.jsonl").write_bytes(
        damaged.line(flat_fork) + damaged.good(1).split(b"\n", 1)[1]
    )


def inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def link_problems(top: str, mnt: str, sessions: set[str], where: str) -> list[str]:
    """Each link under ``top`` (a walk not following links) that leads out of where it may,
    each listing with a name twice; ``sessions`` gathers the session folders met."""
    bad: list[str] = []
    for dirpath, dirs, files in os.walk(top):
        names = dirs + files
        if len(names) != len(set(names)):
            bad.append(f"{where}: {dirpath} lists a name twice: {sorted(names)}")
        if os.path.isdir(dirpath) and _is_session(dirpath):
            sessions.add(os.path.realpath(dirpath))
        for name in names:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                continue
            target = os.path.normpath(os.path.join(dirpath, os.readlink(p)))
            shown = f"{where}: {p} -> {os.readlink(p)}"
            session = _session_of(dirpath, mnt)
            if name == "parent" and session == dirpath:
                bound, what = mnt, "the mount"  # a fork's parent: any session of the mount
                if target == session or not _is_session(target):
                    bad.append(f"{shown} is no other session")
            elif session is not None:
                bound, what = session, session  # leaves/*, current, session.jsonl, ...
            elif name == "latest" and dirpath == mnt:
                bound, what = mnt, "the mount"  # the session that changed last, of any project
            else:
                bound, what = mnt, "the mount"
            if not inside(target, bound):
                bad.append(f"{shown} leaves {what}")
            if not os.path.exists(p):
                bad.append(f"{shown} resolves to nothing")
    return bad


def _is_session(path: str) -> bool:
    try:
        os.getxattr(path, "user.pi.file", follow_symlinks=False)
    except OSError:
        return False
    return True


def _session_of(dirpath: str, mnt: str) -> str | None:
    """The session folder ``dirpath`` is in (or is), by the path alone: the first or
    second folder under the mount that carries ``user.pi.file``."""
    parts = os.path.relpath(dirpath, mnt).split("/")
    for depth in (1, 2):
        if len(parts) >= depth and parts[0] != ".":
            candidate = os.path.join(mnt, *parts[:depth])
            if _is_session(candidate):
                return candidate
    return None


@pytest.mark.warns  # hostile ids and parents are reported as problems
def test_no_link_leads_out_of_its_session_project_or_mount(sessions: Path) -> None:
    hostile_sessions(sessions)
    with mounted(sessions) as m:
        mnt = str(m.path)
        met: set[str] = set()
        bad = link_problems(mnt, mnt, met, "walk")
        # the branch folders no listing shows, entered through their links
        for session in sorted(met):
            for leaf in os.listdir(os.path.join(session, "leaves")):
                p = os.path.join(session, "leaves", leaf)
                if os.path.isdir(p):
                    bad += link_problems(p, mnt, set(), f"leaf of {session}")
        # what the walk must have met: the hostile session, every fork, a parent link
        hostile = [s for s in met if os.path.basename(os.path.dirname(s)) == "hostile"]
        assert len(hostile) == 1, sorted(met)
        leaves = os.listdir(os.path.join(hostile[0], "leaves"))
        assert len([n for n in leaves if not n.endswith(".md")]) == len(HOSTILE_IDS) + 1
        assert os.path.islink(m.path / FORK / "parent")
        across = m.path / "forks" / "across"
        assert os.readlink(across).startswith("2026-11-20T1000-")
        assert os.path.realpath(across / "parent") == os.path.realpath(m.path / RECIPE)
        assert os.path.realpath(m.path / "flat-fork" / "parent") == os.path.realpath(
            m.path / RECIPE
        )
        assert len(met) >= len(list(sessions.rglob("*.jsonl")))
    assert not bad, "\n".join(bad)
    assert "Traceback" not in m.log_text(), m.log_text()
