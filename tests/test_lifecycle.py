"""The mount's life: a killed daemon leaves no dead mount, clean unmounts leave nothing, a mount
that cannot work is refused with its real reason, umount says what holds a mount, the log.

Real processes (``pisessfs mount``, ``pisessfs umount``, kill -9) need /dev/fuse and
fusermount3 (skip loudly without them; fail in CI); the checks before mounting are also tested
as plain functions.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pisessfs import __version__, cli, mountpoint
from tests.conftest import (
    RECIPE,
    RECIPE_STEM,
    REPO,
    Mount,
    fuse_missing,
    is_mounted,
    mount_base,
    mounted,
    need,
    pisessfs,
    wait_for,
)

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)

PARENT = "74cc97d5"  # the last entry of RECIPE's resume branch


def cmdlines() -> Iterator[tuple[int, list[str]]]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            yield int(name), [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def alive(pid: int) -> bool:
    """Running: neither gone nor a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def helper_of(mnt: Path) -> int:
    """fusermount3's auto_unmount helper of the mount on ``mnt`` (libfuse 3.14 runs
    ``fusermount3 -o ...,auto_unmount,... -- MNT`` as a child of the daemon, in its own session)."""
    found = [
        pid
        for pid, argv in cmdlines()
        if argv and os.path.basename(argv[0]) == "fusermount3" and argv[-1] == str(mnt)
        if alive(pid)
    ]
    assert len(found) == 1, found
    return found[0]


def watchdog_of(mnt: Path) -> int | None:
    found = [
        pid
        for pid, argv in cmdlines()
        if "pisessfs.watchdog" in argv and argv[-1] == str(mnt) and alive(pid)
    ]
    return found[0] if found else None


def kill_9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), 10, f"pid {pid} to die")


def defeat_auto_unmount(m: Mount) -> None:
    """Fault injection: the auto_unmount helper gone, as when its open of the mountpoint gets
    ECONNABORTED (it unmounts only on ENOTCONN) — what made kill -9 leave dead mounts."""
    kill_9(helper_of(m.path))


@contextlib.contextmanager
def process_inside(folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose cwd is inside the mount (a shell cd'd into a session)."""
    proc = subprocess.Popen(["sleep", "600"], cwd=folder)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def no_traceback(m: Mount) -> None:
    assert "Traceback" not in m.log_text(), m.log_text()


# -- Task: kill -9 never leaves a dead mount -------------------------------------------------


@pytest.mark.parametrize("inside", [False, True], ids=["nobody-inside", "a-shell-inside"])
def test_kill_9_leaves_no_dead_mount_even_when_auto_unmount_fails(
    sessions: Path, inside: bool
) -> None:
    with mounted(sessions) as m, contextlib.ExitStack() as stack:
        if inside:
            stack.enter_context(process_inside(m.path / RECIPE / "current"))
        defeat_auto_unmount(m)
        kill_9(m.proc.pid)
        m.proc.wait()
        wait_for(lambda: not is_mounted(m.path), 10, "the watchdog to detach the dead mount")
        wait_for(lambda: watchdog_of(m.path) is None, 10, "the watchdog to exit")
    assert f"left {m.path} mounted: detached it" in m.log_text(), m.log_text()
    no_traceback(m)


def fds_of(pid: int) -> list[str]:
    """What ``pid``'s descriptors lead to. A process still starting (the watchdog imports
    its modules) opens and closes files meanwhile: a descriptor gone by the time it is read
    held nothing that stays (``/dev/fuse`` would)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "fusermount3 -u"])
def test_a_clean_unmount_leaves_nothing_behind(sessions: Path, how: str) -> None:
    with mounted(sessions) as m:
        wd = watchdog_of(m.path)
        assert wd is not None, "no watchdog process"
        held = fds_of(wd)
        assert "/dev/fuse" not in held and os.readlink(f"/proc/{wd}/cwd") == "/", held
        if how == "fusermount3 -u":
            subprocess.run(["fusermount3", "-u", str(m.path)], check=True)
        else:
            m.proc.send_signal(getattr(signal, how))
        assert m.proc.wait(timeout=20) == 0, m.log_text()
        assert not is_mounted(m.path)
        assert not alive(wd), "the watchdog outlived a clean unmount"
    assert "watchdog" not in m.log_text(), m.log_text()
    no_traceback(m)


def _signal_while_trio_wakes_a_task(monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    """Fault injection: ``sig`` is raised once, just after trio's I/O loop has woken the task
    that waited on a readable descriptor and before it has marked it woken."""
    import trio

    real_reschedule = trio.lowlevel.reschedule
    manager = trio._core._io_epoll.EpollIOManager
    real_process = manager.process_events

    def process_events(self: object, events: object) -> None:
        def reschedule(task: object, *args: object) -> None:
            real_reschedule(task, *args)  # type: ignore[arg-type]
            monkeypatch.setattr("trio._core.reschedule", real_reschedule)
            signal.raise_signal(sig)  # the signal arrives now

        monkeypatch.setattr("trio._core.reschedule", reschedule)
        try:
            real_process(self, events)  # type: ignore[arg-type]
        finally:
            monkeypatch.setattr("trio._core.reschedule", real_reschedule)

    monkeypatch.setattr(manager, "process_events", process_events)


def test_a_signal_that_comes_while_trio_wakes_the_fuse_reader_ends_the_loop_cleanly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CI saw SIGTERM end a mount with exit code 1. A signal handler runs between any two
    bytecodes of trio's own loop; one that called ``pyfuse3.terminate()`` just as trio woke the
    task reading /dev/fuse woke it twice (TrioInternalError). A pipe stands for /dev/fuse."""
    import pyfuse3
    import trio

    from pisessfs import mount

    r, w = os.pipe()
    exited = False

    def terminate() -> None:  # what pyfuse3.terminate does, on the pipe
        nonlocal exited
        exited = True
        trio.lowlevel.notify_closing(r)

    async def reader() -> None:  # pyfuse3's _session_loop, in short
        while not exited:
            try:
                await trio.lowlevel.wait_readable(r)
            except trio.ClosedResourceError:
                return
            os.read(r, 1)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(mount._stop_on, {signal.SIGTERM})
            nursery.start_soon(reader)
            await trio.sleep(0.05)
            os.write(w, b"x")  # trio wakes the reader; the signal comes meanwhile
            with trio.fail_after(10):
                while not exited:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    monkeypatch.setattr(pyfuse3, "terminate", terminate)
    _signal_while_trio_wakes_a_task(monkeypatch, signal.SIGTERM)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    caplog.set_level(logging.INFO, logger="pisessfs")
    try:
        trio.run(main)
    finally:
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # drops one left pending, if any
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.close(r)
        os.close(w)
    assert exited
    assert "signal 15: unmounting" in caplog.text


def test_the_watchdog_never_unmounts_a_mount_that_is_not_its_own(sessions: Path) -> None:
    with mounted(sessions) as m:
        real = mountpoint.top(str(m.path))
        assert real is not None and real.fstype == "fuse.pisessfs"
        read_end, write_end = os.pipe()
        wd = subprocess.Popen(
            [
                *(sys.executable, "-m", "pisessfs.watchdog", "--fd", str(read_end)),
                *("--mount-id", str(real.mount_id + 1000), "--dev", real.dev),
                *("--type", real.fstype, "--pid", "1", "--", str(m.path)),
            ],
            pass_fds=(read_end,),
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        os.close(read_end)
        os.close(write_end)  # "its daemon" is gone; the mount there is another one
        _, said = wd.communicate(timeout=20)
        assert (wd.returncode, said) == (0, "")
        assert os.path.ismount(m.path) and os.listdir(m.path)  # still up and serving


def test_kill_9_rounds_with_writers_a_shell_inside_and_a_busy_machine(sessions: Path) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    real = next(sessions.rglob(RECIPE_STEM + ".jsonl"))
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        for rnd in range(8):
            with mounted(sessions) as m:
                s = m.path / RECIPE
                before = real.stat().st_size
                writer = subprocess.Popen(
                    ["sh", "-c", 'i=0; while :; do i=$((i+1)); echo "x $i" > current/new.md; done'],
                    cwd=s,
                    stderr=subprocess.DEVNULL,
                )
                with process_inside(s / "current"):
                    wait_for(lambda: real.stat().st_size > before + 2000, 20, "some commits")  # noqa: B023
                    kill_9(m.proc.pid)
                    m.proc.wait()
                    wait_for(lambda: not is_mounted(m.path), 10, f"no dead mount, round {rnd}")
                writer.kill()
                writer.wait()
            data = real.read_bytes()
            assert data.endswith(b"\n"), f"round {rnd}: torn last line"
            for raw in data.splitlines():
                json.loads(raw)
    finally:
        for b in burners:
            b.kill()
            b.wait()


# -- Task: a mount that cannot work says why --------------------------------------------------


def test_a_second_mount_on_the_same_folder_is_refused_and_nothing_is_stacked(
    sessions: Path,
) -> None:
    with mounted(sessions) as m:
        for mode in (["-f"], []):
            out = pisessfs("mount", *mode, "--sessions", str(sessions), str(m.path))
            assert out.returncode == 1
            assert out.stderr == (
                f"pisessfs: {m.path} is already mounted (fuse.pisessfs from pisessfs); "
                f"unmount it first: pisessfs umount {m.path}\n"
            )
            assert [e.path for e in mountpoint.table()].count(str(m.path)) == 1
        assert os.listdir(m.path)


def test_a_folder_that_is_not_empty_is_refused_unless_nonempty(sessions: Path) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    mnt = mount_base() / uuid.uuid4().hex[:8]
    mnt.mkdir()
    (mnt / "notes.txt").write_text("mine\n")
    try:
        out = pisessfs("mount", "-f", "--sessions", str(sessions), str(mnt))
        assert out.returncode == 1 and not is_mounted(mnt)
        assert out.stderr == (
            f"pisessfs: mountpoint {mnt} is not empty (1 entry the mount would hide); "
            "use an empty folder, or -o nonempty to mount over them\n"
        )
        (mnt / "notes.txt").unlink()
        with mounted(sessions) as m:  # the check itself must not stop a good mount
            assert os.listdir(m.path)
    finally:
        with contextlib.suppress(OSError):
            (mnt / "notes.txt").unlink()
        mnt.rmdir()


def test_nonempty_mounts_over_a_folder_that_is_not_empty(sessions: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    need(fuse_missing() is None, fuse_missing() or "")
    mnt = mount_base() / uuid.uuid4().hex[:8]
    mnt.mkdir()
    (mnt / "notes.txt").write_text("mine\n")
    try:
        out = pisessfs("mount", "-o", "nonempty", "--sessions", str(sessions), str(mnt), env=env)
        assert out.returncode == 0, out.stderr
        assert is_mounted(mnt) and "notes.txt" not in os.listdir(mnt)
        assert pisessfs("umount", str(mnt)).returncode == 0
        wait_for(lambda: not is_mounted(mnt), 10, "the unmount")
        assert (mnt / "notes.txt").read_text() == "mine\n"
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
        (mnt / "notes.txt").unlink()
        mnt.rmdir()


def test_the_checks_before_mounting_name_the_real_reason(tmp_path: Path) -> None:
    empty = tmp_path / "mnt"
    empty.mkdir()
    conf = tmp_path / "fuse.conf"
    conf.write_text("# user_allow_other\nmount_max = 1000\n")
    mnt = str(empty)
    assert mountpoint.problem(mnt, device=str(tmp_path / "fuse")) == (
        f"FUSE is not available: {tmp_path / 'fuse'} is missing (load the module: modprobe "
        f"fuse; in a container, pass --device {tmp_path / 'fuse'})"
    )
    assert mountpoint.problem(mnt, helper=None) == (
        "fusermount3 is not installed (apt install fuse3): FUSE mounts need it"
    )
    assert mountpoint.problem(mnt, allow_other=True, uid=1000, conf=str(conf)) == (
        f"--allow-other needs a line `user_allow_other` in {conf} (or mount as root)"
    )
    assert mountpoint.problem(mnt, allow_other=True, uid=0, conf=str(conf)) is None
    conf.write_text("user_allow_other   # let the family see it\n")
    assert mountpoint.problem(mnt, allow_other=True, uid=1000, conf=str(conf)) is None
    assert mountpoint.problem(str(tmp_path / "nope")) == (
        f"mountpoint {tmp_path / 'nope'} is not a folder (mkdir it first)"
    )
    (empty / "a").touch()
    (empty / "b").touch()
    assert "is not empty (2 entries" in (mountpoint.problem(mnt) or "")
    assert mountpoint.problem(mnt, nonempty=True) is None
    root = mountpoint.top("/")
    assert root is not None
    assert mountpoint.problem("/", nonempty=True) == (
        f"/ is already mounted ({root.fstype} from {root.source}); "
        "unmount it first: pisessfs umount /"
    )


def test_an_unopenable_device_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "fuse"
    fake.mkdir()  # opening it read-write fails (EISDIR), root or not
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    assert mountpoint.problem(str(mnt), device=str(fake), uid=0) == (
        f"cannot open {fake}: Is a directory"
    )


def test_mountinfo_paths_are_unescaped(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
        "45 22 0:40 / /home/ana/my\\040pi\\134x rw,nosuid shared:1 - fuse.pisessfs pisessfs rw\n"
        "46 45 0:41 / /home/ana/my\\040pi\\134x rw - fuse.other src rw\n"
    )
    rows = mountpoint.table(str(info))
    assert rows[1] == mountpoint.Mount(
        45, "0:40", "/home/ana/my pi\\x", "fuse.pisessfs", "pisessfs"
    )
    assert mountpoint.top("/home/ana/my pi\\x", str(info)) == rows[2]  # the later one covers it


def test_libfuse_reasons_become_the_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    pyfuse3 = pytest.importorskip("pyfuse3")
    from pisessfs import mount as mount_mod

    def fails(*_: object) -> None:
        os.write(2, b"fusermount3: mountpoint /x not owned by user\n")
        raise RuntimeError("fuse_session_mount failed")

    monkeypatch.setattr(pyfuse3, "init", fails)
    opts = mount_mod.MountOptions(sessions="/", mountpoint="/x")
    with pytest.raises(mount_mod.MountError) as exc:
        mount_mod._init(None, opts)  # type: ignore[arg-type]
    assert str(exc.value) == "fusermount3: mountpoint /x not owned by user"


# -- umount ------------------------------------------------------------------------------------


def test_umount_of_a_busy_mount_names_its_holders_and_lazy_detaches(sessions: Path) -> None:
    with mounted(sessions) as m, process_inside(m.path / RECIPE) as shell:
        out = pisessfs("umount", str(m.path))
        assert out.returncode == 1 and is_mounted(m.path)
        assert out.stderr == (
            f"pisessfs: {m.path} is busy, in use by pid {shell.pid} (sleep); close them, or "
            f"`pisessfs umount --lazy {m.path}` to detach it anyway\n"
        )
        out = pisessfs("umount", "--lazy", str(m.path))
        assert out.returncode == 0, out.stderr
        assert not is_mounted(m.path)
    no_traceback(m)


def test_umount_of_a_folder_that_is_not_mounted_says_so(tmp_path: Path) -> None:
    out = pisessfs("umount", str(tmp_path))
    assert (out.returncode, out.stderr) == (1, f"pisessfs: {tmp_path} is not mounted\n")
    out = pisessfs("umount", "/proc")
    assert (out.returncode, out.stderr) == (
        1,
        "pisessfs: /proc is not a pisessfs mount (it is proc); not touching it\n",
    )
    assert mountpoint.top("/proc") is not None


def test_a_stale_mount_is_refused_then_cleared_with_a_process_inside(sessions: Path) -> None:
    with mounted(sessions) as m, process_inside(m.path / RECIPE):
        wd = watchdog_of(m.path)
        assert wd is not None
        kill_9(wd)  # every guard gone: the dead mount of the old days
        defeat_auto_unmount(m)
        kill_9(m.proc.pid)
        assert is_mounted(m.path)
        with pytest.raises(OSError) as dead:
            os.listdir(m.path)
        # "Transport endpoint is not connected"; ECONNABORTED when the kernel still had a
        # request in flight as the daemon died (both mean a dead mount: mountpoint.DEAD)
        assert dead.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        out = pisessfs("mount", "-f", "--sessions", str(sessions), str(m.path))
        assert out.returncode == 1 and "is already mounted" in out.stderr, out.stderr
        out = pisessfs("umount", str(m.path))
        assert out.returncode == 0, out.stderr
        assert (
            out.stderr == f"pisessfs: cleared the stale mount on {m.path} (its daemon was gone)\n"
        )
        assert not is_mounted(m.path)


# -- the log, --version ------------------------------------------------------------------------


def test_a_background_mount_logs_where_it_says_with_its_version_and_refusals(
    sessions: Path, tmp_path: Path
) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    mnt = mount_base() / uuid.uuid4().hex[:8]
    mnt.mkdir()
    want = tmp_path / "state" / "pisessfs" / (str(mnt).strip("/").replace("/", "-") + ".log")
    try:
        out = pisessfs("mount", "--sessions", str(sessions), str(mnt), env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"pisessfs: mounted {sessions} on {mnt} (log: {want})\n"
        with pytest.raises(PermissionError):
            (mnt / RECIPE / "tree.txt").write_text("x")
        assert pisessfs("umount", str(mnt)).returncode == 0
        wait_for(lambda: "unmounted" in want.read_text(), 10, "the daemon to finish")
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
        mnt.rmdir()
    lines = want.read_text().splitlines()
    assert f"pisessfs {__version__} (pid " in lines[0], lines
    assert any("WARNING" in ln and "refused (EACCES)" in ln for ln in lines), lines
    assert "Traceback" not in want.read_text()


def test_the_default_sessions_folder_is_where_pi_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Pi 1.6 finds it: $PI_CODING_AGENT_SESSION_DIR, else an absolute ``sessionDir`` in
    <agent dir>/settings.json, else <agent dir>/sessions (agent dir: $PI_CODING_AGENT_DIR,
    else ~/.pi/agent); ``~`` is the home folder in each."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    monkeypatch.delenv("PI_CODING_AGENT_SESSION_DIR", raising=False)
    assert cli.default_sessions() == tmp_path / ".pi" / "agent" / "sessions"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "~/agent")
    assert cli.default_sessions() == tmp_path / "agent" / "sessions"
    settings = tmp_path / "agent" / "settings.json"
    settings.parent.mkdir()
    for text, found in [
        ('{"sessionDir": "~/kept"}', tmp_path / "kept"),
        ('{"sessionDir": "/srv/pi"}', Path("/srv/pi")),
        ('{"sessionDir": "file:///srv/pi%20x"}', Path("/srv/pi x")),
        ('{"sessionDir": "per-project"}', tmp_path / "agent" / "sessions"),  # relative: no
        ('{"sessionDir": 7}', tmp_path / "agent" / "sessions"),
        ("[1]", tmp_path / "agent" / "sessions"),
        ("{not json", tmp_path / "agent" / "sessions"),
    ]:
        settings.write_text(text)
        assert cli.default_sessions() == found, text
    settings.write_text('{"sessionDir": "~/kept"}')
    monkeypatch.setenv("PI_CODING_AGENT_SESSION_DIR", "~/env")
    assert cli.default_sessions() == tmp_path / "env"  # the environment wins, as in Pi


def test_a_mount_without_sessions_mounts_the_folder_pi_uses(sessions: Path, tmp_path: Path) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env["PI_CODING_AGENT_SESSION_DIR"] = str(sessions)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # (a disk cache of its own)
    mnt = mount_base() / uuid.uuid4().hex[:8]
    mnt.mkdir()
    try:
        out = pisessfs("mount", str(mnt), env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"pisessfs: mounted {sessions} on {mnt} ")
        assert (
            "pytest fails on the ingredient parser"
            in (mnt / RECIPE / "conversation.md").read_text()
        )
    finally:
        pisessfs("umount", str(mnt))
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
        mnt.rmdir()


def test_log_option_in_the_foreground_writes_the_file_not_stderr(
    sessions: Path, tmp_path: Path
) -> None:
    logfile = tmp_path / "my.log"
    with mounted(sessions, "--log", str(logfile)) as m:
        assert os.listdir(m.path)
    assert m.log_text() == f"pisessfs: logging to {logfile}\n"
    text = logfile.read_text()
    assert "mounted " in text and "unmounted" in text


def test_the_log_file_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "LOG_BYTES", 2000)
    handler = cli._LogFile(tmp_path / "m.log", redirect=False)
    logger = logging.getLogger("pisessfs-test-cap")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for i in range(500):
            logger.error("line %d %s", i, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["m.log", "m.log.1", "m.log.2"]
    assert all((tmp_path / n).stat().st_size <= 2000 for n in names)
    assert "line 499" in (tmp_path / "m.log").read_text()


def test_version() -> None:
    out = pisessfs("--version")
    assert (out.returncode, out.stdout) == (0, f"pisessfs {__version__}\n")
