"""The commands people run every day after a save agree with ``cat``, and a refused save
fails where the program that saved can see it (issue "Everyday commands see what cat sees").

Each test drives a real mount with the real program (``stat``, ``tail``, ``cat``, a shell's
``printf >``, ``mv``, ``truncate``, ``chmod``) and was written to fail before its fix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pisessfs.names import id_name
from tests.conftest import (
    FORK,
    KANBAN,
    RECIPE,
    Mount,
    fuse_missing,
    is_mounted,
    mount_base,
    mounted,
    need,
    pi,
    pisessfs,
    wait_for,
)

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

WHOLE = ("tree.txt", "session.json", "conversation.md", "current.md")
SESSIONS = (RECIPE, FORK, KANBAN)


def real_of(folder: Path) -> Path:
    return Path(os.getxattr(folder, "user.pi.file").decode())


def sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True)


def stat_size(path: Path) -> int:
    return int(
        subprocess.run(
            ["stat", "-L", "-c", "%s", str(path)], capture_output=True, text=True, check=True
        ).stdout
    )


def cat_bytes(path: Path) -> bytes:
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def pi_line(eid: str, parent: str | None, text: str) -> bytes:
    """A user message line as Pi writes it."""
    d = {
        "type": "message",
        "id": eid,
        "parentId": parent,
        "timestamp": "2026-12-05T07:00:00.000Z",
        "message": {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "timestamp": 1796454000000,
        },
    }
    return json.dumps(d).encode() + b"\n"


def last_id(real: Path) -> str:
    return str(json.loads(real.read_bytes().splitlines()[-1])["id"])


# -- 1. stat after a save ---------------------------------------------------------------------


@pytest.mark.parametrize("session", SESSIONS)
def test_stat_after_a_save_is_the_size_cat_reads(mount: Mount, session: str) -> None:
    """``stat`` right after a save (the kernel had each size cached) says what ``cat`` reads,
    and ``tail -n 1 tree.txt`` is the new entry's whole line."""
    folder = mount.path / session
    for name in WHOLE:
        stat_size(folder / name)  # the kernel keeps these sizes
    assert sh("echo 'a saved line' > current/r1.md", folder).returncode == 0
    for name in WHOLE:
        assert stat_size(folder / name) == len(cat_bytes(folder / name)), name
    last = sh("tail -n 1 tree.txt", folder).stdout
    assert "user: a saved line" in last and last.endswith("← resume\n")


# -- 2. tail -f -------------------------------------------------------------------------------


@contextlib.contextmanager
def follow(path: Path) -> Iterator[list[bytes]]:
    """``tail -f path`` in a subprocess: the list its output lines come into."""
    proc = subprocess.Popen(["tail", "-f", "-s", "0.1", str(path)], stdout=subprocess.PIPE)
    got: list[bytes] = []
    out = proc.stdout
    assert out is not None
    reader = threading.Thread(target=lambda: got.extend(iter(out.readline, b"")))
    reader.start()
    try:
        yield got
    finally:
        proc.kill()
        proc.wait()
        reader.join(10)
        out.close()


def tail_sees_an_append(folder: Path) -> None:
    real = real_of(folder)
    with follow(folder / "conversation.md") as got:
        wait_for(lambda: bool(got), 10, "tail's first lines")
        with real.open("ab") as f:
            f.write(pi_line("7a11f001", last_id(real), "followed by tail"))
        wait_for(lambda: b"followed by tail\n" in got, 10, "the appended message in tail -f")


def test_tail_f_of_an_unread_conversation_shows_what_pi_appends(mount: Mount) -> None:
    tail_sees_an_append(mount.path / KANBAN)


def test_tail_f_of_a_conversation_from_the_disk_cache_shows_what_pi_appends(
    sessions: Path, tmp_path: Path
) -> None:
    """A later mount answers conversation.md from the disk cache: a reader holding it open
    still follows the session."""
    cache = tmp_path / "cache"
    with mounted(sessions, "--disk-cache", str(cache)) as m:
        cat_bytes(m.path / KANBAN / "conversation.md")
    with mounted(sessions, "--disk-cache", str(cache), "--debug") as m:
        tail_sees_an_append(m.path / KANBAN)
        assert "conv of" in m.log_text() and "read from the disk cache" in m.log_text()


# -- 3. a reader of a growing session -----------------------------------------------------------


def test_cat_of_a_growing_session_never_fails(sessions: Path, tmp_path: Path) -> None:
    """A line appended every 20 ms while ``cat`` reads tree.txt and session.json in a loop:
    each ``cat`` reads a whole file, the one it opened or a newer one, never ESTALE. (A
    session rendered in a thread: the race needs a render that takes a while.)"""
    real = sessions / "--big--" / "big.jsonl"
    real.parent.mkdir()
    lines = [
        json.dumps(
            {
                "type": "session",
                "version": 3,
                "id": "b1",
                "cwd": "/b",
                "timestamp": "2026-03-05T08:47:12.004Z",
            }
        ).encode()
        + b"\n"
    ]
    parent: str | None = None
    for i in range(3000):
        lines.append(pi_line(f"{i:08x}", parent, f"message {i} " + "lorem ipsum " * 90))
        parent = f"{i:08x}"
    real.write_bytes(b"".join(lines))
    stop = threading.Event()

    def grow() -> None:
        i, parent = 0, last_id(real)
        while not stop.is_set():
            with real.open("ab") as f:
                f.write(pi_line(f"g{i:07x}", parent, f"grow {i}"))
            parent, i = f"g{i:07x}", i + 1
            time.sleep(0.02)

    with mounted(sessions) as m:
        folder = m.path / "big" / "big"
        grower = threading.Thread(target=grow)
        grower.start()
        failed: list[str] = []
        try:
            end = time.monotonic() + 8
            while time.monotonic() < end:
                for name in ("tree.txt", "session.json"):
                    r = subprocess.run(["cat", str(folder / name)], capture_output=True)
                    if r.returncode:
                        failed.append(r.stderr.decode())
                    elif name == "session.json":
                        json.loads(r.stdout)  # whole: a cut file does not parse
        finally:
            stop.set()
            grower.join()
        assert failed == []
        assert "answered ESTALE" not in m.log_text()


# -- 4. a draft renamed -----------------------------------------------------------------------


def test_a_draft_renamed_is_saved_once(mount: Mount) -> None:
    folder = mount.path / RECIPE
    real = real_of(folder)
    before = len(real.read_bytes().splitlines())
    r = sh(
        'echo "Please also handle 2 ¾." > current/draft.md; mv current/draft.md current/final.md',
        folder,
    )
    assert r.returncode == 0, r.stderr
    new = real.read_bytes().splitlines()[before:]
    assert len(new) == 1
    assert json.loads(new[0])["message"]["content"][0]["text"] == "Please also handle 2 ¾."
    assert (folder / "current" / "final.md").read_text() == "Please also handle 2 ¾.\n"
    assert not (folder / "current" / "draft.md").exists()


# -- 5. refusals where the program sees them -----------------------------------------------


def test_bytes_that_are_not_utf8_fail_the_shells_write(mount: Mount) -> None:
    folder = mount.path / RECIPE
    real = real_of(folder)
    before = real.read_bytes()
    r = sh(r"printf 'caf\xe9\n' > current/x.md", folder)
    assert r.returncode != 0 and "write error" in r.stderr
    assert not (folder / "current" / "x.md").exists()  # not listed as if it were saved
    fd = os.open(folder / "current" / "y.md", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as err:
            os.write(fd, b"abc\xff")
        assert err.value.errno == errno.EILSEQ
        with pytest.raises(OSError):  # and every write after it: nothing of it is saved
            os.write(fd, b"more\n")
    finally:
        os.close(fd)
    assert real.read_bytes() == before
    assert "write refused (not-utf8)" in mount.log_text()


def test_a_character_split_across_two_writes_is_saved(mount: Mount) -> None:
    folder = mount.path / RECIPE
    real = real_of(folder)
    before = len(real.read_bytes().splitlines())
    e = "é".encode()
    fd = os.open(folder / "current" / "split.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"caf" + e[:1])
    os.write(fd, e[1:] + b" ok\n")
    os.close(fd)
    (line,) = real.read_bytes().splitlines()[before:]
    assert json.loads(line)["message"]["content"][0]["text"] == "café ok"


def test_bytes_past_the_cap_fail_the_shells_write(mount: Mount) -> None:
    folder = mount.path / RECIPE
    real = real_of(folder)
    before = real.read_bytes()
    r = sh("head -c 9000000 /dev/zero | tr '\\0' x > current/big.md", folder)
    assert r.returncode != 0 and "File too large" in r.stderr
    assert real.read_bytes() == before


def test_emptying_chmod_and_chown_of_a_message_are_refused(mount: Mount) -> None:
    """Emptying a message (``truncate -s 0``) fails at close (EPERM, as ``rm`` does);
    ``chmod``/``chown`` to another mode or owner fail (EPERM), to the same one pass (editors
    copy them onto a file they saved); ``touch`` passes and changes nothing; an empty new
    file is a draft: listed, nothing appended, saved once text is written into it."""
    folder = mount.path / RECIPE
    real = real_of(folder)
    before = real.read_bytes()
    cur = folder / "current"
    r = sh("truncate -s 0 0002-user.md", cur)
    assert r.returncode != 0 and "Operation not permitted" in r.stderr
    mode = f"{os.stat(cur / '0002-user.md').st_mode & 0o7777:o}"
    assert sh(f"chmod {mode} 0002-user.md && touch 0002-user.md", cur).returncode == 0
    for cmd in ("chmod 000 0002-user.md", "chmod 000 ../../tree.txt", "chown 4242 0002-user.md"):
        r = sh(cmd, cur)
        assert r.returncode != 0 and "Operation not permitted" in r.stderr, cmd
    tree_mode = f"{os.stat(folder / 'tree.txt').st_mode & 0o7777:o}"
    assert sh(f"chmod {tree_mode} tree.txt", folder).returncode == 0  # (its mode already)
    assert sh(": > draft.md", cur).returncode == 0
    assert (cur / "draft.md").exists() and real.read_bytes() == before
    assert sh("echo 'now with text' >> draft.md", cur).returncode == 0
    (line,) = real.read_bytes()[len(before) :].splitlines()
    assert json.loads(line)["message"]["content"][0]["text"] == "now with text"


# -- 6. options out of range ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--cache-mb", "-5"],
        ["--disk-cache-mb", "-1"],
        ["--max-message-mb", "0"],
        ["--max-message-mb", "nan"],
        ["--cache-idle", "-1"],
        ["-o", "cache_mb=-5"],
    ],
)
def test_an_option_out_of_range_is_refused_at_start(
    sessions: Path, tmp_path: Path, args: list[str]
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        r = pisessfs("mount", "--sessions", str(sessions), *args, str(mnt))
    finally:
        if is_mounted(mnt):  # (taken after all: the test fails, and leaves no mount behind)
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith("pisessfs: --") and "must be" in line
    assert not is_mounted(mnt)


def test_a_disk_cache_folder_open_to_others_is_said_on_the_terminal(
    sessions: Path, tmp_path: Path
) -> None:
    """A folder made with a plain mkdir (mode 755): the mount runs without the cache, and
    says so where the user looks, not only in its log."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with mounted(sessions, "--disk-cache", str(folder)) as m:
        assert (m.path / RECIPE / "tree.txt").read_bytes()
        said = [line for line in m.log_text().splitlines() if line.startswith("pisessfs:")]
    assert said == [
        f"pisessfs: no disk cache: {folder} must be yours alone, it is uid {os.getuid()} "
        f"mode 755 (chmod 700 it); mounting without it"
    ]
    assert os.listdir(folder) == []


# -- 9. the demo keeps what was saved in it ----------------------------------------------------


def demo(mnt: Path, *args: str) -> str:
    r = pisessfs("demo", str(mnt), *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_demo_again_keeps_what_was_saved_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # (its log)
    mnt = mount_base() / f"demo-{uuid.uuid4().hex[:8]}"
    try:
        said = demo(mnt)
        assert "a fresh copy of the example sessions" in said
        assert "echo " in said and "vim " in said  # a write and an edit among the hints
        sh("echo 'kept across demos' > current/kept.md", mnt / RECIPE)
        assert pisessfs("umount", str(mnt)).returncode == 0
        said = demo(mnt)
        assert "kept as you left them" in said
        assert "kept across demos" in (mnt / RECIPE / "current.md").read_text()
        assert pisessfs("umount", str(mnt)).returncode == 0
        said = demo(mnt, "--reset")
        assert "a fresh copy" in said
        assert "kept across demos" not in (mnt / RECIPE / "current.md").read_text()
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        with contextlib.suppress(OSError):
            mnt.rmdir()


# -- 10. a session file seen before its first line -------------------------------------------


def test_a_session_file_seen_empty_is_named_once_its_header_is_there(mount: Mount) -> None:
    project = mount.path / RECIPE.split("/")[0]
    stem = "2026-12-05T07-00-00-000Z_01a244ff-0000-7000-8000-000000000001"
    real = real_of(mount.path / RECIPE).parent / f"{stem}.jsonl"
    real.write_bytes(b"")
    assert stem in os.listdir(project)  # (no header yet: its stem for now)
    header = {
        "type": "session",
        "version": 3,
        "id": "01a244ff-0000-7000-8000-000000000001",
        "timestamp": "2026-12-05T07:00:00.000Z",
        "cwd": "/home/ana/src/recipe-box",
    }
    with real.open("ab") as f:
        f.write(json.dumps(header).encode() + b"\n" + pi_line("aa000001", None, "A new session"))
    name = "2026-12-05T0700-a-new-session-01a244ff"
    wait_for(lambda: name in os.listdir(project), 5, "the session named from its header")
    assert stem not in os.listdir(project)
    assert os.readlink(project / stem) == name  # the stem still leads there
    assert (project / name / "current" / "0001-user.md").read_text() == "A new session\n"


# -- 11. Pi's next storage ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        {"v": 4, "kind": "header", "storageVersion": 1, "id": "h2", "createdAt": 1795168800000},
        {"kind": "header", "version": 4, "id": "h1", "createdAt": 1795168800000, "cwd": "/w"},
    ],
    ids=["v-4-storage-1", "version-4"],
)
def test_pi_next_storage_is_shown_read_only_and_named(
    sessions: Path, header: dict[str, object]
) -> None:
    entry: dict[str, object] = {"kind": "entry", "lane": "main", "type": "message", "id": "e1"}
    entry.update(parentId=None, seq=1, timestamp=1795168800000)
    entry["message"] = {"role": "user", "content": "hello from the next storage"}
    folder = sessions / "--next--"
    folder.mkdir()
    real = folder / "n.jsonl"
    real.write_bytes(b"".join(json.dumps(d).encode() + b"\n" for d in (header, entry)))
    before = real.read_bytes()
    with mounted(sessions) as m:
        s = m.path / "next" / "n"
        doc = json.loads((s / "session.json").read_text())
        assert doc["storage"]["kind"] == "pi harness storage"
        assert "harness storage (version 4)" in (s / "conversation.md").read_text()
        r = sh("echo 'no' > current/new.md", s)
        assert r.returncode != 0 and "Read-only file system" in r.stderr
        r = subprocess.run(
            ["setfattr", "-n", "user.pi.name", "-v", "x", str(s)], text=True, capture_output=True
        )
        assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert real.read_bytes() == before


# -- 8. ids that are names as they are -----------------------------------------------------------


ODD_IDS = ["..12", ".7", "-rf", "-", "..", ".", "a b", "%41", "x.md", ".git"]


def test_every_entry_id_that_is_a_name_resolves_under_nodes(sessions: Path, tmp_path: Path) -> None:
    """Ids that are legal names but odd (``..12``, ``.7``, ``-rf``) resolve as
    ``nodes/<id>`` and ``leaves/<id>`` themselves, as every entry Pi loads does by its
    escaped name (``.`` and ``..`` can only be that; ``.git``, which walkers look for in
    every folder, too)."""
    folder = sessions / "--odd--"
    folder.mkdir()
    header = {"type": "session", "version": 3, "id": "odd", "cwd": "/o"}
    header["timestamp"] = "2026-03-05T08:47:12.004Z"
    lines, parent = [json.dumps(header).encode() + b"\n"], None
    for eid in ODD_IDS:
        lines.append(pi_line(eid, parent, f"message {eid}"))
        parent = eid
    lines.append(pi_line("-leaf", "..12", "a branch"))
    real = folder / "odd.jsonl"
    real.write_bytes(b"".join(lines))
    copy = tmp_path / "pi.jsonl"
    copy.write_bytes(real.read_bytes())
    ids = [e["id"] for e in pi(str(copy))["entries"]]
    assert sorted(ids) == sorted([*ODD_IDS, "-leaf"])
    with mounted(sessions) as m:
        s = m.path / "odd" / "odd"
        for eid in ids:
            escaped = s / "nodes" / id_name(eid)
            assert os.getxattr(escaped, "user.pi.id").decode() == eid
            if eid not in (".", "..", ".git"):
                assert os.getxattr(s / "nodes" / eid, "user.pi.id").decode() == eid, eid
                assert os.getxattr(s / "nodes" / f"{eid}.md", "user.pi.id").decode() == eid
        for leaf in ("-leaf", "x.md"):
            assert os.getxattr(s / "leaves" / leaf, "user.pi.id").decode() == leaf
        assert sh("ls nodes/-rf/ && cat nodes/..12/*-user.md", s).returncode == 0


# -- 7. a fast-growing session ------------------------------------------------------------------


def test_paths_that_existed_keep_resolving_when_a_branch_passes_9999_files(
    sessions: Path,
) -> None:
    """A session Pi writes fast grows past 9,999 entries on one branch: its files are then
    numbered with five digits (00001-user.md), and ``current/0001-user.md``, which a reader
    held as a path all along, still leads to the same message (unlisted)."""
    real = sessions / "--long--" / "long.jsonl"
    real.parent.mkdir()
    header = {"type": "session", "version": 3, "id": "l1", "cwd": "/l"}
    header["timestamp"] = "2026-03-05T08:47:12.004Z"
    lines = [json.dumps(header).encode() + b"\n"]
    parent: str | None = None
    for i in range(9990):
        lines.append(pi_line(f"{i:08x}", parent, f"m{i}"))
        parent = f"{i:08x}"
    real.write_bytes(b"".join(lines))
    with mounted(sessions) as m:
        cur = m.path / "long" / "long" / "current"
        assert (cur / "0001-user.md").read_text() == "m0\n"
        with real.open("ab") as f:
            for i in range(9990, 10010):
                f.write(pi_line(f"{i:08x}", parent, f"m{i}"))
                parent = f"{i:08x}"
        wait_for(lambda: os.readlink(cur).startswith("leaves/0000271"), 10, "the new leaf")
        listed = sorted(os.listdir(cur))
        assert listed[0] == "00001-user.md" and len(listed) == 10010
        assert (cur / "0001-user.md").read_text() == "m0\n"  # (the name it had)
        ids = {os.getxattr(cur / n, "user.pi.id") for n in ("0001-user.md", "00001-user.md")}
        assert ids == {b"00000000"}
        assert not (cur / "000001-user.md").exists()  # (never a name there)
