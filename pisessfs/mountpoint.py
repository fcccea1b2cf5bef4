"""What is at a mountpoint, found without ever asking the filesystem mounted there.

This module owns the facts about a mountpoint that ``cli``, ``mount`` and ``watchdog`` need:
the mount table (``/proc/self/mountinfo``), a path as that table spells it, why a mount would
fail (checked before mounting), which processes hold a mount busy, and unmounting. A live FUSE
mount whose daemon is stuck can hang any ``stat`` or ``open`` under it (fuse-notes §1.9), so
nothing here touches a path that is a mountpoint: it reads ``/proc`` and calls ``umount2``.
Standard library only: the watchdog process imports it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import stat
import subprocess
import threading
from dataclasses import dataclass, field

MOUNTINFO = "/proc/self/mountinfo"
FUSE_CONF = "/etc/fuse.conf"
FUSE_DEV = "/dev/fuse"
FUSERMOUNT = "fusermount3"
# Where libfuse looks for fusermount3 before $PATH (its FUSERMOUNT_DIR, /usr/bin on Debian).
FUSERMOUNT_DIRS = ("/usr/bin", "/bin")
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8


@dataclass(frozen=True, slots=True)
class Mount:
    """One row of mountinfo: enough to tell this mount from a later one on the same path."""

    mount_id: int
    dev: str  # "major:minor"; a FUSE mount's minor is its connection number
    path: str
    fstype: str
    source: str
    options: str = field(default="", compare=False)  # the superblock's: user_id=N, ...

    def owner(self) -> int | None:
        """The uid a FUSE mount belongs to (its ``user_id=``), None for other filesystems."""
        for option in self.options.split(","):
            key, _, value = option.partition("=")
            if key == "user_id" and value.isdigit():
                return int(value)
        return None

    def same(self, other: Mount) -> bool:
        return (self.mount_id, self.dev, self.path, self.fstype) == (
            other.mount_id,
            other.dev,
            other.path,
            other.fstype,
        )


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def table(source: str = MOUNTINFO) -> list[Mount]:
    """Every mount this process sees, in mount order (a later row covers an earlier one)."""
    with open(source, encoding="utf-8", errors="surrogateescape") as f:
        rows = f.read().splitlines()
    out = []
    for row in rows:
        fields = row.split(" ")
        try:
            sep = fields.index("-", 6)
            out.append(
                Mount(
                    int(fields[0]),
                    fields[2],
                    _unescape(fields[4]),
                    fields[sep + 1],
                    _unescape(fields[sep + 2]),
                    fields[sep + 3] if len(fields) > sep + 3 else "",
                )
            )
        except (ValueError, IndexError):
            continue
    return out


def top(path: str, source: str = MOUNTINFO) -> Mount | None:
    """The mount that ``path`` (as mountinfo spells it) shows, or None if it is no mountpoint."""
    found = [m for m in table(source) if m.path == path]
    return found[-1] if found else None


def canonical(path: str, _links: int = 40) -> str:
    """``path`` absolute and without symlinks, as mountinfo spells it.

    The last component is checked against the mount table before anything resolves it: a
    mountpoint is never stat'ed (``realpath`` would, and a stuck mount would hang it)."""
    parent, name = os.path.split(os.path.abspath(os.path.expanduser(path)))
    if not name:  # "/"
        return parent
    here = os.path.join(os.path.realpath(parent), name)
    if top(here) is not None:
        return here
    try:
        if _links <= 0 or not stat.S_ISLNK(os.lstat(here).st_mode):
            return here
        target = os.readlink(here)
    except OSError:
        return here
    return canonical(os.path.join(os.path.dirname(here), target), _links - 1)


def fusermount() -> str | None:
    """fusermount3 where libfuse finds it: its own folder first, then $PATH."""
    for folder in FUSERMOUNT_DIRS:
        candidate = os.path.join(folder, FUSERMOUNT)
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(FUSERMOUNT)


def user_allow_other(conf: str = FUSE_CONF) -> bool:
    """Whether fuse.conf has ``user_allow_other`` on a line by itself (comments are ``#``)."""
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in f)
    except OSError:
        return False


def problem(
    path: str,
    *,
    allow_other: bool = False,
    nonempty: bool = False,
    uid: int | None = None,
    device: str | None = None,
    conf: str | None = None,
    helper: str | None = "",
) -> str | None:
    """Why mounting on ``path`` (canonical) would fail or hide something, in one line; None if
    nothing known stops it. ``uid``, ``device`` (default FUSE_DEV), ``conf`` (FUSE_CONF) and
    ``helper`` (fusermount3's path, None for missing, "" to look it up) are for the tests."""
    uid = os.geteuid() if uid is None else uid
    device = FUSE_DEV if device is None else device
    conf = FUSE_CONF if conf is None else conf
    helper = fusermount() if helper == "" else helper
    if not os.path.exists(device):
        return (
            f"FUSE is not available: {device} is missing (load the module: modprobe fuse; "
            f"in a container, pass --device {device})"
        )
    if helper is None:
        return f"{FUSERMOUNT} is not installed (apt install fuse3): FUSE mounts need it"
    why = _device_problem(device, uid, helper)
    if why:
        return why
    here = top(path)
    if here is not None:
        return (
            f"{path} is already mounted ({here.fstype} from {here.source}); "
            f"unmount it first: pisessfs umount {path}"
        )
    return _folder_problem(path, nonempty=nonempty, uid=uid) or _allow_other_problem(
        allow_other, uid, conf
    )


def _device_problem(device: str, uid: int, helper: str) -> str | None:
    """An unopenable /dev/fuse; when fusermount3 is setuid root, it opens it for a user."""
    try:
        st = os.stat(helper)
    except OSError:
        st = None
    if uid != 0 and st is not None and st.st_mode & stat.S_ISUID and st.st_uid == 0:
        return None
    try:
        os.close(os.open(device, os.O_RDWR | os.O_CLOEXEC))
    except OSError as err:
        return f"cannot open {device}: {err.strerror}"
    return None


def _folder_problem(path: str, *, nonempty: bool, uid: int) -> str | None:
    if not os.path.isdir(path):
        return f"mountpoint {path} is not a folder (mkdir it first)"
    if uid != 0 and not os.access(path, os.W_OK):
        return f"mountpoint {path} is not writable by you ({FUSERMOUNT} requires it)"
    if not nonempty:
        try:
            count = len(os.listdir(path))
        except OSError as err:
            return f"cannot list mountpoint {path}: {err.strerror}"
        if count:
            what = "entry" if count == 1 else "entries"
            return (
                f"mountpoint {path} is not empty ({count} {what} the mount would hide); "
                "use an empty folder, or -o nonempty to mount over them"
            )
    return None


def _allow_other_problem(allow_other: bool, uid: int, conf: str) -> str | None:
    if allow_other and uid != 0 and not user_allow_other(conf):
        return f"--allow-other needs a line `user_allow_other` in {conf} (or mount as root)"
    return None


def holders(path: str, proc: str = "/proc") -> list[tuple[int, str]]:
    """Processes using something under the mount at ``path``: (pid, command name), by what
    /proc names (cwd, root, open files, mapped files); the filesystem itself is not asked."""
    inside = path.rstrip("/") + "/"
    out = []
    for pid in sorted(int(p) for p in os.listdir(proc) if p.isdigit()):
        base = f"{proc}/{pid}"
        if any(t == path or t.startswith(inside) for t in _targets(base)):
            out.append((pid, _comm(base)))
    return out


def _targets(base: str) -> list[str]:
    links = [f"{base}/cwd", f"{base}/root"]
    with contextlib.suppress(OSError):
        links += [f"{base}/fd/{fd}" for fd in os.listdir(f"{base}/fd")]
    out = []
    for link in links:
        try:
            out.append(os.readlink(link))
        except OSError:
            continue
    try:
        with open(f"{base}/maps", encoding="utf-8", errors="replace") as f:
            rows = [row.split(None, 5) for row in f]
    except OSError:
        rows = []
    out += [parts[5].rstrip("\n") for parts in rows if len(parts) == 6]
    return out


def _comm(base: str) -> str:
    try:
        with open(f"{base}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def unmount(path: str, *, lazy: bool = False) -> None:
    """Unmount ``path``, or detach it (``lazy``). Raises OSError (EBUSY, EINVAL: not mounted,
    EPERM). Root calls umount2 itself; a user goes through setuid fusermount3."""
    if os.geteuid() == 0:
        _umount2(path, (MNT_DETACH if lazy else 0) | UMOUNT_NOFOLLOW)
        return
    helper = fusermount() or FUSERMOUNT
    cmd = [helper, "-u", *(["-z"] if lazy else []), "--", path]
    done = subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace"
    )
    if done.returncode:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        code = errno.EBUSY if "busy" in message else errno.EPERM
        if "not mounted" in message or "not found in" in message:
            code = errno.EINVAL
        raise OSError(code, message)


def _umount2(path: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(path), ctypes.c_int(flags)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)


#: What opening the root of a FUSE mount whose daemon is gone answers.
DEAD = (errno.ENOTCONN, errno.ECONNABORTED)


def probe(path: str, timeout: float) -> int | None:
    """Open the root of the mount on ``path`` and say how it answered: 0, an errno (``DEAD``
    for a daemon that is gone), or None when it did not answer within ``timeout`` (a live
    but stuck daemon). An open always reaches the daemon, where a stat may be answered from
    the kernel's cache; it is asked in a thread, so a stuck mount cannot hang the caller."""
    answer: list[int] = []

    def ask() -> None:
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
            answer.append(0)
        except OSError as err:
            answer.append(err.errno or errno.EIO)

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout)
    return answer[0] if answer else None
