"""Session actions on a real mount: name, label and trash sessions from the shell.

Driven by ``setfattr``, ``getfattr``, ``rm -r``, ``rmdir`` (apt ``attr``, coreutils) and Debian's
``trash-cli`` (``trash-list``, ``trash-restore``), each result checked with the real Pi
``SessionManager`` (its ``getSessionName``, ``getLabel``, its session picker's list) and
with the file's bytes: one new line per action, or the file byte-identical in the trash with
a valid ``.trashinfo``. Needs /dev/fuse and fusermount3; node with the pinned Pi package for
the Pi checks; root for the tests on another file system, a bind mount and a second user.
Skips loudly without them, fails in CI.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pty
import pwd
import re
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import pytest

from pisessfs import writer
from pisessfs.actions import VALUE_CAP, Walks
from pisessfs.model import js_trim
from pisessfs.sessions import Store
from tests import damaged
from tests.conftest import (
    PI_MODULE,
    RECIPE,
    RECIPE_STEM,
    Mount,
    mounted,
    named,
    need,
    pi,
    pi_missing,
    wait_for,
)

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

RECIPE_PROJECT = "--home-ana-src-recipe-box--"
RECIPE_FIRST = "pytest fails on the ingredient parser"
ASSISTANT = "0003-assistant.md"  # "Let me run the parser tests first." (id 3f49fb9d)
ASSISTANT_ID = "3f49fb9d"
LAST_ID = "74cc97d5"  # the recipe's last line and resume leaf: an assistant message


def node(script: str, *args: str) -> Any:
    """Run an ES module against the real Pi ``SessionManager``; its JSON output."""
    need(pi_missing() is None, pi_missing() or "")
    prog = f"import {{ SessionManager }} from {json.dumps(str(PI_MODULE))};\n{script}"
    out = subprocess.run(
        ["node", "--input-type=module", "-e", prog, "--", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def picker(folder: Path) -> dict[str, str | None]:
    """What Pi's session picker (``/resume``) lists in a project folder: path -> name."""
    script = """
const list = await SessionManager.listAll(process.argv[1]);
console.log(JSON.stringify(Object.fromEntries(list.map((s) => [s.path, s.name ?? null]))));
"""
    out: dict[str, str | None] = node(script, str(folder))
    return out


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def errno_of(fn: Any) -> int:
    with pytest.raises(OSError) as exc:
        fn()
    return int(exc.value.errno or 0)


def refusals(m: Mount) -> int:
    return sum("refused" in ln for ln in m.log_text().splitlines())


def one_more_refusal(m: Mount, said: int, what: str) -> None:
    """Wait for exactly one more refusal line in the log than ``said``."""
    wait_for(lambda: refusals(m) >= said + 1, what=f"the log line of {what}")
    assert refusals(m) == said + 1, m.log_text()[-2000:]


@dataclass
class Sess:
    mount: Mount
    folder: Path  # the session folder in the mount
    real: Path  # the real file

    def new(self, before: int) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in lines(self.real)[before:]]


@pytest.fixture
def trash_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own home trash: the daemon and trash-cli find it through XDG_DATA_HOME."""
    data = tmp_path / "xdg"
    data.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    return data / "Trash"


@pytest.fixture
def recipe(sessions: Path, trash_home: Path) -> Iterator[Sess]:
    with mounted(sessions) as m:
        folder = m.path / RECIPE
        yield Sess(m, folder, Path(os.getxattr(folder, "user.pi.file").decode()))
    assert m.proc.returncode == 0, m.log_text()
    assert "Traceback" not in m.log_text(), m.log_text()


def setfattr(*args: str, user: pwd.struct_passwd | None = None) -> subprocess.CompletedProcess[str]:
    need(shutil.which("setfattr") is not None, "setfattr is missing (apt install attr)")
    return run(["setfattr", *args], user)


def run(cmd: list[str], user: pwd.struct_passwd | None = None) -> subprocess.CompletedProcess[str]:
    ids: dict[str, Any] = {}
    if user is not None:
        ids = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    return subprocess.run(cmd, capture_output=True, text=True, **ids)


# -- the lines, as Pi writes them -------------------------------------------------------------


def test_js_trim_is_javascripts_trim() -> None:
    tricky = "\u00a0\ufeff\t x \u2028\u3000\u001c\u0085\u200b"
    got = node("console.log(JSON.stringify(process.argv[1].trim()));", tricky)
    assert js_trim(tricky) == got  # keeps U+001C, U+0085, U+200B, as JavaScript does


def test_the_lines_are_the_ones_pi_writes(tmp_path: Path) -> None:
    """Pi's own appendSessionInfo/appendLabelChange on one copy, ours on another: the same
    keys in the same order, the same values and parents, byte for byte but for id and time."""
    pis, ours = tmp_path / "pi.jsonl", tmp_path / "ours.jsonl"
    shutil.copyfile(next((damaged_root(tmp_path)).rglob("ok.jsonl")), pis)
    shutil.copyfile(pis, ours)
    name = ' \t"Fix" \\ fraction ½ parsing 🎉\u2028\u001b '
    node(
        """
const sm = SessionManager.open(process.argv[1]);
sm.appendSessionInfo(process.argv[2]);
sm.appendLabelChange("bbbbbbbb", "checkpoint");
sm.appendLabelChange("bbbbbbbb", undefined);
sm.appendSessionInfo("");
console.log("null");
""",
        str(pis),
        name,
    )
    store = Store(str(tmp_path))
    fields: list[tuple[str, dict[str, Any]]] = [
        ("session_info", {"name": js_trim(name)}),
        ("label", {"targetId": "bbbbbbbb", "label": "checkpoint"}),
        ("label", {"targetId": "bbbbbbbb"}),
        ("session_info", {"name": ""}),
    ]
    for etype, f in fields:
        writer.write(writer.prepare_entry(store.session(str(ours)).load(), etype, f))
    theirs, mine = lines(pis)[-4:], lines(ours)[-4:]
    parents = ["bbbbbbbb", "bbbbbbbb"]  # Pi's leaf: the file's last entry, then each new one
    for a, b in zip(theirs, mine, strict=True):
        da, db = orjson.loads(a), orjson.loads(b)
        assert list(da) == list(db)  # keys in Pi's order
        assert re.fullmatch(r"[0-9a-f]{8}", db["id"])
        assert (da["parentId"], db["parentId"]) == (parents[-2], parents[-1])
        parents[-2:] = [da["id"], db["id"]]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", db["timestamp"])
        expected = a
        for k in ("id", "parentId", "timestamp"):  # the rest: JSON.stringify's very bytes
            expected = expected.replace(f'"{k}":"{da[k]}"'.encode(), f'"{k}":"{db[k]}"'.encode())
        assert expected == b


def damaged_root(tmp_path: Path) -> Path:
    """A sessions folder with a v3 session, a v1 one (Pi rewrites it: read-only) and one of
    Pi's harness storage (read-only)."""
    root = tmp_path / "dmg"
    (root / "--p--").mkdir(parents=True, exist_ok=True)
    a = damaged.user("aaaaaaaa", None, "first", 1)
    b = damaged.user("bbbbbbbb", "aaaaaaaa", "second", 2)
    ok = damaged.line(damaged.HEADER) + damaged.line(a) + damaged.line(b)
    (root / "--p--" / "ok.jsonl").write_bytes(ok)
    v1 = {k: v for k, v in damaged.HEADER.items() if k != "version"}
    (root / "--p--" / "v1.jsonl").write_bytes(damaged.line(v1) + damaged.line(a))
    harness = {"kind": "header", "version": 4, "id": "h", "createdAt": 1, "cwd": "/w"}
    (root / "--p--" / "v4.jsonl").write_bytes(damaged.line(harness))
    return root


def test_a_walk_is_told_by_the_folders_its_process_holds_open(tmp_path: Path) -> None:
    """The kernel names the thread that asks: another thread of the opener counts as it. What
    a process holds open is read from /proc (the kernel sends the mount no opendir)."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    ino = os.fstat(fd).st_ino
    info = Path(f"/proc/self/fdinfo/{fd}").read_text()
    mount_id = int(next(ln for ln in info.splitlines() if ln.startswith("mnt_id:")).split()[1])
    walks = Walks(mount_id)
    try:
        seen: list[bool] = []
        thread = threading.Thread(
            target=lambda: seen.append(walks.holds(threading.get_native_id(), ino))
        )
        thread.start()
        thread.join()
        assert seen == [True]
        assert not walks.holds(os.getppid(), ino)  # another process
        assert not walks.holds(os.getpid(), ino + 1)  # another folder
        assert not Walks(mount_id + 1).holds(os.getpid(), ino)  # another mount's inode
    finally:
        os.close(fd)
    assert not walks.holds(os.getpid(), ino)  # closed


# -- name --------------------------------------------------------------------------------------


def test_name_set_shown_and_cleared_as_pi_sees_it(recipe: Sess, tmp_path: Path) -> None:
    s = recipe
    before = len(lines(s.real))
    assert pi(str(s.real))["name"] == "Fix fraction parsing"  # its own session_info
    done = setfattr("-n", "user.pi.name", "-v", "  Fraction parsing, for Grandma  ", str(s.folder))
    assert done.returncode == 0, done.stderr
    new = s.new(before)
    assert len(new) == 1 and new[0]["type"] == "session_info"
    assert new[0]["name"] == "Fraction parsing, for Grandma"  # trimmed, as Pi trims
    assert new[0]["parentId"] == pi(str(s.real))["entries"][-2]["id"]  # Pi's leaf
    assert pi(str(s.real))["name"] == "Fraction parsing, for Grandma"
    assert picker(s.real.parent)[str(s.real)] == "Fraction parsing, for Grandma"
    got = run(["getfattr", "--only-values", "-n", "user.pi.name", str(s.folder)])
    assert got.stdout == "Fraction parsing, for Grandma"
    assert b"Fraction parsing, for Grandma" in (s.folder / "tree.txt").read_bytes()
    assert json.loads((s.folder / "session.json").read_bytes())["name"] == (
        "Fraction parsing, for Grandma"
    )
    assert s.folder.exists()  # the folder keeps its name
    # the same name again appends nothing; -x clears it, as Pi writes a clear
    same = setfattr("-n", "user.pi.name", "-v", "Fraction parsing, for Grandma", str(s.folder))
    assert same.returncode == 0 and len(lines(s.real)) == before + 1
    assert setfattr("-x", "user.pi.name", str(s.folder)).returncode == 0
    new = s.new(before + 1)
    assert len(new) == 1 and new[0]["type"] == "session_info" and new[0]["name"] == ""
    assert pi(str(s.real))["name"] is None
    assert picker(s.real.parent)[str(s.real)] is None
    assert errno_of(lambda: os.getxattr(s.folder, "user.pi.name")) == errno.ENODATA
    assert "user.pi.name" not in os.listxattr(s.folder)
    # nothing left to clear: "No such attribute", nothing appended
    assert errno_of(lambda: os.removexattr(s.folder, "user.pi.name")) == errno.ENODATA
    assert len(lines(s.real)) == before + 2


# -- label -------------------------------------------------------------------------------------


def test_labels_on_files_and_entry_folders_as_pi_sees_them(recipe: Sess) -> None:
    s = recipe
    user_file = s.folder / "current" / "0002-user.md"
    user_id = os.getxattr(user_file, "user.pi.id").decode()
    cases = [
        (s.folder / "current" / ASSISTANT, ASSISTANT_ID, "ran the tests"),
        (user_file, user_id, "the question"),
        (s.folder / "nodes" / ASSISTANT_ID, ASSISTANT_ID, "again, by its folder"),
        # current -> leaves/<leaf>, Pi's leaf, the last line: after a label, that label line
        # itself; a folder's label is that of the message its files end with
        (s.folder / "current", LAST_ID, "where it ends"),
        (next((s.folder / "leaves").glob("96ce5b75-*")), "96ce5b75", "the other branch"),
    ]
    for target, eid, label in cases:
        before = len(lines(s.real))
        done = setfattr("-n", "user.pi.label", "-v", f" {label} ", str(target))
        assert done.returncode == 0, done.stderr
        new = s.new(before)
        assert len(new) == 1, new
        assert {k: new[0][k] for k in ("type", "targetId", "label")} == {
            "type": "label",
            "targetId": eid,
            "label": label,
        }
        assert pi(str(s.real))["labels"][eid] == label  # getLabel(id)
        assert os.getxattr(target, "user.pi.label").decode() == label
        assert f"[{label}]".encode() in (s.folder / "tree.txt").read_bytes()
    current = s.folder / "current"  # now the last label line, which ends on the same message
    assert os.getxattr(current, "user.pi.id").decode() == pi(str(s.real))["leafId"] != LAST_ID
    assert os.getxattr(current, "user.pi.label") == b"where it ends"
    before = len(lines(s.real))
    assert setfattr("-x", "user.pi.label", str(s.folder / "current" / ASSISTANT)).returncode == 0
    new = s.new(before)
    assert len(new) == 1 and new[0]["type"] == "label" and "label" not in new[0]
    assert ASSISTANT_ID not in pi(str(s.real))["labels"]
    assert errno_of(lambda: os.getxattr(s.folder / "nodes" / ASSISTANT_ID, "user.pi.label")) == (
        errno.ENODATA
    )
    assert json.loads((s.folder / "session.json").read_bytes())["labels"][user_id] == (
        "the question"
    )


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.warns  # each refusal logs its reason
def test_refusals_answer_their_errno_and_change_nothing(tmp_path: Path, trash_home: Path) -> None:
    root = damaged_root(tmp_path)
    with mounted(root) as m:
        p = m.path / "p"
        ok, v1, v4 = named(p / "ok"), named(p / "v1"), named(p / "v4")
        msg = ok / "current" / "0001-user.md"
        files = {f: f.read_bytes() for f in (root / "--p--").iterdir()}
        cases: list[tuple[Any, int]] = [
            (lambda: os.setxattr(ok, "user.pi.name", b"two\nlines"), errno.EINVAL),
            (lambda: os.setxattr(ok, "user.pi.name", b"carriage\rreturn"), errno.EINVAL),
            (lambda: os.setxattr(msg, "user.pi.label", b"nul\0byte"), errno.EINVAL),
            (lambda: os.setxattr(ok, "user.pi.name", b"x" * (VALUE_CAP + 1)), errno.EINVAL),
            (lambda: os.setxattr(ok, "user.pi.name", b"caf\xe9"), errno.EILSEQ),
            (lambda: os.setxattr(v1, "user.pi.name", b"old"), errno.EROFS),
            (lambda: os.setxattr(v4, "user.pi.name", b"next"), errno.EROFS),
            (
                lambda: os.setxattr(v1 / "current" / "0001-user.md", "user.pi.label", b"x"),
                errno.EROFS,
            ),
            (lambda: os.rmdir(v1), errno.EROFS),
            (lambda: os.rmdir(v4), errno.EROFS),
            (lambda: os.setxattr(msg, "user.pi.name", b"a name on a file"), errno.ENOTSUP),
            (lambda: os.setxattr(ok, "user.pi.label", b"a label on a session"), errno.ENOTSUP),
        ]
        for i, (fn, want) in enumerate(cases):
            said = refusals(m)
            assert errno_of(fn) == want, i
            one_more_refusal(m, said, f"case {i}")
        # unknown names and other namespaces: as before, without a log line
        said = refusals(m)
        acl = struct.pack("<I", 2) + b"".join(  # what vim and sed copy after a save
            struct.pack("<HHI", tag, perm, 0xFFFFFFFF) for tag, perm in ((1, 6), (4, 4), (32, 4))
        )
        for name, value in (("user.pi.id", b"x"), ("user.pi.other", b"x"), ("user.other", b"x"),
                            ("system.posix_acl_access", acl)):  # fmt: skip
            assert errno_of(lambda: os.setxattr(msg, name, value)) == errno.ENOTSUP  # noqa: B023
            assert errno_of(lambda: os.removexattr(msg, name)) == errno.ENOTSUP  # noqa: B023
        assert refusals(m) == said
        # a live Pi writer lock: EBUSY for every action
        lock = root / "--p--" / "ok.jsonl.writer.lock"
        lock.write_text(json.dumps({"pid": os.getpid()}))
        assert errno_of(lambda: os.setxattr(ok, "user.pi.name", b"n")) == errno.EBUSY
        assert errno_of(lambda: os.setxattr(msg, "user.pi.label", b"l")) == errno.EBUSY
        assert errno_of(lambda: os.rmdir(ok)) == errno.EBUSY
        lock.unlink()
        assert {f: f.read_bytes() for f in (root / "--p--").iterdir()} == files
        assert not trash_home.exists() or not any((trash_home / "files").iterdir())
        assert sorted(os.listdir(p)) == sorted([ok.name, v1.name, v4.name])


@pytest.mark.warns
def test_a_read_only_mount_refuses_every_action(sessions: Path, trash_home: Path) -> None:
    real = sessions / RECIPE_PROJECT / (RECIPE_STEM + ".jsonl")
    data = real.read_bytes()
    with mounted(sessions, "-o", "ro") as m:
        folder = m.path / RECIPE
        assert errno_of(lambda: os.setxattr(folder, "user.pi.name", b"n")) == errno.EROFS
        label = folder / "current" / ASSISTANT
        assert errno_of(lambda: os.setxattr(label, "user.pi.label", b"l")) == errno.EROFS
        assert errno_of(lambda: os.removexattr(folder, "user.pi.name")) == errno.EROFS
        assert errno_of(lambda: os.rmdir(folder)) == errno.EROFS
        assert run(["rm", "-r", str(folder)]).returncode != 0
        assert folder.is_dir()
    assert real.read_bytes() == data
    assert not trash_home.exists()


# -- trash -------------------------------------------------------------------------------------


def check_trashinfo(info: Path, original: Path, topdir: Path | None = None) -> None:
    """A valid .trashinfo: the group, Path (URI-escaped, absolute or relative to the topdir of
    a volume trash), and a local DeletionDate of just now."""
    text = info.read_text()
    got = text.splitlines()
    assert got[0] == "[Trash Info]", text
    fields = dict(line.split("=", 1) for line in got[1:])
    path = unquote(fields["Path"])
    assert (topdir / path if topdir is not None else Path(path)) == original
    assert topdir is not None or path.startswith("/")
    stamp = time.mktime(time.strptime(fields["DeletionDate"], "%Y-%m-%dT%H:%M:%S"))
    assert abs(time.time() - stamp) < 120


def restore(original: Path, env_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``trash-restore`` (Debian trash-cli) of the item trashed from ``original``."""
    need(shutil.which("trash-restore") is not None, "trash-restore is missing (apt trash-cli)")
    return subprocess.run(
        ["trash-restore", str(original.parent)],
        input="0\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=original.parent,
    )


def test_rm_r_moves_the_session_to_the_trash_and_restore_brings_it_back(
    recipe: Sess, trash_home: Path
) -> None:
    s = recipe
    data = s.real.read_bytes()
    project = s.real.parent
    assert str(s.real) in picker(project)
    done = run(["rm", "-r", str(s.folder)])
    assert (done.returncode, done.stderr) == (0, "")  # no error, not even one per file
    assert not s.folder.exists() and s.folder.name not in os.listdir(s.folder.parent)
    assert not s.real.exists()
    assert str(s.real) not in picker(project)  # Pi's picker: no such session
    trashed = trash_home / "files" / s.real.name
    assert trashed.read_bytes() == data  # byte-identical
    check_trashinfo(trash_home / "info" / (s.real.name + ".trashinfo"), s.real)
    need(shutil.which("trash-list") is not None, "trash-list is missing (apt trash-cli)")
    assert str(s.real) in run(["trash-list"]).stdout
    back = restore(s.real)
    assert back.returncode == 0, back.stderr
    assert s.real.read_bytes() == data
    wait_for(s.folder.is_dir, what="the restored session on the mount")
    assert (s.folder / "session.jsonl").read_bytes() == data
    assert str(s.real) in picker(project)
    assert pi(str(s.real))["leafId"] == "74cc97d5"
    moved = [ln for ln in s.mount.log_text().splitlines() if "moved to the trash" in ln]
    assert len(moved) == 1, moved


def test_rmdir_moves_the_session_to_the_trash(recipe: Sess, trash_home: Path) -> None:
    s = recipe
    data = s.real.read_bytes()
    os.rmdir(s.folder)  # no walk first: the folder itself, as the shell's rmdir does
    assert not s.folder.exists()
    assert (trash_home / "files" / s.real.name).read_bytes() == data
    check_trashinfo(trash_home / "info" / (s.real.name + ".trashinfo"), s.real)


def test_a_flat_session_in_the_root_goes_too(tmp_path: Path, trash_home: Path) -> None:
    root = damaged_root(tmp_path)
    flat = root / "flat.jsonl"
    shutil.copyfile(root / "--p--" / "ok.jsonl", flat)
    data = flat.read_bytes()
    with mounted(root) as m:
        folder = named(m.path / "flat")
        done = run(["rm", "-r", str(folder)])
        assert (done.returncode, done.stderr) == (0, "")
        assert folder.name not in os.listdir(m.path) and not flat.exists()
    assert (trash_home / "files" / "flat.jsonl").read_bytes() == data
    check_trashinfo(trash_home / "info" / "flat.jsonl.trashinfo", flat)


@pytest.mark.warns  # each refused removal logs its line
def test_a_single_rm_inside_a_session_is_still_refused(recipe: Sess, trash_home: Path) -> None:
    s = recipe
    data = s.real.read_bytes()
    for target in (s.folder / "current" / ASSISTANT, s.folder / "tree.txt"):
        said = refusals(s.mount)
        done = run(["rm", "-f", str(target)])
        assert done.returncode == 1 and "Operation not permitted" in done.stderr
        one_more_refusal(s.mount, said, str(target))
    link = next((s.folder / "leaves").iterdir())
    assert errno_of(lambda: os.unlink(link)) == errno.EPERM  # a branch's link stays
    leaf = s.folder / "leaves" / os.readlink(link)  # ../nodes/<id>: the folder itself
    assert errno_of(lambda: os.rmdir(leaf)) == errno.EPERM
    # rm -r of a branch folder is no removal of the session: every file is refused
    done = run(["rm", "-r", str(leaf)])
    assert done.returncode == 1 and done.stderr.count("Operation not permitted") > 1
    assert s.real.read_bytes() == data and leaf.is_dir() and link.is_symlink()
    assert not (trash_home / "files").exists()


def rm_at_a_terminal(
    args: list[str], answer: Any, user: pwd.struct_passwd | None = None
) -> tuple[int, list[str], str]:
    """``rm`` on a terminal (a pty), each of its questions answered by ``answer(question)``:
    its exit status, its questions and what else it said."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover (the child)
        if user is not None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        os.execvp("rm", ["rm", *args])
    out, asked, said = b"", [], b""
    while select.select([fd], [], [], 10)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child is gone
            break
        out += chunk
        said += chunk
        if out.rstrip().endswith(b"?"):
            question = out.strip().splitlines()[-1].decode()
            asked.append(question)
            os.write(fd, b"y\n" if answer(question) else b"n\n")
            out = b""
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = said.decode(errors="replace").replace("\r", "")
    other = [ln for ln in text.splitlines() if ln.strip() and not re.search(r"\? [yn]$", ln)]
    return os.waitstatus_to_exitcode(status), asked, "\n".join(other)


def test_rm_ri_told_no_keeps_the_session(recipe: Sess, trash_home: Path) -> None:
    """``rm -ri`` told "n" for one file still tries the folders above it, as on any file
    system, and gets what any file system answers ("Directory not empty", said once): the
    session stays whole. Told yes to everything, it goes."""
    s = recipe
    data = s.real.read_bytes()
    keep = f"{s.folder}/leaves/74cc97d5"  # a branch's link: rm asks about the link itself
    status, asked, said = rm_at_a_terminal(
        ["-ri", str(s.folder)], lambda q: not (keep in q and "symbolic link" in q)
    )
    assert any(keep in q and "symbolic link" in q for q in asked), asked
    leaves = s.folder / "leaves"
    assert (status, said) == (1, f"rm: cannot remove '{leaves}': Directory not empty")
    assert s.real.read_bytes() == data and s.folder.is_dir()
    assert not (trash_home / "files").exists()
    assert (s.folder / "current" / ASSISTANT).read_text().startswith("model:")
    # told yes to everything, it goes
    status, asked, said = rm_at_a_terminal(["-ri", str(s.folder)], lambda q: True)
    assert (status, said) == (0, "") and not s.folder.exists()
    assert (trash_home / "files" / s.real.name).read_bytes() == data


@pytest.mark.warns  # the refusal logs its line
def test_rm_r_with_a_write_handle_open_is_ebusy_and_leaves_it_whole(
    recipe: Sess, trash_home: Path
) -> None:
    s = recipe
    data = s.real.read_bytes()
    ls_before = set(run(["ls", "-R", str(s.folder)]).stdout.splitlines())
    # a process of its own holds the file open, written, never closed nor copied (a close
    # of any copy saves: a fork of this process, a shell's redirection)
    new = s.folder / "current" / "next.md"
    script = (
        "import os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "os.write(fd, b'not yet saved')\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(new)])
    try:
        wait_for(lambda: new.exists() and new.stat().st_size > 0, what="the open file")
        done = run(["rm", "-r", str(s.folder)])
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"rm: cannot remove '{s.folder}': Device or resource busy"
        ]
        assert errno_of(lambda: os.rmdir(s.folder)) == errno.EBUSY
        # everything the walk "removed" is there, readable, as the kernel sees it again
        assert s.real.read_bytes() == data
        shown = set(run(["ls", "-R", str(s.folder)]).stdout.splitlines())
        assert shown == ls_before  # ls -R does not follow current/ (where next.md is)
        assert "next.md" in os.listdir(s.folder / "current")
        assert (s.folder / "current" / "0002-user.md").read_text().startswith(RECIPE_FIRST)
        assert not (trash_home / "files").exists()
    finally:
        holder.kill()
        holder.wait()
    # closed: the message is saved, and then the session can go
    wait_for(lambda: b'"text":"not yet saved"' in lines(s.real)[-1], what="the save at close")
    data = s.real.read_bytes()
    done = run(["rm", "-r", str(s.folder)])
    assert (done.returncode, done.stderr) == (0, "")
    assert (trash_home / "files" / s.real.name).read_bytes() == data


@pytest.mark.warns  # the project folder itself stays, with one refusal
def test_rm_r_of_a_project_trashes_each_session(sessions: Path, trash_home: Path) -> None:
    with mounted(sessions) as m:
        project = m.path / RECIPE.split("/")[0]
        real = sessions / RECIPE_PROJECT
        datas = {f.name: f.read_bytes() for f in real.iterdir()}
        done = run(["rm", "-r", str(project)])
        assert done.stderr.splitlines() == [
            f"rm: cannot remove '{project}': Operation not permitted"
        ]
        assert os.listdir(project) == [] and os.listdir(real) == []
        assert {f.name: f.read_bytes() for f in (trash_home / "files").iterdir()} == datas


def test_a_session_on_another_file_system_goes_to_its_topdir_trash(
    sessions: Path, trash_home: Path
) -> None:
    """The sessions on a tmpfs (/dev/shm), the home trash on the disk: the spec's
    ``$topdir/.Trash-$uid`` of the tmpfs, a rename there, a relative Path."""
    shm = Path("/dev/shm")
    need(shm.is_dir() and os.stat(shm).st_dev != os.stat(trash_home.parent).st_dev,
         "/dev/shm is no file system of its own here")  # fmt: skip
    root = shm / f"pisessfs-test-{uuid.uuid4().hex[:8]}"
    shutil.copytree(sessions / RECIPE_PROJECT, root / RECIPE_PROJECT)
    volume = shm / f".Trash-{os.getuid()}"
    made = not volume.exists()
    try:
        with mounted(root) as m:
            folder = m.path / RECIPE
            real = Path(os.getxattr(folder, "user.pi.file").decode())
            data = real.read_bytes()
            assert run(["rm", "-r", str(folder)]).returncode == 0
            assert not folder.exists() and not real.exists()
            assert (volume / "files" / real.name).read_bytes() == data
            check_trashinfo(volume / "info" / (real.name + ".trashinfo"), real, shm)
            assert not (trash_home / "files").exists()
            back = restore(real)
            assert back.returncode == 0, back.stderr
            assert real.read_bytes() == data
            wait_for(folder.is_dir, what="the restored session")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for leftover in volume.glob(f"*/{RECIPE_STEM}*"):
            leftover.unlink()
        if made:  # the trash folder this test made, if nothing else is in it
            for sub in (volume / "files", volume / "info", volume):
                with contextlib.suppress(OSError):
                    sub.rmdir()


@pytest.mark.warns  # the refusal logs its line
def test_a_move_that_would_need_a_copy_is_refused(sessions: Path, tmp_path: Path,
                                                  trash_home: Path) -> None:  # fmt: skip
    """A bind mount: same device as the home trash, but rename() across mounts is EXDEV.
    Send2Trash would then copy and delete; pisessfs refuses instead: the file stays put,
    and no stray .trashinfo is left."""
    need(os.getuid() == 0, "a bind mount needs root")
    bound = tmp_path / "bound"
    bound.mkdir()
    made = subprocess.run(["mount", "--bind", str(sessions), str(bound)], capture_output=True)
    need(made.returncode == 0, f"mount --bind failed: {made.stderr.decode().strip()}")
    try:
        with mounted(bound) as m:
            folder = m.path / RECIPE
            real = sessions / RECIPE_PROJECT / (RECIPE_STEM + ".jsonl")
            data = real.read_bytes()
            assert errno_of(lambda: os.rmdir(folder)) == errno.EXDEV
            assert real.read_bytes() == data and folder.is_dir()
            assert list((trash_home / "info").iterdir()) == []
            assert list((trash_home / "files").iterdir()) == []
            assert "not copied" in m.log_text()
    finally:
        subprocess.run(["umount", str(bound)], capture_output=True)


# -- another user ------------------------------------------------------------------------------

TRASHER = "pisessfs-trasher"


@contextlib.contextmanager
def second_user(base: Path) -> Iterator[pwd.struct_passwd]:
    """A local user with a home of its own under ``base`` (made if missing)."""
    need(os.getuid() == 0, "a second local user needs root")
    try:
        who = pwd.getpwnam(TRASHER)
    except KeyError:
        need(shutil.which("useradd") is not None, "useradd is not installed")
        made = subprocess.run(
            ["useradd", "-M", "-r", "-s", "/bin/sh", TRASHER], capture_output=True
        )
        need(made.returncode == 0, f"useradd failed: {made.stderr.decode().strip()}")
        who = pwd.getpwnam(TRASHER)
    home = base / "home"
    home.mkdir()
    os.chown(home, who.pw_uid, who.pw_gid)
    subprocess.run(["usermod", "-d", str(home), TRASHER], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(TRASHER)
    finally:
        subprocess.run(["usermod", "-d", "/nonexistent", TRASHER], capture_output=True)


def test_another_user_names_labels_and_trashes_into_their_own_trash(
    sessions: Path, trash_home: Path
) -> None:
    """Root's mount with --allow-other, the session file and its project folder owned by a
    user: that user (not root) names, labels and trashes it, into their own home trash,
    as themselves; root's trash gets nothing."""
    base = Path("/var/tmp") / f"pisessfs-actions-{os.getpid()}"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    try:
        with second_user(base) as who:
            root = base / "sessions"
            shutil.copytree(sessions / RECIPE_PROJECT, root / RECIPE_PROJECT)
            os.chmod(root, 0o755)
            for p in [root / RECIPE_PROJECT, *(root / RECIPE_PROJECT).iterdir()]:
                os.chown(p, who.pw_uid, who.pw_gid)
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
            with mounted(root, "--allow-other", base=base) as m:
                folder = m.path / RECIPE
                real = Path(os.getxattr(folder, "user.pi.file").decode())
                done = setfattr("-n", "user.pi.name", "-v", "mine", str(folder), user=who)
                assert done.returncode == 0, done.stderr
                node_dir = str(folder / "nodes" / ASSISTANT_ID)
                done = setfattr("-n", "user.pi.label", "-v", "here", node_dir, user=who)
                assert done.returncode == 0, done.stderr
                assert pi(str(real))["name"] == "mine"
                assert pi(str(real))["labels"][ASSISTANT_ID] == "here"
                data = real.read_bytes()
                # at a terminal, rm -r asks before each read-only file: "n" keeps it all,
                # with what rm says anywhere then (for each folder of a file it kept)
                status, asked, said = rm_at_a_terminal(
                    ["-r", str(folder)], lambda q: False, user=who
                )
                assert asked and all("write-protected regular file" in q for q in asked)
                assert status == 1 and said, said
                assert all(ln.endswith("Directory not empty") for ln in said.splitlines())
                assert real.read_bytes() == data and folder.is_dir()
                done = run(["rm", "-r", str(folder)], user=who)  # no terminal: no questions
                assert (done.returncode, done.stderr) == (0, "")
                trash = Path(who.pw_dir) / ".local" / "share" / "Trash"
                moved = trash / "files" / real.name
                assert moved.read_bytes() == data
                info = trash / "info" / (real.name + ".trashinfo")
                check_trashinfo(info, real)
                for p in (trash, moved, info):
                    assert os.stat(p).st_uid == who.pw_uid, p
                assert not trash_home.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
