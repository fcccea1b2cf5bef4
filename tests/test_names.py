"""Sessions named for people (DESIGN.md, "Session names"), on real mounts.

``<UTC time of the header, to the minute>-<slug of the session's name, else of its first user
message>-<id8>``: stable across remounts, the stem and the session id resolve as links to it,
one ``latest`` at the root (a glob over sessions meets each once),
``user.pi.cwd`` on projects, ``parent`` to the session a fork came from. Hostile heads still
give sane, unique names that stay inside their folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from tests import damaged
from tests.conftest import FORK, RECIPE, RECIPE_ID, RECIPE_STEM, mounted, wait_for

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)

RECIPE_PROJECT = RECIPE.split("/")[0]


def test_sessions_are_named_for_people_and_keep_their_names(sessions: Path) -> None:
    with mounted(sessions) as m:
        first = sorted(os.listdir(m.path / RECIPE_PROJECT))
        assert RECIPE.split("/")[1] in first
        project = m.path / RECIPE_PROJECT
        # the stem and the session id are links to the name, never listed
        assert os.readlink(project / RECIPE_STEM) == RECIPE.split("/")[1]
        assert os.readlink(project / RECIPE_ID) == RECIPE.split("/")[1]
        assert RECIPE_STEM not in first and RECIPE_ID not in first
        assert (project / RECIPE_STEM / "current").is_symlink()  # paths through it work
        assert os.getxattr(project, "user.pi.cwd") == b"/home/ana/src/recipe-box"
        # latest, at the root: the session whose file changed last, of the whole mount
        assert "latest" not in first and "latest" in os.listdir(m.path)
        newest = max(f.stat().st_mtime_ns for f in sessions.glob("*/*.jsonl"))
        shown = Path(os.getxattr(m.path / "latest", "user.pi.file").decode())
        assert shown.stat().st_mtime_ns == newest and (m.path / "latest").resolve().is_dir()
        real = Path(os.getxattr(m.path / RECIPE, "user.pi.file").decode())
        os.utime(real)  # now this one changed last (the live view follows: inotify)
        wait_for(lambda: os.readlink(m.path / "latest") == RECIPE, 5, "latest to follow")
        # a fork links to the session it came from (found in this root, though Pi wrote
        # the path of the folder the examples were made in)
        assert os.readlink(m.path / FORK / "parent") == "../" + RECIPE.split("/")[1]
        assert "parent" not in os.listdir(m.path / RECIPE)
        all_names = sorted(str(p.relative_to(m.path)) for p in m.path.glob("*/*"))
    with mounted(sessions) as m:  # the same names on the next mount
        assert sorted(os.listdir(m.path / RECIPE_PROJECT)) == first
        assert sorted(str(p.relative_to(m.path)) for p in m.path.glob("*/*")) == all_names


def test_hostile_heads_give_sane_unique_names(sessions: Path) -> None:
    project = sessions / "--hostile--"
    project.mkdir()
    stamp = "2026-11-20T10:00:00.000Z"

    def session(name: str, sid: object, first: object | None, stamp: object = stamp) -> None:
        header = {**damaged.HEADER, "id": sid, "timestamp": stamp}
        lines = [damaged.line(header)]
        if first is not None:
            entry = damaged.user("aaaaaaaa", None, "x")
            entry["message"]["content"] = first  # type: ignore[index]
            lines.append(damaged.line(entry))
        (project / f"{name}.jsonl").write_bytes(b"".join(lines))

    session("none", "11111111-x", None)  # no user message yet: no slug
    session("huge", "22222222-x", "word " * 200_000)
    session("control", "33333333-x", "\x00\x1b[31mred\x07 alert\r\nnext")
    session("dots", "..", "up")
    session("slash", "a/b/../../c", "slash")
    session("md", "x.md", "dot md")
    session("same1", "44444444-same", "twin")
    session("same2", "44444444-same", "twin")  # a copied file: the same id and text
    session("badtime", "55555555-x", "late", "not a time")
    session("bigyear", "66666666-x", "far", 253402300800000 * 100)
    with mounted(sessions) as m:
        names = os.listdir(m.path / "hostile")
        assert len(names) == len(set(names)) == 10  # ten sessions
        for name in names:
            assert "/" not in name and not name.startswith((".", "-")), name
            assert len(name.encode()) <= 255, name
            assert all(ch.isprintable() for ch in name), name
            folder = m.path / "hostile" / name
            assert folder.resolve().parent == (m.path / "hostile").resolve(), name
        assert "2026-11-20T1000-11111111" in names
        assert "2026-11-20T1000-22222222" in names  # a 1 MB first message: past the head read
        assert any("-alert-next-33333333" in n for n in names)  # control characters dropped
        assert {"badtime", "bigyear"} <= set(names)  # no usable time: the file's own name
        twins = sorted(n for n in names if "twin" in n)
        assert twins == ["2026-11-20T1000-twin-44444444", "2026-11-20T1000-twin-44444444~2"]
        for n in names:  # every listed name resolves, session.json says which file
            doc = orjson.loads((m.path / "hostile" / n / "session.json").read_bytes())
            assert doc["counts"]["entries"] >= 0
        # an alias that would lead out of the folder or collide is not made
        assert not os.path.lexists(m.path / "hostile" / "..x")


def test_a_name_never_shows_the_text_of_a_file_others_may_not_read() -> None:
    """Everyone who may list a project sees its folder names: a session file they may not
    read is named without the slug of its first message, and a chmod renames it."""
    base = Path("/var/tmp") / f"pisessfs-names-{os.getpid()}"  # reachable by every user
    shutil.rmtree(base, ignore_errors=True)
    sessions = base / "sessions"
    project = sessions / "--private--"
    project.mkdir(parents=True)
    for d in (base, sessions):
        os.chmod(d, 0o755)
    f = project / "s.jsonl"
    header = {**damaged.HEADER, "id": "77777777-x", "timestamp": "2026-11-20T10:00:00.000Z"}
    f.write_bytes(damaged.line(header) + damaged.line(damaged.user("a", None, "secret plan")))
    os.chmod(f, 0o600)
    os.chmod(project, 0o755)
    with mounted(sessions) as m:
        folder = m.path / "private"
        assert sorted(os.listdir(folder)) == ["2026-11-20T1000-77777777"]
        os.chmod(f, 0o644)  # now anyone may read it: the name may say what it is about
        wait_for(
            lambda: "2026-11-20T1000-secret-plan-77777777" in os.listdir(folder), 5, "the rename"
        )
        assert os.readlink(folder / "s") == "2026-11-20T1000-secret-plan-77777777"
    shutil.rmtree(base, ignore_errors=True)


def test_naming_never_parses_a_line_nested_thousands_deep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project of 1,000 fuzzed files took 6.5 s to name (getfattr waited on it): lines
    nested past Python's recursion limit went to the slow parser that Pi's JSON.parse needs
    only for the session itself. A name needs the header and the first user message."""
    from pisessfs import jsonl
    from pisessfs.sessions import Store

    folder = tmp_path / "--p--"
    folder.mkdir()
    deep = b'{"type":"custom","data":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    for i in range(3):
        body = damaged.line(damaged.HEADER) + deep + damaged.line(damaged.user("u1", None, "hi"))
        (folder / f"s{i}.jsonl").write_bytes(body)

    def slow(text: str) -> object:
        raise AssertionError("the slow parser ran while naming")

    monkeypatch.setattr(jsonl, "_parse_deep", slow)
    store = Store(str(tmp_path))
    store.read_heads(store.unlisted(str(folder))[1])
    names = [i.name for i in store.sessions_in(str(folder))]
    assert len(names) == 3 and all("-hi-" in n for n in names), names
