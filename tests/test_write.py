"""Writing through a real mount with the programs people use, checked against the real Pi.

Each save must append exactly one line per changed save (none for an unchanged one), under
the parent the user chose, and leave a file that the real Pi ``SessionManager`` loads.
Needs /dev/fuse, fusermount3, vim, nano (apt) and node with the pinned Pi package; skips
loudly without them, fails in CI. Mounts live outside /tmp: vim skips backups under /tmp.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import damaged
from tests.conftest import RECIPE, Mount, is_mounted, mounted, need, pi, wait_for

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

PARENT = "74cc97d5"  # the resume leaf of the recipe session (its last line)
LAST_USER = "0020-user.md"  # "Perfect, commit it please." (parent 7d83cfa9, a session_info)
LAST_USER_ID = "7146efbf"
LAST_USER_PARENT = "7d83cfa9"


@dataclass
class Session:
    mount: Mount
    folder: Path  # the session folder in the mount
    real: Path  # the real JSONL file

    @property
    def current(self) -> Path:
        return self.folder / "current"

    def lines(self) -> list[bytes]:
        return self.real.read_bytes().splitlines()

    def new_entries(self, before: int) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.lines()[before:]]


@pytest.fixture
def s(mount: Mount) -> Iterator[Session]:
    folder = mount.path / RECIPE
    real = Path(os.getxattr(folder, "user.pi.file").decode())
    yield Session(mount, folder, real)


def pi_sees(sess: Session, tmp_path: Path, new_id: str, parent: str | None, text: str) -> None:
    """Every line parses, and the real Pi shows the new entry under ``parent``."""
    for raw in sess.lines():
        json.loads(raw)
    copy = tmp_path / "pi-copy.jsonl"
    shutil.copyfile(sess.real, copy)
    oracle = pi(str(copy))
    assert "error" not in oracle, oracle
    entry = next(e for e in oracle["entries"] if e["id"] == new_id)
    assert entry["parentId"] == parent and entry["role"] == "user"
    assert oracle["userTexts"][new_id] == text
    assert oracle["leafId"] == new_id  # Pi resumes at the last line: ours


def one_new(sess: Session, before: int, tmp_path: Path, parent: str | None, text: str) -> str:
    new = sess.new_entries(before)
    assert len(new) == 1, new
    entry = new[0]
    assert entry["message"]["content"][0] == {"type": "text", "text": text}
    pi_sees(sess, tmp_path, entry["id"], parent, text)
    return str(entry["id"])


def edit_target(sess: Session) -> Path:
    return sess.current / LAST_USER


# -- terminal programs -------------------------------------------------------------------------


def in_tty(
    argv: list[str],
    keys: tuple[tuple[bytes, bytes], ...] = (),
    timeout: float = 20,
    cwd: Path | None = None,
) -> str:
    """Run ``argv`` on a pseudo-terminal; for each (awaited text, keys), send keys once the
    text appeared on screen. Returns the screen output; fails if it does not exit in time."""
    need(shutil.which(argv[0]) is not None, f"{argv[0]} is not installed (apt install {argv[0]})")
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "LINES": "24", "COLUMNS": "80"}
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True
    )
    os.close(slave)
    out = b""
    seen = 0  # keys wait for text that appears after the previous keys were sent
    pending = list(keys)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{argv[0]} did not finish:\n{out.decode(errors='replace')}")
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            if pending and pending[0][0] in out[seen:]:
                seen = len(out)
                os.write(master, pending.pop(0)[1])
        assert proc.wait(timeout=5) == 0, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return out.decode(errors="replace")


def vim(*commands: str, path: Path) -> None:
    args = ["vim", "-N", "-i", "NONE"]
    for c in commands:
        args += ["-c", c]
    in_tty([*args, str(path)])


# -- new messages ------------------------------------------------------------------------------


def test_shell_redirect_to_a_new_file_appends_a_child_of_the_folder(
    s: Session, tmp_path: Path
) -> None:
    before = len(s.lines())
    (s.current / "next.md").write_text("now add tests\n")
    new = one_new(s, before, tmp_path, PARENT, "now add tests")
    assert os.readlink(s.current).startswith(f"leaves/{new}-now-add-tests")
    assert (s.current / "0024-user.md").read_text() == "now add tests\n"
    # the folder of the parent still shows the parent's path
    assert "0024-user.md" not in os.listdir(s.folder / "leaves" / PARENT)


def test_new_message_in_a_node_folder_has_that_parent(s: Session, tmp_path: Path) -> None:
    before = len(s.lines())
    subprocess.run(
        f"echo 'from the middle' > '{s.folder}/nodes/f7fa1295/q.md'", shell=True, check=True
    )
    one_new(s, before, tmp_path, "f7fa1295", "from the middle")


def test_saving_the_same_new_file_twice_appends_once(s: Session, tmp_path: Path) -> None:
    before = len(s.lines())
    subprocess.run(f"echo hello > '{s.current}/n.md'", shell=True, check=True)
    subprocess.run(f"echo hello > '{s.current}/n.md'", shell=True, check=True)
    one_new(s, before, tmp_path, PARENT, "hello")


def test_current_leads_to_the_saved_message_as_soon_as_the_save_returns(s: Session) -> None:
    """The kernel keeps link targets: the save must not answer before it dropped
    ``current``'s, or the next path through ``current`` leads to the old leaf (seen in CI:
    the second of two identical saves appended again)."""
    before = len(s.lines())
    rounds = 20
    script = "".join(
        f"echo r{i} > '{s.current}/n{i}.md' && cat '{s.current}/n{i}.md' && " for i in range(rounds)
    )
    out = subprocess.run(script + "true", shell=True, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"r{i}" for i in range(rounds)]
    new = s.new_entries(before)
    assert [e["parentId"] for e in new[1:]] == [e["id"] for e in new[:-1]]  # a chain
    assert len(new) == rounds


def test_vim_new_file(s: Session, tmp_path: Path) -> None:
    before = len(s.lines())
    vim("normal iwritten in vim", "wq", path=s.current / "idea.md")
    one_new(s, before, tmp_path, PARENT, "written in vim")
    assert not [n for n in os.listdir(s.current) if n.endswith((".swp", "~"))]


# -- edits fork --------------------------------------------------------------------------------


EDITED = "Perfect, commit it please, and push."


def check_fork(s: Session, before: int, tmp_path: Path) -> None:
    new = one_new(s, before, tmp_path, LAST_USER_PARENT, EDITED)
    # current follows the fork: an editor re-reading its path sees what it saved
    assert edit_target(s).read_text() == EDITED + "\n"
    assert os.getxattr(edit_target(s), "user.pi.id").decode() == new
    # the folder that was edited still shows the original
    original = s.folder / "leaves" / PARENT / LAST_USER
    assert original.read_text() == "Perfect, commit it please.\n"
    assert not [
        n for n in os.listdir(original.parent) if n not in os.listdir(s.folder / "nodes" / PARENT)
    ], "scratch files left behind"


SED = "s/please\\./please, and push./"


@pytest.mark.parametrize(
    "tool",
    [
        "vim",
        "vim-backupcopy-yes",
        "nano",
        "sed-i",
        "perl-i",
        "shell-redirect",
        "cp",
        "tee",
        "python-open-w",
        "jetbrains-safe-write",
        "vscode-truncate-write",
    ],
)
def test_editing_a_user_message_forks_once(s: Session, tmp_path: Path, tool: str) -> None:
    before = len(s.lines())
    target = edit_target(s)
    new_text = (EDITED + "\n").encode()
    src = tmp_path / "src.md"
    src.write_bytes(new_text)
    if tool == "vim":
        vim("%" + SED, "wq", path=target)
    elif tool == "vim-backupcopy-yes":
        vim("set backupcopy=yes", "%" + SED, "wq", path=target)
    elif tool == "nano":
        nano_edit(target)
    elif tool == "sed-i":
        subprocess.run(["sed", "-i", SED, str(target)], check=True)
    elif tool == "perl-i":
        subprocess.run(["perl", "-i", "-pe", SED, str(target)], check=True)
    elif tool == "shell-redirect":
        subprocess.run(f"cat '{src}' > '{target}'", shell=True, check=True)
    elif tool == "cp":
        subprocess.run(["cp", str(src), str(target)], check=True)
    elif tool == "tee":
        subprocess.run(["tee", str(target)], input=new_text, stdout=subprocess.DEVNULL, check=True)
    elif tool == "python-open-w":
        with open(target, "w") as f:
            f.write(EDITED + "\n")
    elif tool == "jetbrains-safe-write":
        folder = target.parent.resolve()
        tmp, old = folder / (LAST_USER + "___jb_tmp___"), folder / (LAST_USER + "___jb_old___")
        tmp.write_bytes(new_text)
        subprocess.run(["mv", str(folder / LAST_USER), str(old)], check=True)
        subprocess.run(["mv", str(tmp), str(folder / LAST_USER)], check=True)
        old.unlink()
    elif tool == "vscode-truncate-write":
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, new_text)
        os.fdatasync(fd)
        os.close(fd)
    check_fork(s, before, tmp_path)


def nano_edit(target: Path) -> None:
    # nano: go to the end of the first line, type the change, write out, exit
    in_tty(
        ["nano", str(target)],
        (
            (b"Perfect, commit", b"\x05\x08, and push."),  # ^E end of line, backspace over "."
            (b"push", b"\x0f"),
            (b"File Name to Write", b"\r"),
            (b"Wrote", b"\x18"),
        ),
    )


@pytest.mark.parametrize(
    "tool", ["vim", "nano", "sed-i", "cp", "shell-append-nothing", "printf-no-final-newline"]
)
def test_an_unchanged_save_appends_nothing(s: Session, tmp_path: Path, tool: str) -> None:
    before = s.real.read_bytes()
    target = edit_target(s)
    if tool == "vim":
        vim("w", "q", path=target)
    elif tool == "nano":
        in_tty(
            ["nano", str(target)],
            ((b"Perfect, commit", b"\x0f"), (b"File Name to Write", b"\r"), (b"Wrote", b"\x18")),
        )
    elif tool == "sed-i":
        subprocess.run(["sed", "-i", "s/no such text/x/", str(target)], check=True)
    elif tool == "cp":
        copy = tmp_path / "same.md"
        copy.write_bytes(target.read_bytes())
        subprocess.run(["cp", str(copy), str(target)], check=True)
    elif tool == "printf-no-final-newline":
        subprocess.run(
            ["sh", "-c", f"printf '%s' 'Perfect, commit it please.' > '{target}'"], check=True
        )
    else:
        subprocess.run(f"printf '' >> '{target}'", shell=True, check=True)
    assert s.real.read_bytes() == before
    # and the name is the message itself again (no stand-in left by the editor), once the
    # kernel has dropped the name it moved with the rename (asynchronously, in ms)
    wait_for(lambda: _id_of(target) == LAST_USER_ID, 5, "the message under its name")


def _id_of(path: Path) -> str:
    try:
        return os.getxattr(path, "user.pi.id").decode()
    except OSError:
        return ""


def test_shell_append_forks_with_the_longer_text(s: Session, tmp_path: Path) -> None:
    before = len(s.lines())
    subprocess.run(f"echo 'And push.' >> '{edit_target(s)}'", shell=True, check=True)
    one_new(s, before, tmp_path, LAST_USER_PARENT, "Perfect, commit it please.\nAnd push.")


def test_editing_a_message_with_an_image_carries_the_image(mount: Mount, tmp_path: Path) -> None:
    folder = next(mount.path.glob("home-ana-src-tiny-kanban/2026-03-04*"))
    real = Path(os.getxattr(folder, "user.pi.file").decode())
    target = folder / "current" / "0002-user.md"
    png = (folder / "current" / "0002-user.1.png").read_bytes()
    subprocess.run(["sed", "-i", "1s/^/Please: /", str(target)], check=True)
    entry = json.loads(real.read_bytes().splitlines()[-1])
    images = [b for b in entry["message"]["content"] if b["type"] == "image"]
    assert len(images) == 1
    assert (folder / "current" / "0002-user.1.png").read_bytes() == png


# -- through leaves/<leaf>/ of a branch that is not current -------------------------------------

OTHER_LEAF = "96ce5b75"  # the recipe session's other leaf (its branch of 0013)
OTHER_USER = "0013-user.md"  # "Nice! Can you also support unicode fractions…" on that branch
OTHER_USER_ID = "f7fa1295"
OTHER_USER_PARENT = "c2b2eb43"


def other_leaf(s: Session) -> Path:
    """The folder ``ls leaves/`` shows for the one branch that ``current`` is not."""
    leaves = s.folder / "leaves"
    cur = os.path.basename(os.readlink(s.current))
    (name,) = [n for n in os.listdir(leaves) if not n.endswith(".md") and n != cur]
    assert os.getxattr(leaves / name, "user.pi.id").decode() == OTHER_LEAF
    return leaves / name


def test_new_message_through_a_leaf_that_is_not_current(s: Session, tmp_path: Path) -> None:
    leaf = other_leaf(s)
    listing = sorted(os.listdir(leaf))
    before = len(s.lines())
    subprocess.run(["sh", "-c", f"printf 'on the other branch\\n' > '{leaf}/new.md'"], check=True)
    new = one_new(s, before, tmp_path, OTHER_LEAF, "on the other branch")
    assert [n for n in os.listdir(s.folder / "leaves") if n.startswith(new + "-")]
    assert os.readlink(s.current).startswith(f"leaves/{new}-")
    assert sorted(os.listdir(leaf)) == listing  # the leaf's folder still shows its path


@pytest.mark.parametrize("tool", ["sed-i", "vim", "python-open-w"])
def test_editing_through_a_leaf_that_is_not_current_forks_once(
    s: Session, tmp_path: Path, tool: str
) -> None:
    leaf = other_leaf(s)
    target = leaf / OTHER_USER
    assert _id_of(target) == OTHER_USER_ID
    original, listing = target.read_text(), sorted(os.listdir(leaf))
    before = len(s.lines())
    if tool == "sed-i":
        subprocess.run(["sed", "-i", "1s/^/Please: /", str(target)], check=True)
    elif tool == "vim":
        vim("1s/^/Please: /", "wq", path=target)
    else:
        with open(target, "w") as f:
            f.write("Please: " + original)
    edited = "Please: " + original
    one_new(s, before, tmp_path, OTHER_USER_PARENT, edited.removesuffix("\n"))
    assert (s.current / OTHER_USER).read_text() == edited  # current follows the fork
    # the edited branch still shows the original, and no scratch files are left in it
    wait_for(lambda: _id_of(target) == OTHER_USER_ID, 5, "the original under its name")
    assert target.read_text() == original
    assert sorted(os.listdir(leaf)) == listing


# -- refusals ----------------------------------------------------------------------------------


def errno_of(fn: Any) -> int:
    with pytest.raises(OSError) as exc:
        fn()
    return int(exc.value.errno or 0)


def test_refusals_answer_the_contracts_errno(s: Session) -> None:
    before = s.real.read_bytes()
    cur = s.current
    assert errno_of(lambda: (cur / "0003-assistant.md").write_text("x")) == errno.EACCES
    assert errno_of(lambda: (s.folder / "tree.txt").write_text("x")) == errno.EACCES
    assert errno_of(lambda: (s.folder / "session.jsonl").write_text("x")) == errno.EACCES
    assert errno_of(lambda: (s.folder / "session.json").write_text("x")) == errno.EACCES
    assert errno_of((cur / "0002-user.md").unlink) == errno.EPERM
    assert errno_of(lambda: (cur / "0003-assistant.md").rename(cur / "x.md")) == errno.EPERM
    assert errno_of(lambda: (s.folder / "new.md").write_text("x")) == errno.EACCES
    assert errno_of(lambda: (cur / "bad.md").write_bytes(b"caf\xe9\n")) == errno.EILSEQ
    big = b"x" * (8 << 20) + b"\n"
    assert errno_of(lambda: (cur / "big.md").write_bytes(big)) == errno.EFBIG
    assert s.real.read_bytes() == before


def test_a_live_pi_writer_lock_is_ebusy(s: Session) -> None:
    lock = Path(str(s.real) + ".writer.lock")
    lock.write_text(json.dumps({"pid": os.getpid()}))
    try:
        assert errno_of(lambda: (s.current / "n.md").write_text("hi\n")) == errno.EBUSY
    finally:
        lock.unlink()
    lock.write_text(json.dumps({"pid": 2**22 + 12345}))  # a dead process: no refusal
    (s.current / "n.md").write_text("hi\n")
    assert json.loads(s.lines()[-1])["message"]["content"][0]["text"] == "hi"


def test_a_replaced_file_is_estale(s: Session) -> None:
    f = open(s.current / "n.md", "w")  # noqa: SIM115 (the handle spans the replacement)
    f.write("hello\n")
    copy = s.real.with_suffix(".tmp")
    shutil.copyfile(s.real, copy)
    os.replace(copy, s.real)  # a new inode, as a rewrite by another program makes
    with pytest.raises(OSError) as exc:
        f.close()
    assert exc.value.errno == errno.ESTALE


@pytest.mark.parametrize("case", ["no-version", "version-4", "v1"])
def test_sessions_pi_would_rewrite_are_erofs(sessions: Path, case: str) -> None:
    folder = sessions / "--odd--"
    folder.mkdir()
    if case == "v1":
        data = damaged.line(
            {"type": "session", "id": "x", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/"}
        ) + damaged.line(
            {
                "type": "message",
                "timestamp": "2026-01-01T00:00:01Z",
                "message": {"role": "user", "content": "hi"},
            }
        )
    else:
        data = damaged.cases()[case][0]
    (folder / "s.jsonl").write_bytes(data)
    with mounted(sessions) as m:
        leaf = m.path / "odd" / "s" / "current"
        assert errno_of(lambda: (leaf / "n.md").write_text("x\n")) == errno.EROFS
    assert (folder / "s.jsonl").read_bytes() == data


def test_read_only_mount_refuses_new_files(sessions: Path) -> None:
    with mounted(sessions, "-o", "ro") as m:
        cur = m.path / RECIPE / "current"
        assert errno_of(lambda: (cur / "n.md").write_text("x\n")) == errno.EROFS


# -- concurrency and crashes -------------------------------------------------------------------


def test_pi_appending_while_the_mount_commits_loses_nothing(s: Session, tmp_path: Path) -> None:
    before = len(s.lines())
    node = subprocess.Popen(
        ["node", "tests/pi/oracle.mjs", "--append", str(s.real), PARENT, "from pi", "40"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    ours = 0
    while node.poll() is None or ours < 10:
        (s.current.parent / "nodes" / PARENT / f"m{ours}.md").write_text(f"from mount {ours}\n")
        ours += 1
    pi_ids = json.loads(node.communicate()[0])
    new = s.new_entries(before)
    assert len(new) == 40 + ours
    assert {e["id"] for e in new} >= set(pi_ids)
    texts = [e["message"]["content"][0]["text"] for e in new]
    assert sum(t.startswith("from mount") for t in texts) == ours
    copy = tmp_path / "pi.jsonl"
    shutil.copyfile(s.real, copy)
    assert "error" not in pi(str(copy))


def test_kill_9_during_commits_leaves_whole_lines_and_no_dead_mount(sessions: Path) -> None:
    with mounted(sessions) as m:
        real = Path(os.getxattr(m.path / RECIPE, "user.pi.file").decode())
        writer = subprocess.Popen(
            [
                "python3",
                "-c",
                (
                    "import sys\n"
                    "for i in range(1000):\n"
                    "    try: open(sys.argv[1] + f'/k{i}.md', 'w').write('x' * 500000 + '\\n')\n"
                    "    except OSError: break\n"
                ),
                str(m.path / RECIPE / "nodes" / PARENT),
            ]
        )
        wait_for(lambda: len(real.read_bytes().splitlines()) > 36, 20, "some commits")
        m.proc.send_signal(signal.SIGKILL)
        writer.wait(timeout=20)
        wait_for(lambda: not is_mounted(m.path), 10, "auto_unmount")
    data = real.read_bytes()
    assert data.endswith(b"\n")
    for raw in data.splitlines():
        json.loads(raw)


def test_kill_9_in_the_middle_of_a_line_still_leaves_the_whole_line(
    sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel copies a big write page by page and stops where SIGKILL lands; the fault
    # hook makes that moment last: half the line is written, then a 3 s pause, then the rest.
    monkeypatch.setenv("PISESSFS_FAULT_SPLIT_WRITE", "3")
    text = "half and half " * 20_000 + "end\n"
    with mounted(sessions) as m:
        real = Path(os.getxattr(m.path / RECIPE, "user.pi.file").decode())
        size = real.stat().st_size
        saver = subprocess.Popen(
            [
                "python3",
                "-c",
                "import sys; open(sys.argv[1], 'w').write(sys.stdin.read())",
                str(m.path / RECIPE / "nodes" / PARENT / "k.md"),
            ],
            stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert saver.stdin is not None
        saver.stdin.write(text.encode())
        saver.stdin.close()
        wait_for(lambda: real.stat().st_size > size + len(text) // 4, 20, "half the line")
        m.proc.send_signal(signal.SIGKILL)
        saver.wait(timeout=20)
        wait_for(lambda: not is_mounted(m.path), 10, "auto_unmount")
    wait_for(lambda: real.read_bytes().endswith(b"\n"), 10, "the rest of the line")
    new = real.read_bytes()[size:].splitlines()
    assert len(new) == 1, "one save, one whole line"
    assert json.loads(new[0])["message"]["content"][0]["text"] == text.removesuffix("\n")
