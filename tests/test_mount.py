"""Real mounts driven by the programs people use: ls, cat, grep, rg, find, stat, getfattr.

Needs /dev/fuse and fusermount3 (skips loudly without them; fails in CI).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import damaged
from tests.conftest import (
    KANBAN,
    RECIPE,
    RECIPE_FIRST,
    RECIPE_ID,
    Mount,
    is_mounted,
    mounted,
    need,
    wait_for,
)

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)


def run(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)


def session_dirs(m: Mount) -> list[Path]:
    return sorted(p.parent for p in m.path.glob("*/*/session.jsonl") if not p.parent.is_symlink())


def test_ls_lr_lists_every_session_and_leaf(mount: Mount, sessions: Path) -> None:
    out = run("ls", "-lR", str(mount.path))
    assert out.returncode == 0, out.stderr
    assert len(session_dirs(mount)) == len(list(sessions.rglob("*.jsonl")))
    # a walk meets each session's text once: branches are links into nodes/, which lists nothing
    assert "conversation.md" in out.stdout and "leaves" in out.stdout
    assert "-> ../nodes/" in out.stdout and "0001-" not in out.stdout
    assert "home-ana-src-recipe-box" in os.listdir(mount.path)  # "--x--" shown as "x"


def test_every_file_has_an_exact_size(mount: Mount) -> None:
    checked = 0
    # through the links too: the message files are reached by leaves/ and current
    for dirpath, _dirs, files in os.walk(mount.path, followlinks=True):
        for name in files:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                data = f.read()
            assert os.stat(p).st_size == len(data), p
            checked += 1
    assert checked > 100


def test_cat_shows_user_text_and_current_resolves(mount: Mount) -> None:
    s = mount.path / RECIPE
    assert os.readlink(s / "current") == "leaves/74cc97d5-perfect-commit-it-please"
    first = (s / "current" / "0002-user.md").read_text()
    assert first.startswith(RECIPE_FIRST) and first.endswith("\n")
    png = (mount.path / KANBAN / "current" / "0002-user.1.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_cat_of_a_branch_glob_reads_its_files_through_the_links(mount: Mount) -> None:
    """``cat current/*`` and ``cat leaves/<leaf>/*``, from the session folder as a shell
    runs them: every file of the branch, in name order, through the links."""
    s = mount.path / RECIPE
    for branch in ["current", *(f"leaves/{n}" for n in os.listdir(s / "leaves"))]:
        if branch.endswith(".md"):
            continue
        out = subprocess.run(["sh", "-c", f"cat {branch}/*"], cwd=s, capture_output=True)
        assert out.returncode == 0, out.stderr
        files = sorted(os.listdir(s / branch))
        assert out.stdout == b"".join((s / branch / n).read_bytes() for n in files), branch
        assert out.stdout.count(b"\x89PNG") == len([n for n in files if n.endswith(".png")])
        assert len(files) >= 10, branch


def test_grep_r_finds_conversation_text_as_plain_text(mount: Mount) -> None:
    out = run("grep", "-rl", "Grandma's recipes are full of them", str(mount.path))
    assert out.returncode == 0, out.stderr
    hits = out.stdout.splitlines()
    # the message once, in its session's conversation.md (and its preview in tree.txt)
    assert [h for h in hits if not h.endswith("/tree.txt")] == [
        str(mount.path / RECIPE / "conversation.md")
    ], hits
    # a branch given by its path is followed, as any link on the command line
    branch = mount.path / RECIPE / "leaves" / "96ce5b75-nice-can-you-also-support-unicode"
    out = run("grep", "-rl", "Grandma's recipes are full of them", f"{branch}/")
    assert out.stdout.splitlines() == [f"{branch}/0013-user.md"], out.stdout


def test_rg_finds_tool_output(mount: Mount) -> None:
    need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
    out = run(
        "rg",
        "-l",
        "--no-messages",
        "parser: mixed numbers and unicode fractions",
        str(mount.path / RECIPE),
    )
    assert out.returncode == 0, out.stderr
    hits = [h for h in out.stdout.splitlines() if not h.endswith("/tree.txt")]  # a preview
    assert hits == [str(mount.path / RECIPE / "conversation.md")], out.stdout
    out = run(
        "rg", "-l", "parser: mixed numbers and unicode fractions", f"{mount.path / RECIPE}/current/"
    )
    assert any(h.endswith("0022-tool-bash.md") for h in out.stdout.splitlines()), out.stdout


def test_find_and_stat_show_images_and_entry_times(mount: Mount) -> None:
    out = run("find", "-H", str(mount.path / KANBAN / "current"), "-name", "*.png")
    assert out.returncode == 0 and "0002-user.1.png" in out.stdout, out.stderr
    conv = (mount.path / KANBAN / "conversation.md").read_text()
    assert "](nodes/" in conv and "0002-user.1.png)" in conv  # images as links, never bytes
    f = mount.path / RECIPE / "current" / "0002-user.md"
    mtime = run("stat", "-c", "%Y", str(f)).stdout.strip()
    assert mtime == "1772442914"  # the entry's timestamp, 2026-03-02T09:15:14.769Z


def test_getfattr_shows_pi_ids(mount: Mount) -> None:
    need(shutil.which("getfattr") is not None, "getfattr is not installed (apt install attr)")
    s = mount.path / RECIPE
    out = run("getfattr", "-d", str(s / "current" / "0002-user.md"))
    assert 'user.pi.id="6d3daba2"' in out.stdout, out.stdout + out.stderr
    out = run("getfattr", "-d", str(s))
    assert f'user.pi.session="{RECIPE_ID}"' in out.stdout
    assert "user.pi.file=" in out.stdout


def test_writes_to_the_view_are_refused(mount: Mount) -> None:
    s = mount.path / RECIPE
    for name in ("tree.txt", "session.json", "session.jsonl", "current/0003-assistant.md"):
        with pytest.raises(PermissionError):
            (s / name).write_text("x")


def test_read_only_mount_answers_erofs(sessions: Path) -> None:
    with mounted(sessions, "-o", "ro") as m:
        target = m.path / RECIPE / "current" / "0002-user.md"
        with pytest.raises(OSError) as exc:
            target.write_text("x")
        assert exc.value.errno == errno.EROFS


@pytest.mark.warns
def test_damaged_sessions_show_their_problems_and_the_mount_stays_up(
    sessions: Path, tmp_path: Path
) -> None:
    cases = damaged.write_all(sessions / "--damaged--")
    with mounted(sessions) as m:
        for name, (_, kinds) in cases.items():
            folder = m.path / "damaged" / name
            doc = json.loads((folder / "session.json").read_text())
            found = {p["kind"] for p in doc["problems"]}
            assert kinds <= found, (name, found)
            tree = (folder / "tree.txt").read_text()
            for kind in kinds:
                assert kind in tree, (name, kind)
            assert run("ls", "-lR", str(folder)).returncode == 0
        # the long chain is walked without recursion limits
        chain = m.path / "damaged" / "long-chain" / "current"
        assert len(os.listdir(chain)) == 20_000
        # every other session still answers
        ok = m.path / KANBAN / "current"
        assert os.listdir(ok)
    assert "Traceback" not in m.log_text()
    assert "bom" in m.log_text()  # one warning line names the file and line


def test_sigterm_unmounts_cleanly(sessions: Path) -> None:
    with mounted(sessions) as m:
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(timeout=20) == 0, m.log_text()
        assert not is_mounted(m.path)


def test_sigterm_in_the_middle_of_a_walk_unmounts_cleanly(sessions: Path) -> None:
    """The signal reaches the daemon while requests come and go, as a systemd stop does."""
    with mounted(sessions) as m:
        walkers = [
            subprocess.Popen(
                ["sh", "-c", f"while :; do find {m.path} -type f >/dev/null 2>&1; done"]
            )
            for _ in range(3)
        ]
        try:
            wait_for(lambda: len(os.listdir(m.path)) > 0, 10, "the first listing")
            m.proc.send_signal(signal.SIGTERM)
            assert m.proc.wait(timeout=20) == 0, m.log_text()
        finally:
            for w in walkers:
                w.kill()
                w.wait()
        assert not is_mounted(m.path)
        assert "Traceback" not in m.log_text(), m.log_text()


def test_kill_9_leaves_no_dead_mount(sessions: Path) -> None:
    with mounted(sessions) as m:
        os.listdir(m.path)
        m.proc.kill()
        m.proc.wait()
        wait_for(lambda: not is_mounted(m.path), 10, "auto_unmount after kill -9")


def test_umount_command_unmounts(sessions: Path) -> None:
    with mounted(sessions) as m:
        out = run(sys.executable, "-m", "pisessfs.cli", "umount", str(m.path))
        assert out.returncode == 0, out.stderr
        assert m.proc.wait(timeout=20) == 0, m.log_text()
