"""The live view on a real mount: what Pi (and others) do to the sessions shows at once.

Needs /dev/fuse and node with the pinned Pi package; skips loudly without them, fails in CI.
Conditions are polled (never slept on) with a generous bound; the latency itself is measured
by scripts/bench, not asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests import damaged
from tests.conftest import RECIPE, Mount, mounted, pi, wait_for

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

PARENT = "74cc97d5"


def real_of(folder: Path) -> Path:
    return Path(os.getxattr(folder, "user.pi.file").decode())


def current_id(folder: Path) -> str:
    return os.getxattr(folder / "current", "user.pi.id").decode()


def test_pi_appends_show_in_current_and_tree(mount: Mount) -> None:
    folder = mount.path / RECIPE
    assert current_id(folder) == PARENT  # entered: parsed before Pi writes
    tree = open(folder / "tree.txt", "rb")  # noqa: SIM115 (a reader holding the file open)
    first = tree.read(100)
    before = (folder / "conversation.md").read_bytes()
    (new,) = pi("--append", str(real_of(folder)), PARENT, "appended by pi")
    wait_for(lambda: current_id(folder) == new, 5, "the new entry in current/")
    assert (folder / "current" / "0024-user.md").read_text() == "appended by pi\n"
    assert new in (folder / "tree.txt").read_text()
    assert new in os.readlink(folder / "current")
    # conversation.md grew at its end only; current.md is the new branch, ending with it
    after = (folder / "conversation.md").read_bytes()
    assert after.startswith(before) and after.endswith(b"appended by pi\n\n")
    assert f" · {new} · ".encode() in after[len(before) :]
    assert (folder / "current.md").read_bytes().endswith(b"appended by pi\n\n")
    tree.seek(0)
    assert tree.read(100) == first  # the open reader keeps its version
    tree.close()


def test_many_appends_in_a_row_all_show(mount: Mount) -> None:
    folder = mount.path / RECIPE
    current_id(folder)
    ids = pi("--append", str(real_of(folder)), PARENT, "burst", "25")
    wait_for(lambda: current_id(folder) == ids[-1], 5, "the last of 25 entries")
    listed = [
        os.getxattr(p, "user.pi.id").decode() for p in sorted((folder / "current").glob("*.md"))
    ]
    assert listed[-25:] == ids


def test_unentered_session_is_read_when_entered(mount: Mount) -> None:
    folder = mount.path / RECIPE
    (new,) = pi("--append", str(real_of(folder)), PARENT, "before anyone looked")
    wait_for(lambda: current_id(folder) == new, 5, "the entry")


def test_a_line_that_takes_an_earlier_id_shows_as_a_fresh_mount_shows_it(
    mount: Mount, sessions: Path
) -> None:
    """A later line with an earlier entry's id wins it (as in Pi): what the kernel cached of
    that entry's files, of conversation.md and of the branch views is not served stale."""
    folder = mount.path / RECIPE
    f = real_of(folder)
    taken = next(d for d in map(json.loads, f.read_bytes().splitlines()) if _role(d) == "user")
    shown = ["conversation.md", "current.md", "tree.txt"]
    for name in shown:
        (folder / name).read_bytes()  # in the kernel's page cache now
    before = {p.name: p.read_bytes() for p in (folder / "current").iterdir()}
    again = {**taken, "message": {**taken["message"], "content": "taken over"}}
    with f.open("ab") as out:
        out.write(json.dumps(again).encode() + b"\n")
    wait_for(lambda: current_id(folder) == taken["id"], 5, "the line that took the id")
    after = {p.name: p.read_bytes() for p in (folder / "current").iterdir()}
    assert after != before and b"taken over\n" in after.values()
    with mounted(sessions) as fresh:
        other = fresh.path / RECIPE
        assert {p.name: p.read_bytes() for p in (other / "current").iterdir()} == after
        for name in shown:
            assert (folder / name).read_bytes() == (other / name).read_bytes(), name
    # the earlier line's place shows the winner's text, as its entry folder does, and so
    # does the new line's
    assert (folder / "conversation.md").read_bytes().count(b"taken over\n") == 2


def _role(d: object) -> object:
    msg = d.get("message") if isinstance(d, dict) else None
    return msg.get("role") if isinstance(msg, dict) else None


def test_new_and_removed_session_files_and_projects(mount: Mount, sessions: Path) -> None:
    project = mount.path / "home-ana-src-recipe-box"
    src = next((sessions / "--home-ana-src-recipe-box--").glob("*.jsonl"))
    before = set(os.listdir(project))
    shutil.copyfile(src, src.with_name("copy.jsonl"))
    wait_for(lambda: len(set(os.listdir(project)) - before) == 1, 5, "a new session folder")
    (new,) = set(os.listdir(project)) - before
    assert new.endswith("~2")  # a copy: the same header and text, so the same name, made unique
    assert sorted(before) == sorted(set(os.listdir(project)) - {new})  # the others keep theirs
    assert os.readlink(project / "copy") == new  # the stem leads to it
    inside = open(project / "copy" / "current" / "0002-user.md", "rb")  # noqa: SIM115
    src.with_name("copy.jsonl").unlink()
    wait_for(lambda: new not in os.listdir(project), 5, "the removed session to vanish")
    wait_for(lambda: not (project / "copy").exists(), 5, "the removed session's path to fail")
    assert inside.read().startswith(b"pytest fails")  # an open reader keeps reading
    inside.close()
    (sessions / "--new-project--").mkdir()
    shutil.copyfile(src, sessions / "--new-project--" / "s.jsonl")
    wait_for((mount.path / "new-project" / "s" / "current").exists, 5, "a project")


def v1_session() -> bytes:
    out = damaged.line(
        {
            "type": "session",
            "id": "v1-live",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/work",
        }
    )
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        content: object = (
            f"v1 message {i}" if role == "user" else [{"type": "text", "text": f"v1 answer {i}"}]
        )
        out += damaged.line(
            {
                "type": "message",
                "timestamp": f"2026-01-01T00:00:0{i + 1}.000Z",
                "message": {"role": role, "content": content, "timestamp": 1767225601000 + i},
            }
        )
    return out


def test_a_file_pi_migrates_in_place_is_read_again_whole(mount: Mount, sessions: Path) -> None:
    (sessions / "--old--").mkdir()
    f = sessions / "--old--" / "v1.jsonl"
    f.write_bytes(v1_session())
    folder = mount.path / "old" / "v1"
    wait_for((folder / "current").exists, 5, "the v1 session")
    assert current_id(folder) == "L5"
    oracle = pi(str(f))  # Pi opens it: migrates it to v3 in place (truncate and rewrite)
    assert json.loads(f.read_bytes().splitlines()[0])["version"] == 3
    wait_for(lambda: current_id(folder) == oracle["leafId"], 5, "the migrated ids")
    doc = json.loads((folder / "session.json").read_text())
    assert doc["version"] == 3
    assert (folder / "current" / "0003-user.md").read_text() == "v1 message 2\n"


@pytest.mark.parametrize("split", [10, 60])
def test_a_torn_tail_completed_later_shows_its_entry_once(
    mount: Mount, sessions: Path, split: int
) -> None:
    f = next((sessions / "--home-ana-src-recipe-box--").glob("2026-03-02T09-14*.jsonl"))
    folder = mount.path / RECIPE
    current_id(folder)
    line = damaged.line(damaged.user("abcdef12", PARENT, "torn then whole", 3000))
    with f.open("ab") as out:
        out.write(line[:split])
        out.flush()
        wait_for(lambda: "torn-tail" in (folder / "session.json").read_text(), 5, "the torn tail")
        out.write(line[split:])
    wait_for(lambda: current_id(folder) == "abcdef12", 5, "the completed entry")
    rows = [
        r for r in (folder / "tree.txt").read_text().splitlines() if r.split()[1:2] == ["abcdef12"]
    ]
    assert len(rows) == 1, rows
    assert "torn-tail" not in (folder / "session.json").read_text()


def test_an_open_session_jsonl_grows_like_tail_f(mount: Mount) -> None:
    folder = mount.path / RECIPE
    current_id(folder)
    with open(folder / "session.jsonl", "rb") as f:
        f.seek(0, os.SEEK_END)
        (new,) = pi("--append", str(real_of(folder)), PARENT, "seen by tail -f")
        wait_for(lambda: current_id(folder) == new, 5, "the entry")
        grown = f.read()
    assert b"seen by tail -f" in grown and grown.endswith(b"\n")
