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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FORK, KANBAN, RECIPE, Mount, mounted, wait_for

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


def pi_line(eid: str, parent: str, text: str) -> bytes:
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
    parent = None
    for i in range(3000):
        lines.append(pi_line(f"{i:08x}", parent or "", f"message {i} " + "lorem ipsum " * 90))
        parent = f"{i:08x}"
    lines[1] = lines[1].replace(b'"parentId": ""', b'"parentId": null')
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
