"""``pisessfs status``: every mount of this user with its sessions folder, pid, uptime, log,
sessions parsed and memory, from mountinfo and the daemons' status files; never from the mount
itself, so a dead or a stuck mount is answered for at once.

Real processes (needs /dev/fuse and fusermount3: skips loudly without them, fails in CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pisessfs import cli, mountpoint, status
from tests.conftest import (
    RECIPE,
    fuse_missing,
    is_mounted,
    mount_base,
    mounted,
    need,
    need_open_flags,
    pisessfs,
    wait_for,
)
from tests.test_lifecycle import (
    defeat_auto_unmount,
    fds_of,
    kill_9,
    process_inside,
    watchdog_of,
)

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A runtime and a state dir of the test's own (also for mounts started by ``mounted``)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return dict(os.environ)


def status_json(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = pisessfs("status", "--json", env=env)
    assert out.returncode == 0 and not out.stderr, out
    return {e["mountpoint"]: e for e in json.loads(out.stdout)}


def status_files(env: dict[str, str]) -> list[str]:
    folder = Path(env["XDG_RUNTIME_DIR"]) / "pisessfs"
    return sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []


@contextlib.contextmanager
def background(sessions: Path, env: dict[str, str], *extra: str) -> Iterator[Path]:
    """A default-mode (daemonized) mount; always unmounted. No render workers unless asked
    for (as ``conftest.mounted``): these tests assert what the daemon itself parses."""
    need(fuse_missing() is None, fuse_missing() or "")
    mnt = mount_base() / uuid.uuid4().hex[:8]
    mnt.mkdir()
    if not any(a.startswith("--workers") for a in extra):
        extra = ("--workers", "0", *extra)
    try:
        out = pisessfs("mount", *extra, "--sessions", str(sessions), str(mnt), env=env)
        assert out.returncode == 0, out.stderr
        yield mnt
    finally:
        if is_mounted(mnt):
            pisessfs("umount", str(mnt), env=env)
            if is_mounted(mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
        mnt.rmdir()


def daemon_of(mnt: Path) -> int:
    """The pid whose command line mounts ``mnt`` and that holds /dev/fuse: found by /proc."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            fds = fds_of(int(name))
        except OSError:
            continue
        if "mount" in argv and str(mnt) in argv and "/dev/fuse" in fds:
            return int(name)
    raise AssertionError(f"no daemon for {mnt}")


def test_status_lists_two_mounts_with_their_fields(
    sessions: Path, env: dict[str, str], tmp_path: Path
) -> None:
    b_log = tmp_path / "b.log"
    started = time.time()
    with (
        background(sessions, env) as a,
        background(sessions, env, "-o", "ro", "--log", str(b_log)) as b,
    ):
        (a / RECIPE / "current" / "0002-user.md").read_bytes()  # one session parsed in a
        got = status_json(env)
        ea, eb = got[str(a)], got[str(b)]
        assert ea["pid"] == daemon_of(a) and eb["pid"] == daemon_of(b)
        assert (ea["state"], eb["state"]) == ("running", "running")
        assert ea["sessions"] == eb["sessions"] == str(sessions)
        assert ea["log"] == str(cli.default_log(str(a))) and eb["log"] == str(b_log)
        assert (ea["read_only"], eb["read_only"]) == (False, True)
        assert ea["parsed"] >= 1 and ea["parsed_bytes"] > 0 and eb["parsed"] == 0
        # one cap counts it all: the parsed session and the answers its folders gave
        assert ea["answered"] >= 1 and ea["held_bytes"] > ea["parsed_bytes"]
        assert ea["kept"] == eb["kept"] == 0 and ea["kept_bytes"] == 0  # none dropped
        assert ea["fresh"] and eb["fresh"]  # both answered the request for fresh numbers
        assert ea["disk_cache"] == eb["disk_cache"] == f"{os.environ['XDG_CACHE_HOME']}/pisessfs"
        assert ea["disk_entries"] == 0 and ea["disk_bytes"] == 0  # (saved at unmount)
        for e in (ea, eb):
            assert 0 <= e["uptime"] <= time.time() - started + 1
            assert e["rss"] > 4 << 20 and e["cache_bytes"] == 1024 << 20
        files = list(sessions.rglob("*.jsonl"))
        projects = [p for p in sessions.iterdir() if p.is_dir()]
        assert ea["shown"] == eb["shown"] == len(files) and ea["projects"] == len(projects)
        assert ea["refused"] is None and ea["fast"] is True
        text = pisessfs("status", env=env).stdout
        for mnt, e, head in ((a, ea, "read-write"), (b, eb, "read-only")):
            block = next(blk for blk in text.split("\n\n") if blk.startswith(f"{mnt}: "))
            lines = block.splitlines()
            assert lines[0] == f"{mnt}: mounted, {head}", block
            shown = f"{len(files)} sessions in {len(projects)} projects"
            assert lines[1] == f"  sessions   {sessions}: {shown}", block
            assert lines[2].startswith(f"  daemon     pid {e['pid']}, up ")
            assert lines[2].endswith(" MiB of memory")
            assert lines[3] == f"  log        {e['log']}"
            read = f"{e['parsed']} session{'' if e['parsed'] == 1 else 's'} read ("
            assert lines[4].startswith(f"  in memory  {read}"), block
            assert lines[4].endswith(" of up to 1,024 MiB"), block
            assert e["held_bytes"] >= 0 and e["answered"] >= 0
            cache = os.path.join(os.environ["XDG_CACHE_HOME"], "pisessfs")
            kept = f"{cache}: 0 sessions of this mount kept (0 KiB for all mounts)"
            assert lines[5] == f"  disk cache {kept}", block
            assert lines[6] == "  refused    nothing", block
        assert len(status_files(env)) == 2
    got = status_json(env)
    assert str(a) not in got and str(b) not in got
    assert status_files(env) == []  # removed at the clean exit


def test_status_counts_requests_and_those_answered_at_once(
    sessions: Path, env: dict[str, str]
) -> None:
    """A walk over sessions whose files did not change is answered from what was kept,
    at once (the patched pyfuse3 asks ``lookup_now`` and the rest before any coroutine):
    ``status`` says how many requests came and how many were answered so."""
    need_open_flags()  # (the patched pyfuse3)
    with background(sessions, env) as mnt:
        for _ in range(2):  # the second walk: every session answered before, unchanged
            walked = subprocess.run(["grep", "-r", "-c", "a", str(mnt)], capture_output=True)
            assert walked.returncode == 0 and walked.stdout, walked
        e = status_json(env)[str(mnt)]
        assert 0 < e["at_once"] < e["requests"], e  # (for scripts: the text leaves it out)


def test_status_says_the_last_refused_save_and_why(sessions: Path, env: dict[str, str]) -> None:
    with background(sessions, env) as mnt:
        r = subprocess.run(
            ["bash", "-c", f"printf 'caf\\xe9\\n' > '{mnt / RECIPE}/current/x.md'"],
            capture_output=True,
        )
        assert r.returncode != 0
        e = status_json(env)[str(mnt)]
        assert e["refused"].startswith("write refused (not-utf8): ") and e["refused_at"]
        text = pisessfs("status", env=env).stdout
        (line,) = [ln for ln in text.splitlines() if ln.startswith("  refused ")]
        assert "write refused (not-utf8): " in line and "not UTF-8 at byte 3" in line


def test_a_mount_whose_daemon_is_killed_leaves_no_status(
    sessions: Path, env: dict[str, str]
) -> None:
    with mounted(sessions) as m:
        wait_for(lambda: len(status_files(env)) == 1, 10, "the status file")
        kill_9(m.proc.pid)
        m.proc.wait()
        wait_for(lambda: not is_mounted(m.path), 10, "the watchdog to detach the dead mount")
        assert len(status_files(env)) == 1  # what kill -9 leaves behind ...
        assert str(m.path) not in status_json(env)
        assert status_files(env) == []  # ... is cleared by the next status


def test_status_reports_a_dead_mount_and_how_to_clear_it(
    sessions: Path, env: dict[str, str]
) -> None:
    with mounted(sessions) as m, process_inside(m.path / RECIPE):
        wd = watchdog_of(m.path)
        assert wd is not None
        kill_9(wd)
        defeat_auto_unmount(m)
        pid = m.proc.pid
        kill_9(pid)
        assert is_mounted(m.path)
        e = status_json(env)[str(m.path)]
        assert (e["state"], e["pid"], e["sessions"]) == ("dead", pid, str(sessions))
        text = pisessfs("status", env=env).stdout
        assert (
            f"{m.path}: dead, its daemon (pid {pid}) is gone; clear it: pisessfs umount {m.path}"
            in text.splitlines()
        ), text
        assert pisessfs("umount", str(m.path)).returncode == 0
        assert str(m.path) not in status_json(env)
        assert status_files(env) == []


def test_status_answers_at_once_for_a_stuck_mount(sessions: Path, env: dict[str, str]) -> None:
    with mounted(sessions) as m:
        os.kill(m.proc.pid, signal.SIGSTOP)  # any stat inside the mount would now hang
        try:
            begun = time.monotonic()
            e = status_json(env)[str(m.path)]
            assert time.monotonic() - begun < 10
            assert (e["state"], e["pid"], e["fresh"]) == ("running", m.proc.pid, False)
            text = pisessfs("status", env=env).stdout
            assert "ago: no answer now)" in text, text
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
        assert status_json(env)[str(m.path)]["fresh"]


def test_status_shows_only_this_users_pisessfs_mounts(tmp_path: Path, env: dict[str, str]) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
        "45 22 0:40 / /home/ana/pi rw,nosuid - fuse.pisessfs pisessfs rw,user_id=1000,group_id=1\n"
        "46 22 0:41 / /home/bo/pi rw,nosuid - fuse.pisessfs pisessfs rw,user_id=1001,group_id=1\n"
        "47 22 0:42 / /home/ana/x rw,nosuid - fuse.sshfs ana@x: rw,user_id=1000,group_id=1\n"
    )
    rows = status.collect(1000, ask=False, source=str(info))
    assert [(e.mount.path, e.record) for e in rows] == [("/home/ana/pi", None)]
    assert mountpoint.table(str(info))[1].owner() == 1000
    assert mountpoint.table(str(info))[0].owner() is None


def test_status_says_when_the_pyfuse3_is_the_slow_stock_one() -> None:
    """A plain ``pip install`` runs on PyPI's pyfuse3: ``status`` (and the log, once) say
    walks are slower and how to get the fast one."""
    from pisessfs import mountpoint, status

    rec = status.Record(
        pid=1, start_ticks=1, started=0.0, updated=0.0, mountpoint="/m", mount_id=1, dev="0:1",
        sessions="/s", log="/l", read_only=False, parsed=0, parsed_bytes=0, cache_bytes=1 << 30,
        fast=False,
    )  # fmt: skip
    m = mountpoint.Mount(1, "0:1", "/m", "fuse.pisessfs", "pisessfs")
    text = status.as_text(status.Entry(m, rec, True, True, 1 << 20), 0.0)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("  slower ")]
    assert "the stock one" in line and "scripts/install" in line
    rec.fast = True
    assert "slower" not in status.as_text(status.Entry(m, rec, True, True, 1 << 20), 0.0)


def test_status_says_how_far_the_search_index_is(sessions: Path, env: dict[str, str]) -> None:
    """Before the first search: not built; after it, every session indexed, in words."""
    with background(sessions, env) as mnt:
        e = status_json(env)[str(mnt)]
        assert e["search"] is None, e  # (not built: built at the first search)
        n = len(list(sessions.rglob("*.jsonl")))
        os.listdir(mnt / "search" / "the")
        want = f"{n:,} of {n:,} sessions indexed"
        wait_for(lambda: status_json(env)[str(mnt)]["search"] == want, 10, "the index")
        assert f"search     {want}" in pisessfs("status", env=env).stdout
