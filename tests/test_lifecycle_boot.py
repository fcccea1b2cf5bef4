"""Mounting every day: the systemd user unit, the /etc/fstab line through mount.fuse3, and the
one line the demo says when FUSE is missing.

Real processes. The mount(8) tests run as root in a private mount namespace (``unshare -m``),
where /usr/local/bin is this venv's ``pisessfs``: mount(8) clears $PATH, so mount.fuse3's shell
finds ``pisessfs`` only in the default one (/usr/local/bin, /usr/bin, /bin, ...); nothing
outside the namespace changes. The unit is checked with ``systemd-analyze verify``, run the way
systemd runs it (ExecStart with $NOTIFY_SOCKET, then ExecStop), and started for real where a
systemd user manager runs; each skips loudly when its tool or the manager is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pisessfs import cli, mountpoint, unit
from tests.conftest import (
    REPO,
    fuse_missing,
    is_mounted,
    mount_base,
    need,
    pisessfs,
    wait_for,
)
from tests.test_lifecycle import alive, watchdog_of

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)

SCRIPT = Path(sys.executable).parent / "pisessfs"  # the venv's console script


def need_root_namespace() -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    need(
        os.geteuid() == 0 and shutil.which("unshare") is not None,
        "mount(8) tests need root and unshare (util-linux) for a mount namespace",
    )
    need(SCRIPT.exists(), f"{SCRIPT} is missing: install the package (./scripts/setup)")


@pytest.fixture
def mnt() -> Iterator[Path]:
    path = mount_base() / f"every-day {uuid.uuid4().hex[:6]}"  # a space: quoting is tested
    path.mkdir()
    yield path
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)
    path.rmdir()


def in_namespace(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (bash) as root in a private mount namespace whose /usr/local/bin holds
    only ``pisessfs`` (this venv's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):
        (bin_dir / "pisessfs").symlink_to(SCRIPT)
    prologue = f"set -u; mount --bind {shlex.quote(str(bin_dir))} /usr/local/bin\n"
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", prologue + script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd="/",
    )


MOUNT_AND_UMOUNT = r"""
mnt="$MNT"
$MOUNT_COMMAND || { echo "mount failed: $?"; exit 1; }
row=$(grep -F " $(printf %s "$mnt" | sed 's/ /\\040/g') " /proc/self/mountinfo)
echo "row: $row"
ls "$mnt/home-ana-src-recipe-box" | head -1 | sed 's/^/ls: /'
"$PY" -m pisessfs.cli status --json > "$OUT/status.json"
pid=$("$PY" -c 'import json,sys; print([e["pid"] for e in json.load(open(sys.argv[1]))
    if e["mountpoint"] == sys.argv[2]][0])' "$OUT/status.json" "$mnt")
echo "pid: $pid"
umount "$mnt" || { echo "umount failed: $?"; exit 1; }
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && echo "daemon: still running" || echo "daemon: gone"
grep -qF " $(printf %s "$mnt" | sed 's/ /\\040/g') " /proc/self/mountinfo && echo "after: mounted" \
    || echo "after: unmounted"
"""


def fstab_line(sessions: Path, mnt: Path, legacy: bool = False) -> str:
    """The guide's lines (docs/guide.md; fstab writes a space as \\040)."""
    m = str(mnt).replace(" ", "\\040")
    if legacy:
        return f"{SCRIPT}#{sessions} {m} fuse noauto,user 0 0\n"
    return f"{sessions} {m} fuse.pisessfs noauto,user 0 0\n"


@pytest.mark.parametrize(
    "how",
    [
        "mount -t fuse.pisessfs SRC MNT -o ro",
        "fstab: SRC MNT fuse.pisessfs noauto,user",
        "fstab: PISESSFS#SRC MNT fuse noauto,user",
    ],
)
def test_mount_8_mounts_through_mount_fuse3_and_umount_8_unmounts(
    sessions: Path, mnt: Path, tmp_path: Path, how: str
) -> None:
    need_root_namespace()
    fstab = tmp_path / "fstab"
    fstab.write_text(fstab_line(sessions, mnt, legacy="#" in how))
    if how.startswith("mount -t"):
        command = 'mount -t fuse.pisessfs "$SRC" "$mnt" -o ro'
    else:
        command = 'mount -T "$FSTAB" "$mnt"'
    out = in_namespace(
        MOUNT_AND_UMOUNT.replace("$MOUNT_COMMAND", command),
        tmp_path,
        MNT=str(mnt),
        SRC=str(sessions),
        FSTAB=str(fstab),
        PY=sys.executable,
        OUT=str(tmp_path),
        XDG_RUNTIME_DIR=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    said = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert out.returncode == 0 and not out.stderr, out
    fields = said["row"].split(" ")
    mount_opts, fstype, fsopts = fields[5].split(","), fields[-3], fields[-1].split(",")
    assert fstype == "fuse.pisessfs" and "user_id=0" in fsopts, said["row"]
    if "user" in how:  # mount(8) turns user into noexec,nosuid,nodev: all reach the kernel
        assert {"nosuid", "nodev", "noexec"} <= set(mount_opts), said["row"]
    read_only = how.endswith("-o ro")
    assert mount_opts[0] == ("ro" if read_only else "rw"), said["row"]
    assert said["ls"].startswith("2026-03-02T0914-fix-fraction-parsing"), said
    assert (said["daemon"], said["after"]) == ("gone", "unmounted"), said


def test_the_helper_shape_takes_mounts_options_and_says_nothing(
    sessions: Path, mnt: Path, tmp_path: Path
) -> None:
    """``pisessfs SRC MNT -o OPTS`` as mount.fuse3 runs it: mount's own options are taken (the
    kernel flags passed on), it returns once mounted and prints nothing, and it takes $HOME
    from the password database (mount(8) clears it; mount.fuse3 says /root)."""
    need(fuse_missing() is None, fuse_missing() or "")
    state = tmp_path / "state"
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "XDG_STATE_HOME": str(state)}
    opts = "rw,nosuid,nodev,noexec,dev,suid,user,noauto,_netdev,nofail,x-systemd.automount,ro"
    out = pisessfs(str(sessions), str(mnt), "-o", opts, env=env)
    try:
        assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
        here = mountpoint.top(str(mnt))
        assert here is not None and here.fstype == "fuse.pisessfs"
        assert os.listdir(mnt)  # up when it returned
        row = next(
            ln
            for ln in Path("/proc/self/mountinfo").read_text().splitlines()
            if ln.split(" ")[0] == str(here.mount_id)
        )
        assert {"ro", "nosuid", "nodev", "noexec"} <= set(row.split(" ")[5].split(","))
        assert (state / "pisessfs" / f"{cli.default_log(str(mnt)).name}").exists()
    finally:
        assert pisessfs("umount", str(mnt)).returncode == 0
    wait_for(lambda: not is_mounted(mnt), 10, "the unmount")
    bad = pisessfs(str(sessions), str(mnt), "-o", "rw,compress", env=env)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("pisessfs: unknown mount option(s): compress (pisessfs takes ")
    assert bad.stderr.count("\n") == 1
    bad = pisessfs(str(sessions), str(mnt), "-o", "cache_idle=-1", env=env)
    said = "pisessfs: --cache-idle -1: must be a number of seconds >= 0\n"
    assert (bad.returncode, bad.stderr) == (2, said)
    env = {k: v for k, v in env.items() if k != "XDG_STATE_HOME"} | {"HOME": "/nonexistent"}
    log = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local/state/pisessfs"
    log /= cli.default_log(str(mnt)).name
    out = pisessfs(str(sessions), str(mnt), "-o", "dev,suid", env=env)
    try:
        assert out.returncode == 0, out.stderr
        assert log.exists()  # under the password database's home, not $HOME
    finally:
        pisessfs("umount", str(mnt))
        wait_for(lambda: not is_mounted(mnt), 10, "the unmount")
        with contextlib.suppress(OSError):
            for p in log.parent.glob(log.name + "*"):
                p.unlink()


# -- the systemd user unit ---------------------------------------------------------------------


def unit_of(tmp_path: Path, *args: str) -> Path:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    out = pisessfs("install-unit", *args, env=env)
    assert out.returncode == 0, out.stderr
    unit = tmp_path / "config" / "systemd" / "user" / "pisessfs@.service"
    assert out.stdout.startswith(f"pisessfs: wrote {unit}; to mount ~/pi")
    assert "systemctl --user enable --now pisessfs@$(systemd-escape --path ~/pi).service" in (
        out.stdout
    )
    printed = pisessfs("install-unit", *args, "--print", env=env)
    assert printed.stdout == unit.read_text()
    return unit


def escape_path(path: Path) -> str:
    """The instance name of ``path``, by systemd-escape when there is one."""
    if shutil.which("systemd-escape"):
        done = subprocess.run(
            ["systemd-escape", "--path", str(path)], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()
    need(False, "systemd-escape is missing (apt install systemd)")
    raise AssertionError("unreachable")


def exec_line(unit: Path, key: str, mountpoint_path: Path) -> list[str]:
    """``key``'s command as systemd would run it for the instance of ``mountpoint_path``: %f
    is the instance unescaped, %% is %, $$ is $, then the words are split as a shell would
    (systemd's quoting is the same for what the unit holds: double quotes, backslashes)."""
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith(f"{key}="))
    instance = escape_path(mountpoint_path)
    done = subprocess.run(
        ["systemd-escape", "--unescape", "--path", instance], capture_output=True, text=True
    )
    f_spec = done.stdout.strip()
    assert f_spec == str(mountpoint_path)
    words = []
    for raw in shlex.split(line.split("=", 1)[1]):
        word = re.sub(r"%(.)", lambda m: {"%": "%", "f": f_spec}[m.group(1)], raw)
        words.append(word.replace("$$", "$"))
    return words


def test_the_unit_passes_systemd_analyze_verify(sessions: Path, tmp_path: Path) -> None:
    unit = unit_of(tmp_path, "--sessions", str(sessions), "-o", "ro")
    text = unit.read_text()
    for want in ("Type=notify", "KillMode=mixed", "ExecStop=", "WantedBy=default.target"):
        assert want in text, text
    need(
        shutil.which("systemd-analyze") is not None,
        "systemd-analyze is missing (apt install systemd): the unit is not verified",
    )
    instance = unit.parent / f"pisessfs@{escape_path(mount_base() / 'my pi')}.service"
    shutil.copyfile(unit, instance)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    for path in (unit, instance):
        done = subprocess.run(
            ["systemd-analyze", "--user", "verify", str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(run)},
            cwd=tmp_path,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done


@pytest.mark.parametrize("abstract", [False, True], ids=["socket-path", "abstract-socket"])
def test_the_unit_reports_ready_when_mounted_and_stops_cleanly(
    sessions: Path, mnt: Path, tmp_path: Path, abstract: bool
) -> None:
    """ExecStart run as systemd runs a Type=notify service: READY=1 arrives on $NOTIFY_SOCKET
    from the main process once the mount is up; ExecStop unmounts; the SIGTERM systemd sends
    right after (KillMode=mixed: to the daemon only), here sent again and again until the
    daemon is gone, ends nothing badly."""
    need(fuse_missing() is None, fuse_missing() or "")
    unit = unit_of(tmp_path, "--sessions", str(sessions))
    start = exec_line(unit, "ExecStart", mnt)
    stop = exec_line(unit, "ExecStop", mnt)
    assert start[1:3] == ["mount", "-f"] and start[-1] == str(mnt), start
    where = f"@pisessfs-test-{uuid.uuid4().hex}" if abstract else str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + where[1:] if abstract else where)
        sock.settimeout(30)
        env = {**os.environ, "NOTIFY_SOCKET": where, "XDG_RUNTIME_DIR": str(tmp_path)}
        log = tmp_path / "journal"
        with log.open("w") as out:
            daemon = subprocess.Popen(start, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            said = sock.recv(4096).decode()
            assert is_mounted(mnt) and os.listdir(mnt)  # up when READY=1 came
            fields = dict(line.split("=", 1) for line in said.splitlines())
            assert fields["READY"] == "1" and fields["MAINPID"] == str(daemon.pid)
            assert fields["STATUS"] == f"mounted {sessions} on {mnt}"
            wd = watchdog_of(mnt)
            assert wd is not None
            assert "NOTIFY_SOCKET" not in Path(f"/proc/{wd}/environ").read_text()
            # A thread the loop started (it inherits the loop's mask, SIGTERM let through)
            # and a session to save at unmount (a longer close): a late SIGTERM must not
            # end the daemon through that thread while it closes.
            assert os.listdir(mnt / "usage")  # (its sums are counted in a thread)
            wait_for(lambda: bool(loop_threads(daemon.pid)), what="a thread started by the loop")
            some = next(p for p in mnt.rglob("conversation.md") if p.stat().st_size)
            assert some.read_bytes()
            done = subprocess.run(stop, capture_output=True, text=True, env=env, timeout=30)
            assert (done.returncode, done.stderr) == (0, ""), done
            deadline = time.monotonic() + 20
            while daemon.poll() is None and time.monotonic() < deadline:
                daemon.send_signal(signal.SIGTERM)
                time.sleep(0.002)
            assert daemon.wait(timeout=1) == 0
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
    assert not is_mounted(mnt) and not alive(wd)
    assert "Traceback" not in log.read_text(), log.read_text()


def loop_threads(pid: int) -> list[str]:
    """The daemon's threads that trio's loop started (its thread cache names them)."""
    names = [t.read_text().strip() for t in Path(f"/proc/{pid}/task").glob("*/comm")]
    return [n for n in names if n.startswith("Trio thread")]


def user_manager() -> str | None:
    """Why no systemd user manager can be used here, or None."""
    if shutil.which("systemctl") is None:
        return "systemctl is missing"
    done = subprocess.run(
        ["systemctl", "--user", "is-system-running"], capture_output=True, text=True
    )
    state = done.stdout.strip()
    if state not in ("running", "degraded"):
        return f"no systemd user manager runs here ({state or done.stderr.strip()})"
    if not os.environ.get("XDG_RUNTIME_DIR"):
        return "XDG_RUNTIME_DIR is not set"
    return None


def test_the_unit_starts_and_stops_under_a_real_user_manager(
    sessions: Path, mnt: Path, tmp_path: Path
) -> None:
    need(fuse_missing() is None, fuse_missing() or "")
    why = user_manager()
    if why:
        pytest.skip(f"the unit is not started for real: {why}")
    unit = unit_of(tmp_path, "--sessions", str(sessions))
    name = f"pisessfs-test-{uuid.uuid4().hex[:8]}"
    runtime_units = Path(os.environ["XDG_RUNTIME_DIR"]) / "systemd" / "user"
    runtime_units.mkdir(parents=True, exist_ok=True)
    template = runtime_units / f"{name}@.service"  # the manager's runtime dir: nothing stays
    shutil.copyfile(unit, template)
    instance = f"{name}@{escape_path(mnt)}.service"

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["systemctl", "--user", *args], capture_output=True, text=True, timeout=60
        )

    try:
        assert ctl("daemon-reload").returncode == 0
        done = ctl("start", instance)  # returns once READY=1 came
        assert done.returncode == 0, done.stderr + ctl("status", instance).stdout
        assert is_mounted(mnt) and os.listdir(mnt)
        pid = int(ctl("show", "-p", "MainPID", "--value", instance).stdout)
        got = {e["mountpoint"]: e for e in json.loads(pisessfs("status", "--json").stdout)}
        assert got[str(mnt)]["pid"] == pid
        assert got[str(mnt)]["log"] == f"the journal: journalctl --user -u {instance}"
        assert ctl("stop", instance).returncode == 0
        assert not is_mounted(mnt) and not alive(pid)
        assert watchdog_of(mnt) is None
    finally:
        ctl("stop", instance)
        template.unlink()
        ctl("daemon-reload")


# -- FUSE missing ------------------------------------------------------------------------------


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out
    assert "Traceback" not in out.stderr + out.stdout
    return out.stderr


def hidden(what: str, *command: str, user: bool = False) -> subprocess.CompletedProcess[str]:
    """``command`` run where ``what`` is hidden: /dev (a tmpfs over it: no /dev/fuse) or
    fusermount3 (/dev/null bound over it: not executable), in a private mount namespace;
    ``user``: as nobody."""
    need(
        os.geteuid() == 0 and shutil.which("unshare") is not None,
        "hiding FUSE needs root and unshare (util-linux) for a mount namespace",
    )
    helper = mountpoint.fusermount() or "/usr/bin/fusermount3"
    setup = {"dev": "mount -t tmpfs tmpfs /dev", "fusermount3": f"mount --bind /dev/null {helper}"}
    prefix = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if user else []
    return subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "bash",
            "-c",
            setup[what] + ' && exec "$@"',
            "_",
            *prefix,
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


def test_without_dev_fuse_the_demo_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    mnt = tmp_path / "demo"
    said = one_line(hidden("dev", sys.executable, "-m", "pisessfs.cli", "demo", str(mnt)))
    assert said == (
        "pisessfs: FUSE is not available: /dev/fuse is missing (load the module: modprobe fuse; "
        "in a container, pass --device /dev/fuse)\n"
    )
    assert not mnt.exists()  # the folder it would have made is not left behind
    said = one_line(hidden("dev", str(REPO / "scripts" / "demo"), str(mnt)))
    assert said == (
        "demo: FUSE is not available: /dev/fuse is missing (load it: sudo modprobe fuse; "
        "in a container, pass --device /dev/fuse)\n"
    )


def test_without_fuse3_installed_the_demo_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    mnt = tmp_path / "demo"
    said = one_line(hidden("fusermount3", sys.executable, "-m", "pisessfs.cli", "demo", str(mnt)))
    assert (
        said == "pisessfs: fusermount3 is not installed (apt install fuse3): FUSE mounts need it\n"
    )
    # nobody runs a copy in a folder everyone can reach: the clone may sit in a 0700 folder
    # (mktemp -d), and the script says what to do before it touches anything of the repo.
    reachable = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        os.chmod(reachable, 0o755)
        (reachable / "scripts").mkdir(mode=0o755)
        script = reachable / "scripts" / "demo"
        shutil.copy2(REPO / "scripts" / "demo", script)
        os.chmod(script, 0o755)
        said = one_line(hidden("fusermount3", str(script), str(mnt), user=True))
    finally:
        shutil.rmtree(reachable)
    assert said == (
        "demo: FUSE's tools are not installed: sudo apt install fuse3 libfuse3-dev pkg-config, "
        "then run this again\n"
    )


class _NoLibfuse:
    """An import hook: pyfuse3 fails to load as it does without libfuse3.so.3."""

    def find_spec(self, name: str, *_: object) -> None:
        if name == "pyfuse3":
            raise ImportError(
                "libfuse3.so.3: cannot open shared object file: No such file or directory"
            )


def test_without_libfuse_the_mount_says_what_to_do_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("pyfuse3", "pisessfs.mount"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoLibfuse(), *sys.meta_path])
    monkeypatch.setattr(mountpoint, "problem", lambda *a, **k: None)
    assert cli.main(["mount", "--sessions", str(tmp_path), str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        "pisessfs: FUSE's library does not load (libfuse3.so.3: cannot open shared object file: "
        "No such file or directory); install it: sudo apt install fuse3\n"
    )


def test_mount_options_are_parsed_as_mount_writes_them() -> None:
    o = cli.parse_options(["ro,nosuid,nodev", "noexec,user,noauto,_netdev,x-gvfs-show"])
    assert (o.ro, o.kernel) == (True, {"nosuid", "nodev", "noexec"})
    o = cli.parse_options(["log=/tmp/a b.log,cache_mb=64,max-message-mb=0.5,allow_other,debug"])
    assert (o.log, o.cache_mb, o.max_message_mb, o.allow_other, o.debug) == (
        "/tmp/a b.log",
        64,
        0.5,
        True,
        True,
    )
    with pytest.raises(ValueError, match=r"^mount option cache_mb=lots: not a number$"):
        cli.parse_options(["cache_mb=lots"])
    assert cli.parse_options(["cache_idle=0.5"]).cache_idle == 0.5
    assert cli.parse_options(["warm"]).warm and not cli.parse_options(["ro"]).warm
    with pytest.raises(ValueError, match=r"^mount option cache_mb=1.5: not a number$"):
        cli.parse_options(["cache_mb=1.5"])  # a number of MiB
    with pytest.raises(ValueError, match=r"^unknown mount option\(s\): ro=1, big_writes "):
        cli.parse_options(["ro=1,big_writes"])


def test_unit_words_are_quoted_for_systemd() -> None:
    assert unit.quote("/home/ana/.pi/agent/sessions") == "/home/ana/.pi/agent/sessions"
    assert unit.quote('/a b/100%/$x"\\') == '"/a b/100%%/$$x\\"\\\\"'
    with pytest.raises(ValueError):
        unit.quote("a\nb")
